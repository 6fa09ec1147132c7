#include "cpu/activations.h"

#include <algorithm>
#include <cmath>

#include "common/errors.h"
#include "cpu/vmath.h"
#include "cpu/strict_fp.h"

namespace specdec::cpu {
namespace {

void check(int64_t cols, int scale_block) {
  SPECDEC_CHECK(scale_block == 32 || scale_block == 256, "scale_block", scale_block, "must be 32 or 256");
  SPECDEC_CHECK(cols > 0 && cols % scale_block == 0, "cols", cols,
                str_cat("must be a positive multiple of ", scale_block));
}

// One group of scale_block values (x, q at its start; rec: its first block's record).
template <int kBlock>
void quantize_group(const float* x, int8_t* q, ActRec* rec) {
  float amax = 0.0f;
  for (int j = 0; j < kBlock; ++j) amax = std::fmax(amax, std::fabs(x[j]));
  float d = 0.0f, id = 0.0f;
  if constexpr (kBlock == 32) {  // a block too small for a finite 1 / scale quantises to zeros
    d = amax / 127.0f;
    id = d != 0.0f && std::isfinite(1.0f / d) ? 1.0f / d : 0.0f;
    if (id == 0.0f) d = 0.0f;
  } else {
    id = amax != 0.0f && std::isfinite(127.0f / amax) ? 127.0f / amax : 0.0f;
    d = id != 0.0f ? 1.0f / id : 0.0f;
  }
  for (int b = 0; b < kBlock / 32; ++b) {
    int32_t s[2] = {0, 0};
    for (int j = 0; j < 32; ++j) {
      const float y = x[b * 32 + j] * id;
      const auto v = static_cast<int8_t>(kBlock == 32 ? std::round(y) : std::nearbyint(y));
      q[b * 32 + j] = v;
      s[j / 16] += v;
    }
    rec[b] = ActRec{d, d * static_cast<float>(s[0] + s[1]), s[0], s[1]};
  }
}

}  // namespace

OwnedActivations records_of(const quant::HostActivations& a) {
  OwnedActivations o;
  o.n = a.n;
  o.cols = a.cols;
  o.q = a.q;
  o.rec.resize(a.d.size());
  for (size_t b = 0; b < a.d.size(); ++b)
    o.rec[b] = ActRec{a.d[b], a.d[b] * static_cast<float>(a.s0[b] + a.s1[b]), a.s0[b], a.s1[b]};
  return o;
}

void quantize_row_portable(const float* x, int64_t cols, int scale_block, int8_t* q, ActRec* rec) {
  for (int64_t g = 0; g < cols; g += scale_block) {
    if (scale_block == 32) {
      quantize_group<32>(x + g, q + g, rec + g / 32);
    } else {
      quantize_group<256>(x + g, q + g, rec + g / 32);
    }
  }
}

void quantize_activations(const float* x, int64_t row_begin, int64_t row_end, int64_t cols, int scale_block,
                          int8_t* q, ActRec* rec, Isa isa) {
  check(cols, scale_block);
  const int64_t nb = cols / 32;
  const auto row = vmath_for(isa).quantize_row;
  for (int64_t r = row_begin; r < row_end; ++r) row(x + r * cols, cols, scale_block, q + r * cols, rec + r * nb);
}

void quantize_activation_chunks(const float* x, int64_t i0, int64_t i1, int64_t cols, int scale_block,
                                int8_t* q, ActRec* rec, Isa isa) {
  check(cols, scale_block);
  const int64_t chunks = column_chunks(cols);
  const auto row = vmath_for(isa).quantize_row;
  for (int64_t item = i0; item < i1; ++item) {
    const int64_t r = item / chunks, c0 = (item % chunks) * kColumnChunk;
    const int64_t at = r * cols + c0;
    row(x + at, std::min(kColumnChunk, cols - c0), scale_block, q + at, rec + at / 32);
  }
}

OwnedActivations quantize_activations(const float* x, int64_t n, int64_t cols, int scale_block) {
  check(cols, scale_block);
  OwnedActivations o;
  o.n = n;
  o.cols = cols;
  o.q.resize(static_cast<size_t>(n * cols));
  o.rec.resize(static_cast<size_t>(n * cols / 32));
  quantize_activations(x, 0, n, cols, scale_block, o.q.data(), o.rec.data());
  return o;
}

}  // namespace specdec::cpu
