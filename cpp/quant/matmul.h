// Matrix multiplication with device weights in block format: y = x . W^T, and embedding lookup.
//
// One kernel family serves decode (n = 1), verification (n = 2..16) and prefill (larger n): a
// work-item computes 16 output rows for up to NB activation rows, decoding each weight block once
// for all of them. Batch invariance: row i of y is bitwise the same for every n and every
// position of the row in the batch (each output element is computed by the same operations in
// the same order; docs/quant.md, "Numerics").
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "ocl/context.h"
#include "quant/device_weight.h"

namespace specdec::quant {

// Activation rows quantised to int8 per 32-block (the input of the block-format kernels). Reusing
// one for several matmuls of the same x (q/k/v, gate/up) saves the quantisation.
struct QuantizedActivations {
  int64_t n = 0;
  int64_t cols = 0;
  ocl::Buffer q8;   // [n, cols] int8
  ocl::Buffer q16;  // [n, cols] int16 (the same values; Q8_0 weights multiply 16-bit pairs)
  ocl::Buffer rec;  // [n, cols / 32] {d, d * sum, sum(0..15), sum(16..31)}
};

// Quantises x [n, cols] (f32) into `out`, growing its buffers when needed. With cols % 32 != 0
// (only F32 / F16 / BF16 weights have such rows) it records the shape and quantises nothing.
void quantize_activations(ocl::Context& ctx, const ocl::Buffer& x, int64_t n, int64_t cols,
                          QuantizedActivations& out);

// y [n, rows] = x [n, cols] . W^T, all f32. n == 0 does nothing.
void matmul(ocl::Context& ctx, const DeviceWeight& w, const ocl::Buffer& x, int64_t n,
            ocl::Buffer& y);
// The same with x already quantised by quantize_activations (ignored for F32/F16/BF16 weights,
// which read x itself).
void matmul(ocl::Context& ctx, const DeviceWeight& w, const ocl::Buffer& x,
            const QuantizedActivations& xq, int64_t n, ocl::Buffer& y);

// out [n, cols] = scale * W[ids[i], :] (f32), dequantised on the device; ids int32 [n]. Ids are
// clamped to [0, rows) on the device; the host overload checks them first (ConfigError).
void embedding_lookup(ocl::Context& ctx, const DeviceWeight& w, const ocl::Buffer& ids, int64_t n,
                      ocl::Buffer& out, float scale = 1.0f);
void embedding_lookup(ocl::Context& ctx, const DeviceWeight& w, std::span<const int32_t> ids,
                      ocl::Buffer& out, float scale = 1.0f);

// Kernel tuning for one call: activation rows per work-item (NB) and the integer-dot path.
struct MatmulConfig {
  int rows_per_item = 1;   // NB
  bool avx512bw = false;   // the vpmaddubsw / vpmaddwd path (QUANT_AVX512BW)
  int prefetch_bytes = 0;  // software prefetch distance in the main weight plane (0: none)
  std::string options() const;
};
// The configuration matmul uses for n activation rows on ctx's device. Environment overrides
// (tuning and tests): SPECDEC_QUANT_NB (fixed NB), SPECDEC_QUANT_ISA=portable|avx512bw,
// SPECDEC_QUANT_PREFETCH (bytes, 0 = off).
MatmulConfig matmul_config(ocl::Context& ctx, int64_t n);
// Whether ctx's device compiles the AVX-512 BW builtins (PoCL on such a CPU); probed once per
// device.
bool device_has_avx512bw(ocl::Context& ctx);

}  // namespace specdec::quant
