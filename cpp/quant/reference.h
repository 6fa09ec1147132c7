// Host references of the quantized matmul (y = x . W^T) and of the activation quantisation.
#pragma once

#include <cstdint>
#include <vector>

#include "quant/formats.h"

namespace specdec::quant {

// How matmul_reference computes:
//   kExact:  dequantize_row(W) . x in double, rounded to float once. The ideal answer.
//   kDevice: the device kernels' numerics, operation for operation (docs/quant.md): F32/F16/BF16
//            weights: fma into 4 partial sums by k % 4, then (s0 + s1) + (s2 + s3); block formats:
//            x quantised to int8 with w's activation_scale_block (quantize_activations_reference), exact integer
//            block dots, float accumulation per block in the kernels' order. Where the device
//            rounds as IEEE 754 (PoCL on x86 does) the results agree bitwise.
enum class Numerics { kExact, kDevice };

// y [n, rows] for W = rows x cols in `type`'s row-major ggml blocks at w, x [n, cols].
std::vector<float> matmul_reference(GgmlType type, const uint8_t* w, int64_t rows, int64_t cols,
                                    const float* x, int64_t n,
                                    Numerics numerics = Numerics::kDevice);

// Activation rows quantised exactly as kernels/quant_activation.cl does, with one scale per
// scale_block values: 32 (quantize_activations: d = amax / 127, q = round-half-away(x * (1 / d)))
// or 256 (quantize_activations_256: id = 127 / amax, q = round-half-even(x * id), d = 1 / id).
struct HostActivations {
  int64_t n = 0, cols = 0;
  std::vector<int8_t> q;    // [n, cols]
  std::vector<float> d;     // [n, cols / 32] (with scale_block 256, 8 equal values a group)
  std::vector<int32_t> s0;  // [n, cols / 32]: sum of q over elements 0..15 of the block
  std::vector<int32_t> s1;  // [n, cols / 32]: ... over 16..31
};
HostActivations quantize_activations_reference(const float* x, int64_t n, int64_t cols,
                                               int scale_block = 32);

}  // namespace specdec::quant
