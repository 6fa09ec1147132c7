// Row moves, the per-head matmul and the sampling reductions of the native CPU device (cpu/ops.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "cpu/ops.h"
#include "cpu/vmath.h"
#include "cpu/strict_fp.h"

namespace specdec::cpu {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

using vmath::order_key;

}  // namespace

void gather_rows(const float* src, const int32_t* idx, float* dst, int64_t j0, int64_t j1, int64_t num_src_rows,
                 int dim) {
  for (int64_t j = j0; j < j1; ++j) {
    const int64_t r = idx[j];
    float* d = dst + j * dim;
    if (r >= 0 && r < num_src_rows) {
      std::memcpy(d, src + r * dim, sizeof(float) * static_cast<size_t>(dim));
    } else {
      std::fill(d, d + dim, kNaN);
    }
  }
}

void copy_2d(const float* src, float* dst, int64_t r0, int64_t r1, int64_t cols, int64_t src_row_stride,
             int64_t dst_row_stride) {
  for (int64_t r = r0; r < r1; ++r)
    std::memmove(dst + r * dst_row_stride, src + r * src_row_stride, sizeof(float) * static_cast<size_t>(cols));
}

void split_columns(const float* src, float* dst_a, float* dst_b, float* dst_c, int64_t r0, int64_t r1, int a,
                   int b, int c) {
  const int64_t w = int64_t{a} + b + c;
  copy_2d(src, dst_a, r0, r1, a, w, a);
  if (b > 0) copy_2d(src + a, dst_b, r0, r1, b, w, b);
  if (c > 0) copy_2d(src + a + b, dst_c, r0, r1, c, w, c);
}

void gather_columns(const float* src, const int32_t* cols, float* dst, int64_t r0, int64_t r1, int dim) {
  for (int64_t r = r0; r < r1; ++r) {
    const int c = cols[r];
    dst[r] = (c >= 0 && c < dim) ? src[r * dim + c] : kNaN;
  }
}

// The kernel's order (ops/heads.h): 16 lanes over the columns, then a tree over the lanes.
void head_matmul(const float* w, const float* x, float* y, int64_t p0, int64_t p1, int heads, int rows, int cols,
                 int64_t x_head_stride, int64_t y_head_stride) {
  for (int64_t p = p0; p < p1; ++p) {
    const int h = static_cast<int>(p % heads);
    const float* xr = x + p * x_head_stride;
    for (int r = 0; r < rows; ++r) {
      const float* wr = w + (int64_t{h} * rows + r) * cols;
      float lane[16] = {};
      for (int k = 0; k < cols; k += 16) {
        for (int j = 0; j < 16 && k + j < cols; ++j) lane[j] = lane[j] + wr[k + j] * xr[k + j];
      }
      float s8[8], s4[4], s2[2];
      for (int j = 0; j < 8; ++j) s8[j] = lane[j] + lane[j + 8];
      for (int j = 0; j < 4; ++j) s4[j] = s8[j] + s8[j + 4];
      for (int j = 0; j < 2; ++j) s2[j] = s4[j] + s4[j + 2];
      y[p * y_head_stride + r] = s2[0] + s2[1];
    }
  }
}

void argmax(const float* logits, int32_t* ids, int64_t r0, int64_t r1, int vocab, Isa isa) {
  const vmath::Kernels& k = vmath_for(isa);
  for (int64_t r = r0; r < r1; ++r) k.argmax_key(logits + r * vocab, vocab, ids + r);
}

void top_k(const float* logits, float* values, int32_t* ids, int64_t r0, int64_t r1, int vocab, int k) {
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  for (int64_t r = r0; r < r1; ++r) {
    const float* row = logits + r * vocab;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      const uint32_t ka = order_key(row[a]), kb = order_key(row[b]);
      return ka != kb ? ka > kb : a < b;
    });
    for (int j = 0; j < k; ++j) {
      values[r * k + j] = row[order[static_cast<size_t>(j)]];
      ids[r * k + j] = order[static_cast<size_t>(j)];
    }
  }
}

void argmax_parts(const float* logits, ArgmaxPart* parts, int64_t i0, int64_t i1, int vocab, Isa isa) {
  const vmath::Kernels& k = vmath_for(isa);
  const int64_t chunks = vocab_chunks(vocab);
  for (int64_t item = i0; item < i1; ++item) {
    const float* row = logits + (item / chunks) * vocab;
    const int64_t begin = (item % chunks) * kVocabChunk, end = std::min<int64_t>(vocab, begin + kVocabChunk);
    int32_t at = 0;
    const uint32_t key = k.argmax_key(row + begin, static_cast<int>(end - begin), &at);
    parts[item] = ArgmaxPart{key, static_cast<int32_t>(begin) + at};
  }
}

void argmax_combine(const ArgmaxPart* parts, int32_t* ids, int64_t r0, int64_t r1, int vocab) {
  const int64_t chunks = vocab_chunks(vocab);
  for (int64_t r = r0; r < r1; ++r) {
    const ArgmaxPart* p = parts + r * chunks;
    ArgmaxPart best = p[0];
    for (int64_t c = 1; c < chunks; ++c) {
      if (p[c].key > best.key) best = p[c];
    }
    ids[r] = best.index;
  }
}

void logsumexp_parts(const float* logits, LsePart* parts, int64_t i0, int64_t i1, int vocab, Isa isa) {
  const vmath::Kernels& k = vmath_for(isa);
  const int64_t chunks = vocab_chunks(vocab);
  for (int64_t item = i0; item < i1; ++item) {
    const float* row = logits + (item / chunks) * vocab;
    const int64_t begin = (item % chunks) * kVocabChunk, end = std::min<int64_t>(vocab, begin + kVocabChunk);
    LsePart p{-std::numeric_limits<float>::infinity(), false, 0.0};
    p.max = k.max_nan(row + begin, static_cast<int>(end - begin), &p.nan);
    if (!p.nan && std::isfinite(p.max)) p.sum = k.exp_sum(row + begin, p.max, static_cast<int>(end - begin));
    parts[item] = p;
  }
}

void logsumexp_combine(const LsePart* parts, float* lse, int64_t r0, int64_t r1, int vocab) {
  const int64_t chunks = vocab_chunks(vocab);
  for (int64_t r = r0; r < r1; ++r) {
    const LsePart* p = parts + r * chunks;
    float m = -std::numeric_limits<float>::infinity();
    bool any_nan = false;
    for (int64_t c = 0; c < chunks; ++c) {
      any_nan = any_nan || p[c].nan;
      if (p[c].max > m) m = p[c].max;
    }
    if (any_nan || !std::isfinite(m)) {
      lse[r] = any_nan ? kNaN : m;
      continue;
    }
    double sum = 0.0;
    for (int64_t c = 0; c < chunks; ++c) {
      if (std::isfinite(p[c].max)) sum += p[c].sum * std::exp(static_cast<double>(p[c].max) - m);
    }
    lse[r] = static_cast<float>(static_cast<double>(m) + std::log(sum));
  }
}

void logsumexp(const float* logits, float* lse, float* out, int64_t r0, int64_t r1, int vocab, Isa isa) {
  const vmath::Kernels& k = vmath_for(isa);
  for (int64_t r = r0; r < r1; ++r) {
    const float* row = logits + r * vocab;
    bool any_nan = false;
    const float m = k.max_nan(row, vocab, &any_nan);
    float v;
    if (any_nan || !std::isfinite(m)) {
      v = any_nan ? kNaN : m;
    } else {
      v = static_cast<float>(static_cast<double>(m) + std::log(k.exp_sum(row, m, vocab)));
    }
    lse[r] = v;
    if (out != nullptr) {
      for (int i = 0; i < vocab; ++i) out[r * vocab + i] = row[i] - v;
    }
  }
}

}  // namespace specdec::cpu
