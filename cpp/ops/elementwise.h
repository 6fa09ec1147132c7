// Element-wise ops on the device (kernels/ops_elementwise.cl): residual adds, biases, scales,
// gated activations and logit softcapping. Host references: ops/reference.h.
#pragma once

#include <cstdint>

#include "common/model_types.h"
#include "device/device.h"
#include "ops/norm.h"
#include "ops/slice.h"

namespace specdec::ops {

// x += y.
void add(device::Device& dev,
         Slice x,  // [n]
         Slice y,  // [n]
         int64_t n);

// x[r, :] += bias for every row r.
void add_bias(device::Device& dev,
              Slice x,     // [rows, dim]
              Slice bias,  // [dim]
              int64_t rows, int dim);

// x *= s.
void scale(device::Device& dev,
           Slice x,  // [n]
           int64_t n, float s);

// x = cap * tanh(x / cap) (final logit softcapping); cap must be > 0.
void softcap(device::Device& dev,
             Slice x,  // [n]
             int64_t n, float cap);

// out = act(gate) * up with act = silu (g / (1 + exp(-g))) or gelu_tanh
// (0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))). Rows of gate and up are in_row_stride
// elements apart (0: ff), so the halves of a fused [rows, 2 * ff] projection can be passed as
// {buf, 0} and {buf, ff} with in_row_stride = 2 * ff. out may be gate or up when in_row_stride ==
// ff.
void gated_activation(device::Device& dev,
                      Slice gate,  // [rows, ff] (rows in_row_stride apart)
                      Slice up,    // [rows, ff] (rows in_row_stride apart)
                      Slice out,   // [rows, ff]
                      int64_t rows, int ff, Activation act, int64_t in_row_stride = 0,
                      const QuantizedOut* quantized = nullptr);  // also quantise out (ops/norm.h)

}  // namespace specdec::ops
