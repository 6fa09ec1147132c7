#include "ops/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

// The kernels never contract a * b + c into an FMA; neither may the references.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace specdec::ops::ref {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

size_t at(int64_t i) { return static_cast<size_t>(i); }

}  // namespace

void rms_norm(std::span<const float> x, std::span<const float> weight, std::span<float> y,
              int64_t rows, int dim, float eps, float weight_offset) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * dim;
    float* yr = y.data() + r * dim;
    double sum = 0.0;
    for (int i = 0; i < dim; ++i) sum += static_cast<double>(xr[i] * xr[i]);
    const float mean = static_cast<float>(sum / dim);
    const float scale = 1.0f / std::sqrt(mean + eps);
    for (int i = 0; i < dim; ++i) {
      float v = xr[i] * scale;
      if (!weight.empty()) v = v * (weight[at(i)] + weight_offset);
      yr[i] = v;
    }
  }
}

void rope(std::span<float> x, std::span<const int32_t> positions, int64_t num_tokens, int num_heads,
          int head_size, std::span<const float> inv_freq, RopeType type,
          int64_t token_stride) {
  if (token_stride == 0) token_stride = int64_t{num_heads} * head_size;
  const int half = static_cast<int>(inv_freq.size());
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int i = 0; i < half; ++i) {
      const float theta = static_cast<float>(positions[at(t)]) * inv_freq[at(i)];
      const float c = static_cast<float>(std::cos(static_cast<double>(theta)));
      const float s = static_cast<float>(std::sin(static_cast<double>(theta)));
      const int d0 = type == RopeType::kNeox ? i : 2 * i;
      const int d1 = type == RopeType::kNeox ? i + half : 2 * i + 1;
      for (int h = 0; h < num_heads; ++h) {
        float* head = x.data() + t * token_stride + int64_t{h} * head_size;
        const float x0 = head[d0], x1 = head[d1];
        head[d0] = x0 * c - x1 * s;
        head[d1] = x0 * s + x1 * c;
      }
    }
  }
}

void add(std::span<float> x, std::span<const float> y) {
  for (size_t i = 0; i < x.size(); ++i) x[i] = x[i] + y[i];
}

void add_bias(std::span<float> x, std::span<const float> bias, int64_t rows, int dim) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int i = 0; i < dim; ++i) x[at(r * dim + i)] = x[at(r * dim + i)] + bias[at(i)];
  }
}

void scale(std::span<float> x, float s) {
  for (float& v : x) v = v * s;
}

void softcap(std::span<float> x, float cap) {
  for (float& v : x) v = cap * std::tanh(v / cap);
}

float silu(float g) { return g / (1.0f + std::exp(-g)); }

float gelu_tanh(float g) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kCoef = 0.044715f;
  const float z = kSqrt2OverPi * (g + kCoef * g * g * g);
  return g / (1.0f + std::exp(-2.0f * z));  // == 0.5 g (1 + tanh z), without its cancellation
}

void gated_activation(std::span<const float> gate, std::span<const float> up, std::span<float> out,
                      int64_t rows, int ff, Activation act, int64_t in_row_stride) {
  if (in_row_stride == 0) in_row_stride = ff;
  for (int64_t r = 0; r < rows; ++r) {
    for (int i = 0; i < ff; ++i) {
      const float g = gate[at(r * in_row_stride + i)];
      const float u = up[at(r * in_row_stride + i)];
      out[at(r * ff + i)] = (act == Activation::kSilu ? silu(g) : gelu_tanh(g)) * u;
    }
  }
}

void gather_rows(std::span<const float> src, std::span<const int32_t> idx, std::span<float> dst,
                 int64_t num_src_rows, int dim) {
  for (size_t j = 0; j < idx.size(); ++j) {
    const int64_t r = idx[j];
    for (int i = 0; i < dim; ++i) {
      dst[j * dim + i] = (r >= 0 && r < num_src_rows) ? src[at(r * dim + i)] : kNaN;
    }
  }
}

void copy_2d(std::span<const float> src, std::span<float> dst, int64_t rows, int64_t cols,
             int64_t src_row_stride, int64_t dst_row_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c)
      dst[at(r * dst_row_stride + c)] = src[at(r * src_row_stride + c)];
  }
}

void split_columns(std::span<const float> src, std::span<float> dst_a, std::span<float> dst_b,
                   std::span<float> dst_c, int64_t rows, int a, int b, int c) {
  const int64_t w = int64_t{a} + b + c;
  copy_2d(src, dst_a, rows, a, w, a);
  if (b > 0) copy_2d(src.subspan(at(a)), dst_b, rows, b, w, b);
  if (c > 0) copy_2d(src.subspan(at(int64_t{a} + b)), dst_c, rows, c, w, c);
}

void gather_columns(std::span<const float> src, std::span<const int32_t> cols, std::span<float> dst,
                    int64_t rows, int dim) {
  for (int64_t r = 0; r < rows; ++r) {
    const int c = cols[at(r)];
    dst[at(r)] = (c >= 0 && c < dim) ? src[at(r * dim + c)] : kNaN;
  }
}

uint32_t order_key(float f) {
  if (std::isnan(f)) return 0u;
  if (f == 0.0f) return 0x80000000u;
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

void argmax(std::span<const float> logits, std::span<int32_t> ids, int64_t rows, int vocab) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits.data() + r * vocab;
    int best = 0;
    for (int i = 1; i < vocab; ++i) {
      if (order_key(row[i]) > order_key(row[best])) best = i;
    }
    ids[at(r)] = best;
  }
}

void top_k(std::span<const float> logits, std::span<float> values, std::span<int32_t> ids,
           int64_t rows, int vocab, int k) {
  std::vector<int32_t> order(at(vocab));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits.data() + r * vocab;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      const uint32_t ka = order_key(row[a]), kb = order_key(row[b]);
      return ka != kb ? ka > kb : a < b;
    });
    for (int j = 0; j < k; ++j) {
      values[at(r * k + j)] = row[order[at(j)]];
      ids[at(r * k + j)] = order[at(j)];
    }
  }
}

void logsumexp_rows(std::span<const float> logits, std::span<float> lse, int64_t rows, int vocab) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits.data() + r * vocab;
    float m = -std::numeric_limits<float>::infinity();
    bool any_nan = false;
    for (int i = 0; i < vocab; ++i) {
      any_nan = any_nan || std::isnan(row[i]);
      if (row[i] > m) m = row[i];
    }
    if (any_nan || !std::isfinite(m)) {
      lse[at(r)] = any_nan ? kNaN : m;
      continue;
    }
    double sum = 0.0;
    for (int i = 0; i < vocab; ++i) sum += static_cast<double>(std::exp(row[i] - m));
    lse[at(r)] = static_cast<float>(static_cast<double>(m) + std::log(sum));
  }
}

void log_softmax_rows(std::span<const float> logits, std::span<float> out, std::span<float> lse,
                      int64_t rows, int vocab) {
  logsumexp_rows(logits, lse, rows, vocab);
  for (int64_t r = 0; r < rows; ++r) {
    for (int i = 0; i < vocab; ++i) out[at(r * vocab + i)] = logits[at(r * vocab + i)] - lse[at(r)];
  }
}

void head_matmul(std::span<const float> w, std::span<const float> x, std::span<float> y,
                 int64_t num_tokens, int heads, int rows, int cols, int64_t x_head_stride,
                 int64_t y_head_stride) {
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int h = 0; h < heads; ++h) {
      const float* xr = x.data() + (t * heads + h) * x_head_stride;
      for (int r = 0; r < rows; ++r) {
        const float* wr = w.data() + (int64_t{h} * rows + r) * cols;
        float lane[16] = {};
        for (int k = 0; k < cols; k += 16) {
          for (int j = 0; j < 16 && k + j < cols; ++j) lane[j] = lane[j] + wr[k + j] * xr[k + j];
        }
        float s8[8], s4[4], s2[2];
        for (int j = 0; j < 8; ++j) s8[j] = lane[j] + lane[j + 8];
        for (int j = 0; j < 4; ++j) s4[j] = s8[j] + s8[j + 4];
        for (int j = 0; j < 2; ++j) s2[j] = s4[j] + s4[j + 2];
        y[at((t * heads + h) * y_head_stride + r)] = s2[0] + s2[1];
      }
    }
  }
}

}  // namespace specdec::ops::ref
