#include "quant/dequantize.h"

#include <cstring>

#include "common/dtype.h"
#include "common/errors.h"

namespace specdec::quant {
namespace {

float f16(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return half_bits_to_float(bits);
}

uint32_t u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void dequant_q8_0(const uint8_t* b, float* y) {
  const float d = f16(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<int8_t>(b[2 + j])) * d;
}

void dequant_q4_0(const uint8_t* b, float* y) {
  const float d = f16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0xF) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

void dequant_q4_1(const uint8_t* b, float* y) {
  const float d = f16(b);
  const float m = f16(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>(qs[j] & 0xF) * d + m;
    y[j + 16] = static_cast<float>(qs[j] >> 4) * d + m;
  }
}

void dequant_q5_0(const uint8_t* b, float* y) {
  const float d = f16(b);
  const uint32_t qh = u32(b + 2);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int lo = static_cast<int>((qs[j] & 0xF) | (((qh >> j) & 1u) << 4)) - 16;
    const int hi = static_cast<int>((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4)) - 16;
    y[j] = static_cast<float>(lo) * d;
    y[j + 16] = static_cast<float>(hi) * d;
  }
}

void dequant_q5_1(const uint8_t* b, float* y) {
  const float d = f16(b);
  const float m = f16(b + 2);
  const uint32_t qh = u32(b + 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const int lo = static_cast<int>((qs[j] & 0xF) | (((qh >> j) & 1u) << 4));
    const int hi = static_cast<int>((qs[j] >> 4) | (((qh >> (j + 16)) & 1u) << 4));
    y[j] = static_cast<float>(lo) * d + m;
    y[j + 16] = static_cast<float>(hi) * d + m;
  }
}

// IQ4_NL (d = the block's scale) and one 32-element sub-block of IQ4_XS (d = d * (ls - 32)).
void dequant_iq4(float d, const uint8_t* qs, float* y) {
  for (int j = 0; j < 16; ++j) {
    y[j] = d * static_cast<float>(kIq4Values[qs[j] & 0xF]);
    y[j + 16] = d * static_cast<float>(kIq4Values[qs[j] >> 4]);
  }
}

void dequant_iq4_xs(const uint8_t* b, float* y) {
  const float d = f16(b);
  uint16_t scales_h;
  std::memcpy(&scales_h, b + 2, 2);
  for (int ib = 0; ib < 8; ++ib) {
    const float dl = d * static_cast<float>(iq4_xs_scale(ib, scales_h, b + 4) - 32);
    dequant_iq4(dl, b + 8 + 16 * ib, y + 32 * ib);
  }
}

// Q4_K (qh == nullptr) and Q5_K: 4 chunks of 64 elements, low nibbles = sub-block 2c, high
// nibbles = sub-block 2c + 1; Q5_K's fifth bit of element l of sub-block j is bit j of qh[l].
void dequant_q45_k(const uint8_t* scales, const uint8_t* qh, const uint8_t* qs, float d, float dmin,
                   float* y) {
  for (int c = 0; c < 4; ++c) {
    uint8_t sc, m;
    k4_scale_min(2 * c, scales, &sc, &m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    k4_scale_min(2 * c + 1, scales, &sc, &m);
    const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
    const uint8_t* q = qs + 32 * c;
    for (int l = 0; l < 32; ++l) {
      const int h = qh != nullptr ? ((qh[l] >> (2 * c)) & 1) << 4 : 0;
      y[64 * c + l] = d1 * static_cast<float>((q[l] & 0xF) + h) - m1;
    }
    for (int l = 0; l < 32; ++l) {
      const int h = qh != nullptr ? ((qh[l] >> (2 * c + 1)) & 1) << 4 : 0;
      y[64 * c + 32 + l] = d2 * static_cast<float>((q[l] >> 4) + h) - m2;
    }
  }
}

// Q2_K: as Q3_K's low bits (bits 2j of qs[32n + 16h + l]), per 16-element sub-block a 4-bit
// scale and a 4-bit min in one byte: y = d * sc * q - dmin * m.
void dequant_q2_k(const uint8_t* b, float* y) {
  const uint8_t* q = b + 16;
  const float d = f16(b + 80), dmin = f16(b + 82);
  int is = 0;
  for (int n = 0; n < 2; ++n) {
    for (int j = 0; j < 4; ++j) {
      for (int h = 0; h < 2; ++h) {
        const uint8_t sc = b[is++];
        const float dl = d * static_cast<float>(sc & 0xF), ml = dmin * static_cast<float>(sc >> 4);
        for (int l = 0; l < 16; ++l)
          *y++ = dl * static_cast<float>((q[16 * h + l] >> (2 * j)) & 3) - ml;
      }
    }
    q += 32;
  }
}

// Q3_K: two 128-element halves n, each 4 groups j of two 16-element sub-blocks h; the 2 low bits
// are bits 2j of qs[32n + 16h + l], the third (set = no offset of -4) bit 4n + j of hmask[16h + l].
void dequant_q3_k(const uint8_t* b, float* y) {
  const uint8_t* hm = b;
  const uint8_t* q = b + 32;
  uint8_t ls[16];
  q3_k_scales(b + 96, ls);
  const float d_all = f16(b + 108);
  int is = 0;
  for (int n = 0; n < 2; ++n) {
    for (int j = 0; j < 4; ++j) {
      for (int h = 0; h < 2; ++h) {
        const float dl = d_all * static_cast<float>(ls[is++] - 32);
        for (int l = 0; l < 16; ++l) {
          const int hi = (hm[16 * h + l] >> (4 * n + j)) & 1;
          const int v = ((q[16 * h + l] >> (2 * j)) & 3) - (hi != 0 ? 0 : 4);
          *y++ = dl * static_cast<float>(v);
        }
      }
    }
    q += 32;
  }
}

void dequant_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = f16(b + 208);
  for (int n = 0; n < 2; ++n) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = static_cast<int>((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = static_cast<int>((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = static_cast<int>((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = static_cast<int>((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * static_cast<float>(sc[is + 0]) * static_cast<float>(q1);
      y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
      y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
      y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

void dequant_block(GgmlType type, const uint8_t* b, float* y) {
  switch (type) {
    case GgmlType::kF32:
      std::memcpy(y, b, 4);
      break;
    case GgmlType::kF16:
      *y = f16(b);
      break;
    case GgmlType::kBF16: {
      uint16_t bits;
      std::memcpy(&bits, b, 2);
      *y = bf16_bits_to_float(bits);
      break;
    }
    case GgmlType::kQ8_0:
      dequant_q8_0(b, y);
      break;
    case GgmlType::kQ4_0:
      dequant_q4_0(b, y);
      break;
    case GgmlType::kQ4_1:
      dequant_q4_1(b, y);
      break;
    case GgmlType::kQ5_0:
      dequant_q5_0(b, y);
      break;
    case GgmlType::kQ5_1:
      dequant_q5_1(b, y);
      break;
    case GgmlType::kIQ4_NL:
      dequant_iq4(f16(b), b + 2, y);
      break;
    case GgmlType::kIQ4_XS:
      dequant_iq4_xs(b, y);
      break;
    case GgmlType::kQ2_K:
      dequant_q2_k(b, y);
      break;
    case GgmlType::kQ3_K:
      dequant_q3_k(b, y);
      break;
    case GgmlType::kQ4_K:
      dequant_q45_k(b + 4, nullptr, b + 16, f16(b), f16(b + 2), y);
      break;
    case GgmlType::kQ5_K:
      dequant_q45_k(b + 4, b + 16, b + 48, f16(b), f16(b + 2), y);
      break;
    case GgmlType::kQ6_K:
      dequant_q6_k(b, y);
      break;
    default:
      break;  // weight_format() rejected it
  }
}

}  // namespace

void q3_k_scales(const uint8_t* packed, uint8_t* ls) {
  for (int i = 0; i < 16; ++i) {
    ls[i] = static_cast<uint8_t>(((packed[i % 8] >> (4 * (i / 8))) & 0xF) |
                                 (((packed[8 + i % 4] >> (2 * (i / 4))) & 3) << 4));
  }
}

void pack_q3_k_scales(const uint8_t* ls, uint8_t* packed) {
  std::memset(packed, 0, 12);
  for (int i = 0; i < 16; ++i) {
    packed[i % 8] |= static_cast<uint8_t>((ls[i] & 0xF) << (4 * (i / 8)));
    packed[8 + i % 4] |= static_cast<uint8_t>(((ls[i] >> 4) & 3) << (2 * (i / 4)));
  }
}

void k4_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void dequantize_row(GgmlType type, const uint8_t* src, float* dst, int64_t n) {
  const WeightFormat& f = weight_format(type);
  check_row_length(type, n, "n");
  const int64_t blocks = n / f.block_size;
  for (int64_t i = 0; i < blocks; ++i) {
    const uint8_t* b = src + i * f.block_bytes;
    float* y = dst + i * f.block_size;
    dequant_block(type, b, y);
  }
}

std::vector<float> dequantize(GgmlType type, const uint8_t* src, int64_t rows, int64_t cols) {
  SPECDEC_CHECK(rows >= 0, "rows", rows, "must be >= 0");
  const int64_t rb = row_bytes(type, cols);
  std::vector<float> out(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    dequantize_row(type, src + r * rb, out.data() + r * cols, cols);
  return out;
}

std::vector<uint8_t> quantize(GgmlType type, const float* src, int64_t rows, int64_t cols) {
  SPECDEC_CHECK(rows >= 0, "rows", rows, "must be >= 0");
  const int64_t rb = row_bytes(type, cols);
  std::vector<uint8_t> out(static_cast<size_t>(rows * rb));
  for (int64_t r = 0; r < rows; ++r) quantize_row(type, src + r * cols, out.data() + r * rb, cols);
  return out;
}

}  // namespace specdec::quant
