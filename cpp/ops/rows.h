// Row and column moves on the device (kernels/ops_rows.cl). Host references: ops/reference.h.
// Elements are 4 bytes: f32 activations (int32 data is copied bit for bit as well).
#pragma once

#include <cstdint>

#include "device/device.h"
#include "ops/slice.h"

namespace specdec::ops {

// dst[j, :] = src[idx[j], :] (e.g. the hidden rows whose logits are needed). An index outside
// [0, num_src_rows) cannot be reported without a device sync: its dst row is filled with NaN.
void gather_rows(device::Device& dev,
                 Slice src,  // [num_src_rows, dim]
                 Slice idx,  // int32 [num_idx]
                 Slice dst,  // [num_idx, dim]
                 int64_t num_src_rows, int64_t num_idx, int dim);

// dst[r * dst_row_stride + c] = src[r * src_row_stride + c] for r < rows, c < cols: copies a
// block of columns between row-major matrices (hidden-state capture, concatenation).
void copy_2d(device::Device& dev,
             Slice src,  // [rows, src_row_stride]
             Slice dst,  // [rows, dst_row_stride]
             int64_t rows, int64_t cols, int64_t src_row_stride, int64_t dst_row_stride);

// Splits a fused projection src [rows, a + b + c] into dst_a [rows, a], dst_b [rows, b] and
// dst_c [rows, c] in one launch (q, k, v of a fused QKV matmul). b or c may be 0 (their
// destination is then not touched).
void split_columns(device::Device& dev,
                   Slice src,    // [rows, a + b + c]
                   Slice dst_a,  // [rows, a]
                   Slice dst_b,  // [rows, b]
                   Slice dst_c,  // [rows, c]
                   int64_t rows, int a, int b, int c);

// dst[r] = src[r, cols[r]] (the logit of a chosen token per row); a column outside [0, dim)
// gives NaN.
void gather_columns(device::Device& dev,
                    Slice src,   // [rows, dim]
                    Slice cols,  // int32 [rows]
                    Slice dst,   // [rows]
                    int64_t rows, int dim);

}  // namespace specdec::ops
