// Matrix multiplication with device weights in block format: y = x . W^T, and embedding lookup.
//
// One kernel family serves decode (n = 1), verification (n = 2..16) and prefill (larger n): a
// work-item computes 16 output rows for up to NB activation rows, decoding each weight block once
// for all of them. Batch invariance: row i of y is bitwise the same for every n and every
// position of the row in the batch (each output element is computed by the same operations in
// the same order; docs/quant.md, "Numerics").
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "device/device.h"
#include "ocl/context.h"
#include "quant/device_weight.h"

namespace specdec::quant {

// Activation rows quantised to int8 with one scale per `scale_block` values (the input of the
// block-format kernels). Reusing one for several matmuls of the same x (q/k/v, gate/up) saves the
// quantisation.
struct QuantizedActivations {
  int64_t n = 0;
  int64_t cols = 0;
  int scale_block = 32;  // 32 or 256 (activation_scale_block)
  ocl::Buffer q8;   // [n, cols] int8
  ocl::Buffer q16;  // [n, cols] int16 (the same values; Q8_0 weights multiply 16-bit pairs)
  ocl::Buffer rec;  // [n, cols / 32] {d, d * sum, sum(0..15), sum(16..31)}
  // The buffer whose rows these are (set by quantize_activations and by a norm that quantised its
  // output, ops::QuantizedOut); nullptr when unknown. quantize_activations_of uses it to skip
  // quantising the same x twice.
  cl_mem source = nullptr;
};

// Grows `out` to hold [n, cols] and records the shape and scale_block (32 or 256; source reset);
// false when cols % scale_block != 0 (nothing to quantise: no block-format weight with that scale
// block has such rows).
bool prepare_activations(device::Device& dev, int64_t n, int64_t cols, QuantizedActivations& out,
                         int scale_block = 32);
// quantize_activations unless `out` already holds x's [n, cols] quantisation with that scale block
// (out.source == x, e.g. written by the norm that produced x).
void quantize_activations_of(device::Device& dev, const ocl::Buffer& x, int64_t n, int64_t cols,
                             QuantizedActivations& out, int scale_block = 32);
// The same for the matmul with `w` (its cols and activation_scale_block; nothing for F32 / F16 /
// BF16 weights).
void quantize_activations_for(device::Device& dev, const ocl::Buffer& x, int64_t n,
                              const DeviceWeight& w, QuantizedActivations& out);

// Quantises x [n, cols] (f32) into `out` with one scale per scale_block (32 or 256) values,
// growing its buffers when needed. With cols % scale_block != 0 it records the shape and quantises
// nothing.
void quantize_activations(device::Device& dev, const ocl::Buffer& x, int64_t n, int64_t cols,
                          QuantizedActivations& out, int scale_block = 32);

// Where a matmul writes its [n, rows] result: row i at y + offset + i * stride (floats; stride 0:
// rows, i.e. contiguous). Lets matmuls of different weight types fill column ranges of one wider
// row buffer (q | k stacked and v apart, written into one q | k | v row for the fused epilogue).
struct OutputColumns {
  int64_t offset = 0;
  int64_t stride = 0;
};

// y [n, rows] = x [n, cols] . W^T, all f32. n == 0 does nothing.
void matmul(device::Device& dev, const DeviceWeight& w, const ocl::Buffer& x, int64_t n,
            ocl::Buffer& y);
// The same with x already quantised by quantize_activations with w's activation_scale_block
// (ignored for F32/F16/BF16 weights, which read x itself), writing where `out` says.
void matmul(device::Device& dev, const DeviceWeight& w, const ocl::Buffer& x,
            const QuantizedActivations& xq, int64_t n, ocl::Buffer& y, OutputColumns out = {});

// The same, quantising x into xq first unless xq already holds x's quantisation for w
// (quantize_activations_for): matmuls of one x with weights of different scale blocks each get
// theirs, the others reuse it.
void matmul_reusing(device::Device& dev, const DeviceWeight& w, const ocl::Buffer& x,
                    QuantizedActivations& xq, int64_t n, ocl::Buffer& y, OutputColumns out = {});

// out [n, cols] = scale * W[ids[i], :] (f32), dequantised on the device; ids int32 [n]. Ids are
// clamped to [0, rows) on the device; the host overload checks them first (ConfigError).
void embedding_lookup(device::Device& dev, const DeviceWeight& w, const ocl::Buffer& ids, int64_t n,
                      ocl::Buffer& out, float scale = 1.0f);
void embedding_lookup(device::Device& dev, const DeviceWeight& w, std::span<const int32_t> ids,
                      ocl::Buffer& out, float scale = 1.0f);

// The integer-dot path of the block-format kernels (kernels/quant_common.clh). Every path gives
// bitwise the same results; they differ in speed only.
enum class QuantIsa { kPortable, kAvx2, kAvx512bw, kAvx512vnni };
const char* quant_isa_name(QuantIsa isa);  // "portable", "avx2", "avx512bw", "avx512vnni"
// Parses a name as quant_isa_name writes it; ConfigError naming `field` and the allowed names.
QuantIsa parse_quant_isa(const std::string& name, const std::string& field = "SPECDEC_QUANT_ISA");

// The paths ctx's device can run, portable first and fastest last: an x86 path is offered only
// where the device is a CPU whose cpuid has the features and whose compiler builds the path's
// builtins (probed once per device; the probe is compiled only where it should build, so no
// failed build prints errors).
const std::vector<QuantIsa>& device_quant_isas(ocl::Context& ctx);
// The path matmul uses on ctx's device: the override if one is set, else SPECDEC_QUANT_ISA
// (read once per process), else the fastest the device runs. A forced path the device cannot
// run is a ConfigError naming the variable, the value and the paths it can run.
QuantIsa device_quant_isa(ocl::Context& ctx);
// Forces a path for every later matmul (tests and benchmarks); nullopt restores the default.
void set_quant_isa_override(std::optional<QuantIsa> isa);

// Kernel tuning for one call: activation rows per work-item (NB) and the integer-dot path.
struct MatmulConfig {
  int rows_per_item = 1;  // NB
  QuantIsa isa = QuantIsa::kPortable;
  int prefetch_bytes = 0;  // software prefetch distance in the main weight plane (0: none)
  std::string options() const;
};
// The configuration matmul uses for n activation rows on ctx's device. Environment overrides
// (tuning, read once per process): SPECDEC_QUANT_NB (fixed NB), SPECDEC_QUANT_ISA (see
// device_quant_isa), SPECDEC_QUANT_PREFETCH (bytes, 0 = off).
MatmulConfig matmul_config(ocl::Context& ctx, int64_t n);
// The software prefetch distance a device gets unless SPECDEC_QUANT_PREFETCH says otherwise:
// 2048 bytes on CPUs with an x86 integer path, 0 elsewhere (measured: matmul.cpp).
int default_prefetch_bytes(const ocl::DeviceInfo& device, QuantIsa isa);
// Forces the prefetch distance for this process (tests: both settings give bitwise the same
// results); nullopt restores SPECDEC_QUANT_PREFETCH or the default.
void set_quant_prefetch_override(std::optional<int> bytes);
// Whether ctx's device runs the AVX-512 BW path (or VNNI, which implies it).
bool device_has_avx512bw(ocl::Context& ctx);

}  // namespace specdec::quant
