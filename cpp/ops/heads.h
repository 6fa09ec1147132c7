// Per-head matrix x vector products on the device (kernels/ops_heads.cl): MLA's absorbed
// attention multiplies each q head by its own small matrix (W_UK^T into the latent space) and
// each head of the latent output by another (W_UV out of it). Host reference: ops/reference.h.
#pragma once

#include <cstdint>

#include "device/device.h"
#include "ops/slice.h"

namespace specdec::ops {

// y[t, h, r] = sum_k w[h, r, k] * x[t, h, k] for r < rows, k < cols. Head (t, h) of x starts at
// x + (t * heads + h) * x_head_stride (x_head_stride >= cols), of y at y + (t * heads + h) *
// y_head_stride (>= rows): q_nope is read from inside a [tokens, heads, nope + rope] projection
// and the product written into a [tokens, heads, lora + rope] query. Batch invariant.
void head_matmul(device::Device& dev,
                 Slice w,  // [heads, rows, cols]
                 Slice x,  // [tokens, heads, x_head_stride]
                 Slice y,  // [tokens, heads, y_head_stride]
                 int64_t num_tokens, int heads, int rows, int cols, int64_t x_head_stride,
                 int64_t y_head_stride);

}  // namespace specdec::ops
