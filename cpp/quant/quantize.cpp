// Reference quantizers (declared in quant/dequantize.h). Q8_0, Q4_0, Q4_1, Q5_0 and Q5_1 follow
// ggml's quantize_row_*_ref; IQ4_NL / IQ4_XS take the signed max-abs scale (the largest value
// maps to the table's -127; IQ4_XS: 6-bit sub-block scales against one f16 scale) and the nearest
// table value, without ggml's scale search; the K-quants use plain min/max (Q2_K, Q4_K, Q5_K) or
// max-abs (Q3_K, Q6_K) scales per sub-block, quantised to 4, 6 or 8 bits against one super-block
// scale, then round to nearest.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/dtype.h"
#include "common/errors.h"
#include "quant/dequantize.h"

namespace specdec::quant {
namespace {

void put_f16(uint8_t* p, float v) {
  const uint16_t bits = float_to_half_bits(v);
  std::memcpy(p, &bits, 2);
}

float round_f16(float v) { return half_bits_to_float(float_to_half_bits(v)); }

int nearest(float v) { return static_cast<int>(std::lround(v)); }

// The element of largest magnitude, with its sign.
float signed_max(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void quant_q8_0(const float* x, uint8_t* b) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(b, d);
  for (int j = 0; j < 32; ++j)
    b[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::round(x[j] * id)));
}

void quant_q4_0(const float* x, uint8_t* b) {
  const float d = signed_max(x, 32) / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(b, d);
  for (int j = 0; j < 16; ++j) {
    const int lo = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
    const int hi = std::min(15, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 8.5f)));
    b[2 + j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

void quant_q4_1(const float* x, uint8_t* b) {
  float min = x[0], max = x[0];
  for (int j = 1; j < 32; ++j) {
    min = std::min(min, x[j]);
    max = std::max(max, x[j]);
  }
  const float d = (max - min) / 15.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(b, d);
  put_f16(b + 2, min);
  for (int j = 0; j < 16; ++j) {
    const int lo = std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - min) * id + 0.5f)));
    const int hi =
        std::min(15, static_cast<int>(static_cast<int8_t>((x[j + 16] - min) * id + 0.5f)));
    b[4 + j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

void quant_q5_0(const float* x, uint8_t* b) {
  const float d = signed_max(x, 32) / -16.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(b, d);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const int lo = std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f)));
    const int hi = std::min(31, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 16.5f)));
    b[6 + j] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
    qh |= static_cast<uint32_t>((lo >> 4) & 1) << j;
    qh |= static_cast<uint32_t>((hi >> 4) & 1) << (j + 16);
  }
  std::memcpy(b + 2, &qh, 4);
}

void quant_q5_1(const float* x, uint8_t* b) {
  float min = x[0], max = x[0];
  for (int j = 1; j < 32; ++j) {
    min = std::min(min, x[j]);
    max = std::max(max, x[j]);
  }
  const float d = (max - min) / 31.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  put_f16(b, d);
  put_f16(b + 2, min);
  uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const auto lo = static_cast<uint8_t>((x[j] - min) * id + 0.5f);
    const auto hi = static_cast<uint8_t>((x[j + 16] - min) * id + 0.5f);
    b[8 + j] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
    qh |= static_cast<uint32_t>((lo >> 4) & 1) << j;
    qh |= static_cast<uint32_t>((hi >> 4) & 1) << (j + 16);
  }
  std::memcpy(b + 4, &qh, 4);
}

// The index of the table value nearest to v (the first of two equally near).
uint8_t iq4_index(float v) {
  uint8_t best = 0;
  for (uint8_t i = 1; i < 16; ++i) {
    if (std::fabs(v - kIq4Values[i]) < std::fabs(v - kIq4Values[best])) best = i;
  }
  return best;
}

// 32 elements as IQ4_NL nibbles at qs (16 bytes) for the scale d.
void quant_iq4_32(const float* x, float d, uint8_t* qs) {
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < 16; ++j)
    qs[j] = static_cast<uint8_t>(iq4_index(x[j] * id) | (iq4_index(x[j + 16] * id) << 4));
}

void quant_iq4_nl(const float* x, uint8_t* b) {
  const float d = round_f16(signed_max(x, 32) / -127.0f);
  put_f16(b, d);
  quant_iq4_32(x, d, b + 2);
}

void quant_iq4_xs(const float* x, uint8_t* b) {
  float scale[8], max_scale = 0.0f;
  for (int ib = 0; ib < 8; ++ib) {
    scale[ib] = signed_max(x + 32 * ib, 32) / -127.0f;
    if (std::fabs(scale[ib]) > std::fabs(max_scale)) max_scale = scale[ib];
  }
  const float d = round_f16(max_scale / -32.0f);
  put_f16(b, d);
  uint16_t scales_h = 0;
  std::memset(b + 4, 0, 4);
  for (int ib = 0; ib < 8; ++ib) {
    const int l = d != 0.0f ? std::clamp(nearest(scale[ib] / d), -32, 31) : 0;
    const int ls = l + 32;
    b[4 + ib / 2] |= static_cast<uint8_t>((ls & 0xF) << (4 * (ib % 2)));
    scales_h |= static_cast<uint16_t>((ls >> 4) << (2 * ib));
    quant_iq4_32(x + 32 * ib, d * static_cast<float>(l), b + 8 + 16 * ib);
  }
  std::memcpy(b + 2, &scales_h, 2);
}

// Q4_K (max_q = 15) and Q5_K (max_q = 31): q[256] and the d, dmin, packed scales.
void quant_q45_k(const float* x, int max_q, uint8_t* d_dmin, uint8_t* scales, uint8_t* q) {
  float scale[8], mins[8], max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    float lo = 0.0f, hi = x[32 * j];
    for (int l = 0; l < 32; ++l) {
      lo = std::min(lo, x[32 * j + l]);
      hi = std::max(hi, x[32 * j + l]);
    }
    scale[j] = std::max(0.0f, hi - lo) / static_cast<float>(max_q);
    mins[j] = -lo;
    max_scale = std::max(max_scale, scale[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float d = round_f16(max_scale / 63.0f), dmin = round_f16(max_min / 63.0f);
  put_f16(d_dmin, d);
  put_f16(d_dmin + 2, dmin);
  std::memset(scales, 0, 12);
  for (int j = 0; j < 8; ++j) {
    const int ls = d > 0.0f ? std::clamp(nearest(scale[j] / d), 0, 63) : 0;
    const int lm = dmin > 0.0f ? std::clamp(nearest(mins[j] / dmin), 0, 63) : 0;
    if (j < 4) {
      scales[j] = static_cast<uint8_t>(ls);
      scales[j + 4] = static_cast<uint8_t>(lm);
    } else {
      scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      scales[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
    const float dd = d * static_cast<float>(ls), dm = dmin * static_cast<float>(lm);
    for (int l = 0; l < 32; ++l) {
      q[32 * j + l] = static_cast<uint8_t>(
          dd > 0.0f ? std::clamp(nearest((x[32 * j + l] + dm) / dd), 0, max_q) : 0);
    }
  }
}

void quant_q4_k(const float* x, uint8_t* b) {
  uint8_t q[256];
  quant_q45_k(x, 15, b, b + 4, q);
  uint8_t* qs = b + 16;
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l)
      qs[32 * c + l] = static_cast<uint8_t>(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
  }
}

void quant_q5_k(const float* x, uint8_t* b) {
  uint8_t q[256];
  quant_q45_k(x, 31, b, b + 4, q);
  uint8_t* qh = b + 16;
  uint8_t* qs = b + 48;
  std::memset(qh, 0, 32);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t lo = q[64 * c + l], hi = q[64 * c + 32 + l];
      qs[32 * c + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
      qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
    }
  }
}

// Q2_K: min/max per 16-element sub-block (min clamped to <= 0), 4-bit scales and mins against
// f16 d and dmin, stored q in 0..3.
void quant_q2_k(const float* x, uint8_t* b) {
  float scale[16], mins[16], max_scale = 0.0f, max_min = 0.0f;
  for (int s = 0; s < 16; ++s) {
    float lo = 0.0f, hi = x[16 * s];
    for (int l = 0; l < 16; ++l) {
      lo = std::min(lo, x[16 * s + l]);
      hi = std::max(hi, x[16 * s + l]);
    }
    scale[s] = std::max(0.0f, hi - lo) / 3.0f;
    mins[s] = -lo;
    max_scale = std::max(max_scale, scale[s]);
    max_min = std::max(max_min, mins[s]);
  }
  const float d = round_f16(max_scale / 15.0f), dmin = round_f16(max_min / 15.0f);
  std::memset(b, 0, 80);
  put_f16(b + 80, d);
  put_f16(b + 82, dmin);
  for (int s = 0; s < 16; ++s) {
    const int ls = d > 0.0f ? std::clamp(nearest(scale[s] / d), 0, 15) : 0;
    const int lm = dmin > 0.0f ? std::clamp(nearest(mins[s] / dmin), 0, 15) : 0;
    b[s] = static_cast<uint8_t>(ls | (lm << 4));
    const float dd = d * static_cast<float>(ls), dm = dmin * static_cast<float>(lm);
    for (int i = 0; i < 16; ++i) {
      const int e = 16 * s + i, n = e / 128, j = (e % 128) / 32, h = (e % 32) / 16;
      const int u = dd > 0.0f ? std::clamp(nearest((x[e] + dm) / dd), 0, 3) : 0;
      b[16 + 32 * n + 16 * h + i] |= static_cast<uint8_t>(u << (2 * j));
    }
  }
}

// Q3_K: signed max-abs per 16-element sub-block (the largest -> -4), 6-bit signed scales against
// one f16 scale (the largest -> -32), stored values q + 4 in 0..7.
void quant_q3_k(const float* x, uint8_t* b) {
  float scale[16], max_scale = 0.0f;
  for (int s = 0; s < 16; ++s) {
    scale[s] = signed_max(x + 16 * s, 16) / -4.0f;
    if (std::fabs(scale[s]) > std::fabs(max_scale)) max_scale = scale[s];
  }
  const float d = round_f16(max_scale / -32.0f);
  std::memset(b, 0, 108);
  put_f16(b + 108, d);
  uint8_t ls[16];
  for (int s = 0; s < 16; ++s) {
    const int l = d != 0.0f ? std::clamp(nearest(scale[s] / d), -32, 31) : 0;
    ls[s] = static_cast<uint8_t>(l + 32);
    const float dd = d * static_cast<float>(l);
    for (int i = 0; i < 16; ++i) {
      const int e = 16 * s + i, n = e / 128, j = (e % 128) / 32, h = (e % 32) / 16;
      const int u = dd != 0.0f ? std::clamp(nearest(x[e] / dd), -4, 3) + 4 : 4;
      b[32 + 32 * n + 16 * h + i] |= static_cast<uint8_t>((u & 3) << (2 * j));
      b[16 * h + i] |= static_cast<uint8_t>((u >> 2) << (4 * n + j));
    }
  }
  pack_q3_k_scales(ls, b + 96);
}

void quant_q6_k(const float* x, uint8_t* b) {
  float scale[16], max_scale = 0.0f;
  for (int s = 0; s < 16; ++s) {
    scale[s] = signed_max(x + 16 * s, 16) / -32.0f;
    if (std::fabs(scale[s]) > std::fabs(max_scale)) max_scale = scale[s];
  }
  const float d = round_f16(max_scale / -128.0f);
  put_f16(b + 208, d);
  auto* sc = reinterpret_cast<int8_t*>(b + 192);
  uint8_t q[256];
  for (int s = 0; s < 16; ++s) {
    const int ls = d != 0.0f ? std::clamp(nearest(scale[s] / d), -128, 127) : 0;
    sc[s] = static_cast<int8_t>(ls);
    const float dd = d * static_cast<float>(ls);
    for (int l = 0; l < 16; ++l) {
      q[16 * s + l] = static_cast<uint8_t>(
          dd != 0.0f ? std::clamp(nearest(x[16 * s + l] / dd) + 32, 0, 63) : 32);
    }
  }
  uint8_t* ql = b;
  uint8_t* qh = b + 128;
  for (int n = 0; n < 2; ++n) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t* e = q + 128 * n + l;
      ql[64 * n + l] = static_cast<uint8_t>((e[0] & 0xF) | ((e[64] & 0xF) << 4));
      ql[64 * n + l + 32] = static_cast<uint8_t>((e[32] & 0xF) | ((e[96] & 0xF) << 4));
      qh[32 * n + l] = static_cast<uint8_t>((e[0] >> 4) | ((e[32] >> 4) << 2) |
                                            ((e[64] >> 4) << 4) | ((e[96] >> 4) << 6));
    }
  }
}

void quant_block(GgmlType type, const float* x, uint8_t* b) {
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(b, x, 4);
      break;
    case GgmlType::kF16:
      put_f16(b, *x);
      break;
    case GgmlType::kBF16: {
      const uint16_t bits = float_to_bf16_bits(*x);
      std::memcpy(b, &bits, 2);
      break;
    }
    case GgmlType::kQ8_0:
      quant_q8_0(x, b);
      break;
    case GgmlType::kQ4_0:
      quant_q4_0(x, b);
      break;
    case GgmlType::kQ4_1:
      quant_q4_1(x, b);
      break;
    case GgmlType::kQ5_0:
      quant_q5_0(x, b);
      break;
    case GgmlType::kQ5_1:
      quant_q5_1(x, b);
      break;
    case GgmlType::kIQ4_NL:
      quant_iq4_nl(x, b);
      break;
    case GgmlType::kIQ4_XS:
      quant_iq4_xs(x, b);
      break;
    case GgmlType::kQ2_K:
      quant_q2_k(x, b);
      break;
    case GgmlType::kQ3_K:
      quant_q3_k(x, b);
      break;
    case GgmlType::kQ4_K:
      quant_q4_k(x, b);
      break;
    case GgmlType::kQ5_K:
      quant_q5_k(x, b);
      break;
    case GgmlType::kQ6_K:
      quant_q6_k(x, b);
      break;
    default:
      break;
  }
}

}  // namespace

void quantize_row(GgmlType type, const float* src, uint8_t* dst, int64_t n) {
  const WeightFormat& f = weight_format(type);
  check_row_length(type, n, "n");
  const int64_t blocks = n / f.block_size;
  for (int64_t i = 0; i < blocks; ++i) {
    const float* x = src + i * f.block_size;
    uint8_t* b = dst + i * f.block_bytes;
    quant_block(type, x, b);
  }
}

}  // namespace specdec::quant
