// Plain C++ references of the forward ops (cpp/ops/*.h), on host vectors in the same layouts.
// They state the math the kernels implement; tests compare the two (tests/cpp/ops_*_test.cpp).
// Arithmetic is f32 without FMA contraction unless a comment says otherwise.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/model_types.h"

namespace specdec::ops::ref {

// Squares in f32, summed in double; mean = (float)(sum / dim); scale = 1 / sqrtf(mean + eps);
// y = (x * scale) * (weight + weight_offset). An empty weight means none. y may be x.
void rms_norm(std::span<const float> x, std::span<const float> weight, std::span<float> y,
              int64_t rows, int dim, float eps, float weight_offset = 0.0f);

// In place on x [num_tokens, num_heads, head_size] (rows token_stride apart, 0: dense):
// theta = (float)pos * inv_freq[i]; c, s = cos, sin of theta in double rounded to f32.
void rope(std::span<float> x, std::span<const int32_t> positions, int64_t num_tokens, int num_heads,
          int head_size, std::span<const float> inv_freq, RopeType type,
          int64_t token_stride = 0);

void add(std::span<float> x, std::span<const float> y);
void add_bias(std::span<float> x, std::span<const float> bias, int64_t rows, int dim);
void scale(std::span<float> x, float s);
void softcap(std::span<float> x, float cap);

float silu(float g);  // g / (1 + expf(-g))
// 0.5 g (1 + tanh z), z = sqrt(2/pi) (g + 0.044715 g^3), computed as g / (1 + expf(-2 z)).
float gelu_tanh(float g);
void gated_activation(std::span<const float> gate, std::span<const float> up, std::span<float> out,
                      int64_t rows, int ff, Activation act, int64_t in_row_stride = 0);

void gather_rows(std::span<const float> src, std::span<const int32_t> idx, std::span<float> dst,
                 int64_t num_src_rows, int dim);
void copy_2d(std::span<const float> src, std::span<float> dst, int64_t rows, int64_t cols,
             int64_t src_row_stride, int64_t dst_row_stride);
void split_columns(std::span<const float> src, std::span<float> dst_a, std::span<float> dst_b,
                   std::span<float> dst_c, int64_t rows, int a, int b, int c);
void gather_columns(std::span<const float> src, std::span<const int32_t> cols, std::span<float> dst,
                    int64_t rows, int dim);
// head_matmul (ops/heads.h): the same 16-lane block order and lane tree as the kernel.
void head_matmul(std::span<const float> w, std::span<const float> x, std::span<float> y,
                 int64_t num_tokens, int heads, int rows, int cols, int64_t x_head_stride,
                 int64_t y_head_stride);

// Order key of the sampling ops: larger value -> larger key, -0 == +0, NaN -> 0 (lowest).
uint32_t order_key(float f);
void argmax(std::span<const float> logits, std::span<int32_t> ids, int64_t rows, int vocab);
void top_k(std::span<const float> logits, std::span<float> values, std::span<int32_t> ids,
           int64_t rows, int vocab, int k);
// exp in f32, sum in double: lse = (float)(m + log(sum exp(x - m))).
void logsumexp_rows(std::span<const float> logits, std::span<float> lse, int64_t rows, int vocab);
void log_softmax_rows(std::span<const float> logits, std::span<float> out, std::span<float> lse,
                      int64_t rows, int vocab);

}  // namespace specdec::ops::ref
