// RMSNorm on the device (kernels/ops_norm.cl). Host reference: ops/reference.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "device/device.h"
#include "ops/slice.h"

namespace specdec::ops {

// Where a norm (or another op) also writes its output quantised for the quantized matmuls, with
// one scale per scale_block values (32 or 256, quant::activation_scale_block of the weight that
// reads it; as quant::quantize_activations does; quant::QuantizedActivations' three buffers).
// Needs dim % scale_block == 0 and y at offset 0; the buffers must hold [rows, dim] (and
// [rows, dim / 32] records).
struct QuantizedOut {
  const device::Buffer* q8 = nullptr;   // [rows, dim] int8
  const device::Buffer* q16 = nullptr;  // [rows, dim] int16
  const device::Buffer* rec = nullptr;  // [rows, dim / 32] float4
  int scale_block = 32;
};

// Checks a QuantizedOut for [rows, dim] output of op `op`; ConfigError naming op otherwise.
void check_quantized_out(const QuantizedOut& q, int64_t rows, int64_t dim, const std::string& op);

// y = x / sqrt(mean(x^2) + eps) * (weight + weight_offset), row by row, as llama.cpp computes it
// (squares in f32 summed in double on fp64 devices; see kernels/ops_norm.cl). Without a weight,
// y = x / sqrt(mean(x^2) + eps). Also the per-head q/k norm: rows = num_tokens * num_heads,
// dim = head_size. y may be x (in place). weight_offset is 1 for Hugging Face Gemma weights
// (x * (1 + w)) and 0 for GGUF files, whose converter already added the 1.
// A row's result is bitwise the same whatever `rows` is and wherever the row sits.
void rms_norm(device::Device& dev,
              Slice x,                      // [rows, dim]
              std::optional<Slice> weight,  // [dim] or std::nullopt
              Slice y,                      // [rows, dim]
              int64_t rows, int dim, float eps, float weight_offset = 0.0f,
              const QuantizedOut* quantized = nullptr);

// The residual step fused with the next norm, one launch instead of two:
//   x += residual (x is written back: the residual stream), then y = rms_norm(x) as above.
// Bitwise the same as add() followed by rms_norm(). y may be x or residual.
void add_rms_norm(device::Device& dev,
                  Slice x,                      // [rows, dim], updated in place
                  Slice residual,               // [rows, dim]
                  std::optional<Slice> weight,  // [dim] or std::nullopt
                  Slice y,                      // [rows, dim]
                  int64_t rows, int dim, float eps, float weight_offset = 0.0f,
                  const QuantizedOut* quantized = nullptr);

}  // namespace specdec::ops
