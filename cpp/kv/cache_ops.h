// Writing new K/V rows into a layer's paged cache through the slot mapping, and reading them
// back, on the device (kernels/kv_cache.cl) and as a plain C++ reference on host bytes.
// slot = block_id * block_size + offset; slot -1 means padding and is skipped.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kv/layout.h"
#include "ocl/context.h"

namespace specdec::kv {

enum class KvPart { kK, kV };

const KvPartView& part_of(const LayerKvView& view, KvPart part);

// Checks that every slot is -1 or inside the view's num_blocks * block_size slots
// (ConfigError naming slot_mapping[i]).
void check_slot_mapping(const LayerKvView& view, const std::vector<int32_t>& slot_mapping);

// Device: writes src [num_tokens, num_heads, width] (f32) into `part` of the layer.
void kv_cache_write(ocl::Context& ctx, const ocl::Buffer& cache, const LayerKvView& view,
                    KvPart part, const ocl::Buffer& src, const ocl::Buffer& slot_mapping,
                    int num_tokens);
// Rows of new K or V values for kv_cache_write_kv: token t's heads start at element
// offset + t * token_stride of buffer (token_stride 0: num_heads * width, contiguous).
struct KvRows {
  const ocl::Buffer* buffer = nullptr;
  int64_t offset = 0;
  int64_t token_stride = 0;
};

// Device: K and V in one launch (each exactly as kv_cache_write writes it), the rows read where
// they lie (e.g. the k and v columns of a fused qkv projection). A part of width 0 is skipped.
void kv_cache_write_kv(ocl::Context& ctx, const ocl::Buffer& cache, const LayerKvView& view,
                       const KvRows& k, const KvRows& v, const ocl::Buffer& slot_mapping,
                       int num_tokens);
// Device: reads `part` at each slot into dst [num_tokens, num_heads, width] (f32).
void kv_cache_gather(ocl::Context& ctx, const ocl::Buffer& cache, const LayerKvView& view,
                     KvPart part, const ocl::Buffer& slot_mapping, const ocl::Buffer& dst,
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
