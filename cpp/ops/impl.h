// The ops' per-device implementations, called by the dispatch files (ops/<family>.cpp) after the
// checks: one file per family and device (ops/ocl_<family>.cpp, ops/cpu_<family>.cpp). Arguments are checked already.
// Device& and Slice only: a dispatch file includes no OpenCL header.
#pragma once

#include <cstdint>
#include <optional>

#include "common/model_types.h"
#include "device/device.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "ops/slice.h"

namespace specdec::ops {

// ops/ocl_norm.cpp: rms_norm (residual nullopt) and add_rms_norm; rows > 0
void ocl_rms_norm(device::Device& dev, Slice x, std::optional<Slice> residual, std::optional<Slice> weight,
                  Slice y, int64_t rows, int dim, float eps, float weight_offset, const QuantizedOut* q);

// ops/ocl_elementwise.cpp
void ocl_add(device::Device& dev, Slice x, Slice y, int64_t n);
void ocl_add_bias(device::Device& dev, Slice x, Slice bias, int64_t rows, int dim);
void ocl_scale(device::Device& dev, Slice x, int64_t n, float s);
void ocl_softcap(device::Device& dev, Slice x, int64_t n, float cap);
// rows > 0; in_row_stride resolved (>= ff)
void ocl_gated_activation(device::Device& dev, Slice gate, Slice up, Slice out, int64_t rows, int ff,
                          Activation act, int64_t in_row_stride, const QuantizedOut* q);

// ops/ocl_rope.cpp: num_tokens > 0; token_stride resolved
void ocl_rope(device::Device& dev, Slice x, Slice positions, int64_t num_tokens, int num_heads,
              int head_size, const RopeTable& table, int64_t token_stride);

// ops/ocl_rows.cpp
void ocl_gather_rows(device::Device& dev, Slice src, Slice idx, Slice dst, int64_t num_src_rows,
                     int64_t num_idx, int dim);
void ocl_copy_2d(device::Device& dev, Slice src, Slice dst, int64_t rows, int64_t cols,
                 int64_t src_row_stride, int64_t dst_row_stride);
void ocl_split_columns(device::Device& dev, Slice src, Slice dst_a, Slice dst_b, Slice dst_c,
                       int64_t rows, int a, int b, int c);
void ocl_gather_columns(device::Device& dev, Slice src, Slice cols, Slice dst, int64_t rows, int dim);

// ops/ocl_heads.cpp: num_tokens > 0
void ocl_head_matmul(device::Device& dev, Slice w, Slice x, Slice y, int64_t num_tokens, int heads,
                     int rows, int cols, int64_t x_head_stride, int64_t y_head_stride);

// ops/ocl_sampling.cpp
void ocl_argmax(device::Device& dev, Slice logits, Slice ids, int64_t rows, int vocab);
void ocl_top_k(device::Device& dev, Slice logits, Slice values, Slice ids, int64_t rows, int vocab, int k);
// logsumexp_rows (write_out false: out unused) and log_softmax_rows
void ocl_logsumexp(device::Device& dev, Slice logits, Slice lse, Slice out, int64_t rows, int vocab,
                   bool write_out);


// The native CPU device (ops/cpu_<family>.cpp): the same arguments, recorded on the device.
void cpu_rms_norm(device::Device& dev, Slice x, std::optional<Slice> residual, std::optional<Slice> weight,
                  Slice y, int64_t rows, int dim, float eps, float weight_offset, const QuantizedOut* q);
void cpu_add(device::Device& dev, Slice x, Slice y, int64_t n);
void cpu_add_bias(device::Device& dev, Slice x, Slice bias, int64_t rows, int dim);
void cpu_scale(device::Device& dev, Slice x, int64_t n, float s);
void cpu_softcap(device::Device& dev, Slice x, int64_t n, float cap);
void cpu_gated_activation(device::Device& dev, Slice gate, Slice up, Slice out, int64_t rows, int ff,
                          Activation act, int64_t in_row_stride, const QuantizedOut* q);
void cpu_rope(device::Device& dev, Slice x, Slice positions, int64_t num_tokens, int num_heads,
              int head_size, const RopeTable& table, int64_t token_stride);
void cpu_gather_rows(device::Device& dev, Slice src, Slice idx, Slice dst, int64_t num_src_rows,
                     int64_t num_idx, int dim);
void cpu_copy_2d(device::Device& dev, Slice src, Slice dst, int64_t rows, int64_t cols,
                 int64_t src_row_stride, int64_t dst_row_stride);
void cpu_split_columns(device::Device& dev, Slice src, Slice dst_a, Slice dst_b, Slice dst_c,
                       int64_t rows, int a, int b, int c);
void cpu_gather_columns(device::Device& dev, Slice src, Slice cols, Slice dst, int64_t rows, int dim);
void cpu_head_matmul(device::Device& dev, Slice w, Slice x, Slice y, int64_t num_tokens, int heads,
                     int rows, int cols, int64_t x_head_stride, int64_t y_head_stride);
void cpu_argmax(device::Device& dev, Slice logits, Slice ids, int64_t rows, int vocab);
void cpu_top_k(device::Device& dev, Slice logits, Slice values, Slice ids, int64_t rows, int vocab, int k);
void cpu_logsumexp(device::Device& dev, Slice logits, Slice lse, Slice out, int64_t rows, int vocab,
                   bool write_out);

}  // namespace specdec::ops
