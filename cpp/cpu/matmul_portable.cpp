// The portable path: every format of the device layout, plain loops over the planes (no ISA
// flags). Each block of a group is decoded once into the stored integers of its 16 rows and the
// per-unit float factors, then dotted with every activation row in the reference's order
// (quant/reference.cpp, docs/quant.md "Numerics and batch invariance").
#include <cmath>
#include <cstring>

#include "common/dtype.h"
#include "common/ggml_type.h"
#include "cpu/matmul_kernels.h"
#include "quant/dequantize.h"

namespace specdec::cpu::kernels {
namespace {

constexpr int L = kLanes;

static_assert(
    [] {
      for (int i = 0; i < 16; ++i) {
        if (kIq4Table[i] != quant::kIq4Values[i]) return false;
      }
      return true;
    }(),
    "matmul_kernels.h's IQ4 table must equal quant::kIq4Values");

float f16_at(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return half_bits_to_float(bits);
}

// Byte j of a block field stored as "16 rows x 4 bytes" vectors (layout.cpp's move4).
uint8_t byte4(const uint8_t* rec, int j, int lane) {
  return rec[((j >> 2) * L + lane) * 4 + (j & 3)];
}

// One block of a group decoded: per lane the stored integers (unsigned before the format's
// offset; Q8_0 and the IQ4 table values signed) and per unit (32- or 16-element) the factors.
struct Decoded {
  int32_t q[L][256];
  float d[L][16];  // d (Q formats), d * sc (K formats), d * (ls - 32) (IQ4_XS, Q3_K)
  float m[L][16];  // m (Q4_1, Q5_1), dmin * m (Q2_K, Q4_K, Q5_K)
};

// The fifth bit of element e from Q5_0 / Q5_1's transposed qh word of one lane.
int32_t q5_bit(uint32_t h, int e) {
  const int k = e & 15, c = k / 4, s = k % 4;
  return static_cast<int32_t>((h >> (8 * s + c + (e >= 16 ? 4 : 0))) & 1u) << 4;
}

void decode_q32(GgmlType type, const uint8_t* const* plane, int64_t rec, Decoded& out) {
  const bool has_m = type == GgmlType::kQ4_1 || type == GgmlType::kQ5_1;
  const int d_plane = type == GgmlType::kQ5_0 || type == GgmlType::kQ5_1 ? 2 : 1;
  const uint8_t* dp = plane[d_plane] + rec * (has_m ? 64 : 32);
  for (int l = 0; l < L; ++l) {
    int32_t* q = out.q[l];
    out.d[l][0] = f16_at(dp + 2 * l);
    if (has_m) out.m[l][0] = f16_at(dp + 2 * (L + l));
    if (type == GgmlType::kQ8_0) {
      const uint8_t* qs = plane[0] + rec * 512;
      for (int j = 0; j < 32; ++j) q[j] = static_cast<int8_t>(qs[((j / 2) * L + l) * 2 + j % 2]);
      continue;
    }
    const uint8_t* qs = plane[0] + rec * 256;
    for (int j = 0; j < 16; ++j) {
      const uint8_t b = byte4(qs, j, l);
      q[j] = b & 0xF;
      q[j + 16] = b >> 4;
    }
    if (type == GgmlType::kIQ4_NL) {
      for (int j = 0; j < 32; ++j) q[j] = quant::kIq4Values[q[j]];
    } else if (d_plane == 2) {
      uint32_t h;
      std::memcpy(&h, plane[1] + rec * 64 + 4 * l, 4);
      for (int j = 0; j < 32; ++j) q[j] |= q5_bit(h, j);
    }
  }
}

void decode_iq4_xs(const uint8_t* const* plane, int64_t rec, Decoded& out) {
  const uint8_t* qs = plane[0] + rec * 2048;
  const uint8_t* sc = plane[1] + rec * 128;
  for (int l = 0; l < L; ++l) {
    const float d = f16_at(plane[2] + rec * 32 + 2 * l);
    for (int ib = 0; ib < 8; ++ib) {
      out.d[l][ib] = d * static_cast<float>(sc[ib * L + l] - 32);
      for (int j = 0; j < 16; ++j) {
        const uint8_t b = byte4(qs, 16 * ib + j, l);
        out.q[l][32 * ib + j] = quant::kIq4Values[b & 0xF];
        out.q[l][32 * ib + j + 16] = quant::kIq4Values[b >> 4];
      }
    }
  }
}

// Q2_K and Q3_K: elements e = 128n + 32j + 16h + i read qs byte 32n + 16h + i, bits 2j.
void decode_q2_q3_k(GgmlType type, const uint8_t* const* plane, int64_t rec, Decoded& out) {
  const bool q3 = type == GgmlType::kQ3_K;
  const uint8_t* qs = plane[0] + rec * 1024;
  const uint8_t* hm = q3 ? plane[1] + rec * 512 : nullptr;
  const uint8_t* sc = plane[q3 ? 2 : 1] + rec * 256;
  const uint8_t* dp = plane[q3 ? 3 : 2] + rec * (q3 ? 32 : 64);
  for (int l = 0; l < L; ++l) {
    const float d = f16_at(dp + 2 * l);
    for (int s = 0; s < 16; ++s) {
      const uint8_t v = sc[s * L + l];
      if (q3) {
        out.d[l][s] = d * static_cast<float>(v - 32);
      } else {
        out.d[l][s] = d * static_cast<float>(v & 0xF);
        out.m[l][s] = f16_at(dp + 2 * (L + l)) * static_cast<float>(v >> 4);
      }
    }
    for (int e = 0; e < 256; ++e) {
      const int n = e / 128, j = (e % 128) / 32, h = (e % 32) / 16, i = e % 16;
      int32_t v = (byte4(qs, 32 * n + 16 * h + i, l) >> (2 * j)) & 3;
      if (q3) v |= ((byte4(hm, 16 * h + i, l) >> (4 * n + j)) & 1) << 2;
      out.q[l][e] = v;
    }
  }
}

void decode_q4_q5_k(GgmlType type, const uint8_t* const* plane, int64_t rec, Decoded& out) {
  const bool q5 = type == GgmlType::kQ5_K;
  const uint8_t* qs = plane[0] + rec * 2048;
  const uint8_t* qh = q5 ? plane[1] + rec * 512 : nullptr;
  const uint8_t* sc = plane[q5 ? 2 : 1] + rec * 256;
  const uint8_t* dm = plane[q5 ? 3 : 2] + rec * 64;
  for (int l = 0; l < L; ++l) {
    const float d = f16_at(dm + 2 * l), dmin = f16_at(dm + 2 * (L + l));
    for (int j = 0; j < 8; ++j) {
      out.d[l][j] = static_cast<float>(sc[j * L + l]) * d;
      out.m[l][j] = static_cast<float>(sc[(8 + j) * L + l]) * dmin;
      for (int i = 0; i < 32; ++i) {
        const uint8_t b = byte4(qs, 32 * (j / 2) + i, l);
        int32_t v = j % 2 == 0 ? b & 0xF : b >> 4;
        if (q5) v |= ((byte4(qh, i, l) >> j) & 1) << 4;
        out.q[l][32 * j + i] = v;
      }
    }
  }
}

void decode_q6_k(const uint8_t* const* plane, int64_t rec, Decoded& out) {
  const uint8_t* ql = plane[0] + rec * 2048;
  const uint8_t* qh = plane[1] + rec * 1024;
  const uint8_t* sc = plane[2] + rec * 256;
  for (int l = 0; l < L; ++l) {
    const float d = f16_at(plane[3] + rec * 32 + 2 * l);
    for (int s = 0; s < 16; ++s)
      out.d[l][s] = static_cast<float>(static_cast<int8_t>(sc[s * L + l])) * d;
    for (int e = 0; e < 256; ++e) {
      const int h = e / 128, m = (e % 128) / 32, i = e % 32;
      const uint8_t lq = byte4(ql, 64 * h + 32 * (m & 1) + i, l), hq = byte4(qh, 32 * h + i, l);
      out.q[l][e] = (m < 2 ? lq & 0xF : lq >> 4) | (((hq >> (2 * m)) & 3) << 4);
    }
  }
}

void decode(GgmlType type, const uint8_t* const* plane, int64_t rec, Decoded& out) {
  switch (type) {
    case GgmlType::kIQ4_XS:
      return decode_iq4_xs(plane, rec, out);
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K:
      return decode_q2_q3_k(type, plane, rec, out);
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
      return decode_q4_q5_k(type, plane, rec, out);
    case GgmlType::kQ6_K:
      return decode_q6_k(plane, rec, out);
    default:
      return decode_q32(type, plane, rec, out);
  }
}

int32_t idot(const int32_t* q, const int8_t* x, int n) {
  int32_t s = 0;
  for (int j = 0; j < n; ++j) s += q[j] * x[j];
  return s;
}

// One 32-element activation block u of a decoded block, for one lane: the reference's float
// operations in its order.
float block_step(GgmlType type, float acc, const int32_t* q, const int8_t* x, float dx,
                 int32_t sum0, int32_t sum1, const float* d, const float* m, int u) {
  switch (type) {
    case GgmlType::kQ4_1:
    case GgmlType::kQ5_1:
      acc = std::fma(static_cast<float>(idot(q, x, 32)) * d[u], dx, acc);
      return std::fma(m[u], dx * static_cast<float>(sum0 + sum1), acc);
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
      acc = std::fma(static_cast<float>(idot(q, x, 32)) * d[u], dx, acc);
      return std::fma(m[u], -(dx * static_cast<float>(sum0 + sum1)), acc);
    case GgmlType::kQ2_K:
      acc = std::fma(static_cast<float>(idot(q, x, 16)) * d[2 * u], dx, acc);
      acc = std::fma(m[2 * u], -(dx * static_cast<float>(sum0)), acc);
      acc = std::fma(static_cast<float>(idot(q + 16, x + 16, 16)) * d[2 * u + 1], dx, acc);
      return std::fma(m[2 * u + 1], -(dx * static_cast<float>(sum1)), acc);
    case GgmlType::kQ3_K:
    case GgmlType::kQ6_K: {
      const int32_t off = type == GgmlType::kQ3_K ? 4 : 32;
      const int32_t sa = idot(q, x, 16) - off * sum0, sb = idot(q + 16, x + 16, 16) - off * sum1;
      acc = std::fma(static_cast<float>(sa) * d[2 * u], dx, acc);
      return std::fma(static_cast<float>(sb) * d[2 * u + 1], dx, acc);
    }
    default: {  // Q8_0, Q4_0, Q5_0, IQ4_NL, IQ4_XS
      const int32_t off = type == GgmlType::kQ4_0 ? 8 : type == GgmlType::kQ5_0 ? 16 : 0;
      const int32_t s = idot(q, x, 32) - off * (sum0 + sum1);
      return std::fma(static_cast<float>(s) * d[u], dx, acc);
    }
  }
}

template <GgmlType kType>
void block_group(const Args& a, int64_t g) {
  constexpr int bs = kType == GgmlType::kQ8_0 || kType == GgmlType::kQ4_0 ||
                             kType == GgmlType::kQ4_1 || kType == GgmlType::kQ5_0 ||
                             kType == GgmlType::kQ5_1 || kType == GgmlType::kIQ4_NL
                         ? 32
                         : 256;
  const int64_t nb32 = a.cols / 32;
  float acc[kMaxRows][L] = {};
  static thread_local Decoded dec;
  for (int64_t b = 0; b < a.blocks_per_row; ++b) {
    decode(kType, a.plane, g * a.blocks_per_row + b, dec);
    for (int i = 0; i < a.n; ++i) {
      for (int u = 0; u < bs / 32; ++u) {
        const int64_t at = i * nb32 + b * (bs / 32) + u;
        const int8_t* x = a.xq + i * a.cols + (b * bs + 32 * u);
        const float dx = a.xr[at].d;
        for (int l = 0; l < L; ++l) {
          acc[i][l] = block_step(kType, acc[i][l], dec.q[l] + 32 * u, x, dx, a.xr[at].s0, a.xr[at].s1,
                                 dec.d[l], dec.m[l], u);
        }
      }
    }
  }
  const int lanes = lanes_in_group(a.rows, g);
  for (int i = 0; i < a.n; ++i) {
    for (int l = 0; l < lanes; ++l) a.y[i * a.ldy + g * L + l] = acc[i][l];
  }
}

float load_float(GgmlType type, const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  if (type == GgmlType::kF16) return half_bits_to_float(h);
  if (type == GgmlType::kBF16) return bf16_bits_to_float(h);
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

// F32 / F16 / BF16: fma into 4 partial sums by k % 4, then (s0 + s1) + (s2 + s3).
template <GgmlType kType>
void float_group(const Args& a, int64_t g) {
  constexpr int es = kType == GgmlType::kF32 ? 4 : 2;
  float acc[kMaxRows][L][4] = {};
  for (int64_t k = 0; k < a.cols; ++k) {
    const uint8_t* rec = a.plane[0] + (g * a.cols + k) * es * L;
    float w[L];
    for (int l = 0; l < L; ++l) w[l] = load_float(kType, rec + es * l);
    for (int i = 0; i < a.n; ++i) {
      const float xk = a.x[i * a.cols + k];
      for (int l = 0; l < L; ++l) acc[i][l][k & 3] = std::fma(w[l], xk, acc[i][l][k & 3]);
    }
  }
  const int lanes = lanes_in_group(a.rows, g);
  for (int i = 0; i < a.n; ++i) {
    for (int l = 0; l < lanes; ++l) {
      const float* s = acc[i][l];
      a.y[i * a.ldy + g * L + l] = (s[0] + s[1]) + (s[2] + s[3]);
    }
  }
}

}  // namespace

GroupKernel portable_kernel(int type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32:
      return float_group<GgmlType::kF32>;
    case GgmlType::kF16:
      return float_group<GgmlType::kF16>;
    case GgmlType::kBF16:
      return float_group<GgmlType::kBF16>;
    case GgmlType::kQ8_0:
      return block_group<GgmlType::kQ8_0>;
    case GgmlType::kQ4_0:
      return block_group<GgmlType::kQ4_0>;
    case GgmlType::kQ4_1:
      return block_group<GgmlType::kQ4_1>;
    case GgmlType::kQ5_0:
      return block_group<GgmlType::kQ5_0>;
    case GgmlType::kQ5_1:
      return block_group<GgmlType::kQ5_1>;
    case GgmlType::kIQ4_NL:
      return block_group<GgmlType::kIQ4_NL>;
    case GgmlType::kIQ4_XS:
      return block_group<GgmlType::kIQ4_XS>;
    case GgmlType::kQ2_K:
      return block_group<GgmlType::kQ2_K>;
    case GgmlType::kQ3_K:
      return block_group<GgmlType::kQ3_K>;
    case GgmlType::kQ4_K:
      return block_group<GgmlType::kQ4_K>;
    case GgmlType::kQ5_K:
      return block_group<GgmlType::kQ5_K>;
    case GgmlType::kQ6_K:
      return block_group<GgmlType::kQ6_K>;
    default:
      return nullptr;
  }
}

}  // namespace specdec::cpu::kernels
