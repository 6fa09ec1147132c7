// Writing new K/V rows into a layer's paged cache through the slot mapping, and reading them
// back, on the device (kernels/kv_cache.cl) and as a plain C++ reference on host bytes.
// slot = block_id * block_size + offset; slot -1 means padding and is skipped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "device/device.h"
#include "kv/layout.h"

namespace specdec::kv {

enum class KvPart { kK, kV };

const KvPartView& part_of(const LayerKvView& view, KvPart part);

// Checks that every slot is -1 or inside the view's num_blocks * block_size slots
// (ConfigError naming slot_mapping[i]).
void check_slot_mapping(const LayerKvView& view, const std::vector<int32_t>& slot_mapping);

// Device: writes src [num_tokens, num_heads, width] (f32) into `part` of the layer.
void kv_cache_write(device::Device& dev, const device::Buffer& cache, const LayerKvView& view,
                    KvPart part, const device::Buffer& src, const device::Buffer& slot_mapping,
                    int num_tokens);
// Rows of new K or V values for kv_cache_write_kv: token t's heads start at element
// offset + t * token_stride of buffer (token_stride 0: num_heads * width, contiguous).
struct KvRows {
  const device::Buffer* buffer = nullptr;
  int64_t offset = 0;
  int64_t token_stride = 0;
};

// Device: K and V in one launch (each exactly as kv_cache_write writes it), the rows read where
// they lie (e.g. the k and v columns of a fused qkv projection). A part of width 0 is skipped.
void kv_cache_write_kv(device::Device& dev, const device::Buffer& cache, const LayerKvView& view,
                       const KvRows& k, const KvRows& v, const device::Buffer& slot_mapping,
                       int num_tokens);
// The epilogue of a fused q | k | v projection (kernels/fused_qkv.cl), one launch for what
// add_bias + rope + split_columns + kv_cache_write_kv do: x [num_tokens, x_stride] holds each
// token's q (q_heads heads), k and v (kv_heads heads each) of head_size elements; the bias (when
// given) is added, q and k are rotated by RoPE (when inv_freq is given: rope_dim = head_size),
// q goes to q_out [num_tokens, q_stride] and k, v into the layer's cache through the slot mapping.
// Bitwise what the separate kernels give.
struct QkvEpilogue {
  const device::Buffer* x = nullptr;
  int64_t x_stride = 0;
  const device::Buffer* bias = nullptr;       // [q + k + v] f32, or null
  const device::Buffer* positions = nullptr;  // int32 [num_tokens]
  const device::Buffer* inv_freq = nullptr;   // f32 [head_size / 2] (ops::RopeTable), or null: no RoPE
  bool neox = false;                       // NEOX pairs (i, i + head_size / 2), else adjacent
  device::Buffer* q_out = nullptr;
  int64_t q_stride = 0;
  int q_heads = 0, kv_heads = 0, head_size = 0;
};
// Whether the fused epilogue can serve this layer: its K and V parts have kv_heads heads of
// head_size (even) elements each.
bool qkv_epilogue_fits(const LayerKvView& view, int kv_heads, int head_size);
void kv_cache_write_qkv(device::Device& dev, const device::Buffer& cache, const LayerKvView& view,
                        const QkvEpilogue& e, const device::Buffer& slot_mapping, int num_tokens);

// Device: reads `part` at each slot into dst [num_tokens, num_heads, width] (f32).
void kv_cache_gather(device::Device& dev, const device::Buffer& cache, const LayerKvView& view,
                     KvPart part, const device::Buffer& slot_mapping, const device::Buffer& dst,
                     int num_tokens);

// Host reference of kv_cache_write on the raw bytes of the layer's tensor.
void kv_cache_write_ref(std::vector<uint8_t>& raw, const LayerKvView& view, KvPart part,
                        const std::vector<float>& src, const std::vector<int32_t>& slot_mapping);
// Host reference of kv_cache_gather.
std::vector<float> kv_cache_gather_ref(const std::vector<uint8_t>& raw, const LayerKvView& view,
                                       KvPart part, const std::vector<int32_t>& slot_mapping);

// The -D define that specialises kernels/cache_dtype.clh for `dtype` ("-DCACHE_F16", ...);
// UnsupportedError naming `who` for a dtype without a device kernel (int8).
std::string cache_dtype_define(DType dtype, const std::string& who);

// Host element access in the layer's dtype (converted to / from float).
float load_element(const std::vector<uint8_t>& raw, DType dtype, int64_t index);
void store_element(std::vector<uint8_t>& raw, DType dtype, int64_t index, float value);

}  // namespace specdec::kv
