#include "quant/reference.h"

#include <cmath>
#include <cstring>

#include "common/dtype.h"
#include "common/errors.h"
#include "quant/dequantize.h"

namespace specdec::quant {
namespace {

float f16_at(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return half_bits_to_float(bits);
}

// One weight row as the kernels see it: the stored integer of every element (unsigned, before
// the format's offset; signed for Q8_0, IQ4_NL and IQ4_XS: the table value) and per scale unit the
// float factors the kernels use.
struct RowInts {
  std::vector<int32_t> q;  // [cols]
  std::vector<float> d;    // per unit: d (Q-32 formats), d * sc (K formats)
  std::vector<float> m;    // per unit: m (Q4_1), dmin * m (Q4_K, Q5_K)
};

// The stored integers of one block (unsigned; Q8_0 signed) and its units' factors.
void decode_block_32(GgmlType type, const uint8_t* b, int32_t* q, RowInts& r) {
  switch (type) {
    case GgmlType::kQ8_0:
      for (int j = 0; j < 32; ++j) q[j] = static_cast<int8_t>(b[2 + j]);
      break;
    case GgmlType::kQ4_0:
    case GgmlType::kQ4_1: {
      const uint8_t* qs = b + (type == GgmlType::kQ4_0 ? 2 : 4);
      for (int j = 0; j < 16; ++j) {
        q[j] = qs[j] & 0xF;
        q[j + 16] = qs[j] >> 4;
      }
      if (type == GgmlType::kQ4_1) r.m.push_back(f16_at(b + 2));
      break;
    }
    case GgmlType::kQ5_0:
    case GgmlType::kQ5_1: {
      const int at = type == GgmlType::kQ5_0 ? 2 : 4;  // qh, then qs
      uint32_t qh;
      std::memcpy(&qh, b + at, 4);
      for (int j = 0; j < 16; ++j) {
        q[j] = (b[at + 4 + j] & 0xF) | static_cast<int32_t>(((qh >> j) & 1u) << 4);
        q[j + 16] = (b[at + 4 + j] >> 4) | static_cast<int32_t>(((qh >> (j + 16)) & 1u) << 4);
      }
      if (type == GgmlType::kQ5_1) r.m.push_back(f16_at(b + 2));
      break;
    }
    case GgmlType::kIQ4_NL:
      for (int j = 0; j < 16; ++j) {
        q[j] = kIq4Values[b[2 + j] & 0xF];
        q[j + 16] = kIq4Values[b[2 + j] >> 4];
      }
      break;
    default:
      break;
  }
  r.d.push_back(f16_at(b));
}

// IQ4_XS: table values, per 32-element sub-block d * (ls - 32).
void decode_block_iq4_xs(const uint8_t* b, int32_t* q, RowInts& r) {
  const float d = f16_at(b);
  uint16_t scales_h;
  std::memcpy(&scales_h, b + 2, 2);
  for (int ib = 0; ib < 8; ++ib) {
    r.d.push_back(d * static_cast<float>(iq4_xs_scale(ib, scales_h, b + 4) - 32));
    const uint8_t* qs = b + 8 + 16 * ib;
    for (int j = 0; j < 16; ++j) {
      q[32 * ib + j] = kIq4Values[qs[j] & 0xF];
      q[32 * ib + j + 16] = kIq4Values[qs[j] >> 4];
    }
  }
}

// Q2_K: stored 2-bit integers; per 16-element sub-block d * sc (d) and dmin * m (m).
void decode_block_q2_k(const uint8_t* b, int32_t* q, RowInts& r) {
  const float d = f16_at(b + 80), dmin = f16_at(b + 82);
  for (int s = 0; s < 16; ++s) {
    r.d.push_back(d * static_cast<float>(b[s] & 0xF));
    r.m.push_back(dmin * static_cast<float>(b[s] >> 4));
  }
  for (int e = 0; e < 256; ++e) {
    const int n = e / 128, j = (e % 128) / 32, h = (e % 32) / 16, l = e % 16;
    q[e] = (b[16 + 32 * n + 16 * h + l] >> (2 * j)) & 3;
  }
}

// Q3_K: stored 3-bit integers (value + 4), per 16-element sub-block d * (ls - 32).
void decode_block_q3_k(const uint8_t* b, int32_t* q, RowInts& r) {
  const float d = f16_at(b + 108);
  uint8_t ls[16];
  q3_k_scales(b + 96, ls);
  for (int s = 0; s < 16; ++s) r.d.push_back(d * static_cast<float>(ls[s] - 32));
  for (int e = 0; e < 256; ++e) {
    const int n = e / 128, j = (e % 128) / 32, h = (e % 32) / 16, l = e % 16;
    q[e] = ((b[32 + 32 * n + 16 * h + l] >> (2 * j)) & 3) |
           (((b[16 * h + l] >> (4 * n + j)) & 1) << 2);
  }
}

void decode_block_k(GgmlType type, const uint8_t* b, int32_t* q, RowInts& r) {
  if (type == GgmlType::kIQ4_XS) {
    decode_block_iq4_xs(b, q, r);
    return;
  }
  if (type == GgmlType::kQ3_K) {
    decode_block_q3_k(b, q, r);
    return;
  }
  if (type == GgmlType::kQ2_K) {
    decode_block_q2_k(b, q, r);
    return;
  }
  if (type == GgmlType::kQ6_K) {
    const float d = f16_at(b + 208);
    for (int s = 0; s < 16; ++s)
      r.d.push_back(static_cast<float>(static_cast<int8_t>(b[192 + s])) * d);
    for (int e = 0; e < 256; ++e) {
      const int h = e / 128, m = (e % 128) / 32, l = e % 32;
      const uint8_t lq = b[64 * h + 32 * (m & 1) + l], hq = b[128 + 32 * h + l];
      q[e] = (m < 2 ? lq & 0xF : lq >> 4) | (((hq >> (2 * m)) & 3) << 4);
    }
    return;
  }
  const bool q5 = type == GgmlType::kQ5_K;
  const uint8_t* qs = b + (q5 ? 48 : 16);
  const float d = f16_at(b), dmin = f16_at(b + 2);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    k4_scale_min(j, b + 4, &sc, &m);
    r.d.push_back(static_cast<float>(sc) * d);
    r.m.push_back(static_cast<float>(m) * dmin);
    for (int l = 0; l < 32; ++l) {
      const uint8_t byte = qs[32 * (j / 2) + l];
      q[32 * j + l] =
          (j % 2 == 0 ? byte & 0xF : byte >> 4) + (q5 ? ((b[16 + l] >> j) & 1) << 4 : 0);
    }
  }
}

RowInts decode_ints(GgmlType type, const uint8_t* row, int64_t cols) {
  const WeightFormat& f = weight_format(type);
  RowInts r;
  r.q.resize(static_cast<size_t>(cols));
  for (int64_t blk = 0; blk < cols / f.block_size; ++blk) {
    const uint8_t* b = row + blk * f.block_bytes;
    int32_t* q = r.q.data() + blk * f.block_size;
    if (f.block_size == 256)
      decode_block_k(type, b, q, r);
    else
      decode_block_32(type, b, q, r);
  }
  return r;
}

float dot_float_device(const float* w, const float* x, int64_t cols) {
  float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t k = 0; k < cols; ++k) s[k & 3] = std::fma(w[k], x[k], s[k & 3]);
  return (s[0] + s[1]) + (s[2] + s[3]);
}

int32_t idot(const int32_t* q, const int8_t* x, int n) {
  int32_t s = 0;
  for (int j = 0; j < n; ++j) s += q[j] * x[j];
  return s;
}

// One output element with the device's numerics (block formats).
float dot_block_device(GgmlType type, const RowInts& w, const HostActivations& a, int64_t i) {
  const int64_t nb = a.cols / 32;
  const int8_t* xq = a.q.data() + i * a.cols;
  float acc = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    const size_t at = static_cast<size_t>(i * nb + b);
    const float dx = a.d[at];
    const int32_t sum0 = a.s0[at], sum1 = a.s1[at];
    const float xs = dx * static_cast<float>(sum0 + sum1);
    const int32_t* q = w.q.data() + b * 32;
    const int8_t* x = xq + b * 32;
    switch (type) {
      case GgmlType::kQ8_0:
      case GgmlType::kQ4_0:
      case GgmlType::kQ5_0:
      case GgmlType::kIQ4_NL:
      case GgmlType::kIQ4_XS: {
        const int32_t off = type == GgmlType::kQ4_0 ? 8 : type == GgmlType::kQ5_0 ? 16 : 0;
        const int32_t s = idot(q, x, 32) - off * (sum0 + sum1);
        acc = std::fma(static_cast<float>(s) * w.d[b], dx, acc);
        break;
      }
      case GgmlType::kQ4_1:
      case GgmlType::kQ5_1:
        acc = std::fma(static_cast<float>(idot(q, x, 32)) * w.d[b], dx, acc);
        acc = std::fma(w.m[b], xs, acc);
        break;
      case GgmlType::kQ4_K:
      case GgmlType::kQ5_K:
        acc = std::fma(static_cast<float>(idot(q, x, 32)) * w.d[b], dx, acc);
        acc = std::fma(w.m[b], -xs, acc);
        break;
      case GgmlType::kQ2_K: {
        const float m0 = dx * static_cast<float>(sum0), m1 = dx * static_cast<float>(sum1);
        acc = std::fma(static_cast<float>(idot(q, x, 16)) * w.d[2 * b], dx, acc);
        acc = std::fma(w.m[2 * b], -m0, acc);
        acc = std::fma(static_cast<float>(idot(q + 16, x + 16, 16)) * w.d[2 * b + 1], dx, acc);
        acc = std::fma(w.m[2 * b + 1], -m1, acc);
        break;
      }
      case GgmlType::kQ3_K:
      case GgmlType::kQ6_K: {
        const int32_t off = type == GgmlType::kQ3_K ? 4 : 32;
        const int32_t sa = idot(q, x, 16) - off * sum0, sb = idot(q + 16, x + 16, 16) - off * sum1;
        acc = std::fma(static_cast<float>(sa) * w.d[2 * b], dx, acc);
        acc = std::fma(static_cast<float>(sb) * w.d[2 * b + 1], dx, acc);
        break;
      }
      default:
        break;
    }
  }
  return acc;
}

}  // namespace

HostActivations quantize_activations_reference(const float* x, int64_t n, int64_t cols,
                                               int scale_block) {
  SPECDEC_CHECK(scale_block == 32 || scale_block == 256, "scale_block", scale_block,
                "must be 32 or 256");
  SPECDEC_CHECK(cols > 0 && cols % scale_block == 0, "cols", cols,
                str_cat("must be a positive multiple of ", scale_block));
  HostActivations a;
  a.n = n;
  a.cols = cols;
  a.q.resize(static_cast<size_t>(n * cols));
  const auto blocks = static_cast<size_t>(n * cols / 32);
  a.d.resize(blocks);
  a.s0.resize(blocks);
  a.s1.resize(blocks);
  const auto per_group = static_cast<size_t>(scale_block / 32);
  for (size_t g = 0; g < blocks / per_group; ++g) {
    const float* v = x + g * scale_block;
    float amax = 0.0f;
    for (int j = 0; j < scale_block; ++j) amax = std::fmax(amax, std::fabs(v[j]));
    float d = 0.0f, id = 0.0f;
    // a block or group too small for a finite 1 / scale (amax < ~4e-37) quantises to zeros
    if (scale_block == 32) {  // ggml's quantize_row_q8_0 (reference rounding)
      d = amax / 127.0f;
      id = d != 0.0f && std::isfinite(1.0f / d) ? 1.0f / d : 0.0f;
      if (id == 0.0f) d = 0.0f;
    } else {  // ggml's quantize_row_q8_K: -127 / max with max's sign is this with q and d negated
      id = amax != 0.0f && std::isfinite(127.0f / amax) ? 127.0f / amax : 0.0f;
      d = id != 0.0f ? 1.0f / id : 0.0f;
    }
    for (size_t c = 0; c < per_group; ++c) {
      const size_t blk = g * per_group + c;
      int32_t s[2] = {0, 0};
      for (int j = 0; j < 32; ++j) {
        const float y = x[blk * 32 + j] * id;
        const auto q = static_cast<int8_t>(scale_block == 32 ? std::round(y) : std::nearbyint(y));
        a.q[blk * 32 + j] = q;
        s[j / 16] += q;
      }
      a.d[blk] = d;
      a.s0[blk] = s[0];
      a.s1[blk] = s[1];
    }
  }
  return a;
}

std::vector<float> matmul_reference(GgmlType type, const uint8_t* w, int64_t rows, int64_t cols,
                                    const float* x, int64_t n, Numerics numerics) {
  SPECDEC_CHECK(rows > 0, "rows", rows, "must be > 0");
  SPECDEC_CHECK(n >= 0, "n", n, "must be >= 0");
  const int64_t rb = row_bytes(type, cols);
  std::vector<float> y(static_cast<size_t>(n * rows));
  const bool is_float = weight_format(type).block_size == 1;
  HostActivations act;
  if (numerics == Numerics::kDevice && !is_float) {
    act = quantize_activations_reference(x, n, cols, activation_scale_block(type));
  }
  std::vector<float> wf(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* row = w + r * rb;
    if (numerics == Numerics::kExact || is_float) dequantize_row(type, row, wf.data(), cols);
    RowInts ints;
    if (numerics == Numerics::kDevice && !is_float) ints = decode_ints(type, row, cols);
    for (int64_t i = 0; i < n; ++i) {
      const float* xi = x + i * cols;
      float v;
      if (numerics == Numerics::kExact) {
        double s = 0.0;
        for (int64_t k = 0; k < cols; ++k) s += static_cast<double>(wf[k]) * xi[k];
        v = static_cast<float>(s);
      } else if (is_float) {
        v = dot_float_device(wf.data(), xi, cols);
      } else {
        v = dot_block_device(type, ints, act, i);
      }
      y[static_cast<size_t>(i * rows + r)] = v;
    }
  }
  return y;
}

}  // namespace specdec::quant
