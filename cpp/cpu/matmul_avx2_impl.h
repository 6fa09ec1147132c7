// AVX2 kernels, shared by matmul_avx2.cpp (kVnni = false: vpmaddubsw with 16-bit pair sums,
// bounded below 2^15 by grouping, widened by vpmaddwd) and matmul_avx_vnni.cpp (kVnni = true:
// VEX vpdpbusd, exact in int32). A group's 16 rows are run as two halves of 8 lanes (bytes
// [32h, 32h + 32) of every 64-byte vector of the layout), one ymm accumulator per activation row.
// Included only by those two translation units, each with its own flags; everything here has
// internal linkage. Numerics: docs/quant.md; the integers are exact and the float operations are
// the reference's, in its order.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu/matmul_kernels.h"

namespace specdec::cpu::kernels {
namespace {

constexpr int kHalf = 8;  // lanes per ymm

inline __m256i bcast4(const int8_t* x) {
  int32_t v;
  std::memcpy(&v, x, 4);
  return _mm256_set1_epi32(v);
}

inline __m256i load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
inline __m128i load16(const uint8_t* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// 8 bytes (one per lane) as floats.
inline __m256 u8_to_ps(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m256 s8_to_ps(const uint8_t* p) {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
// 8 f16 values (one per lane) as floats.
inline __m256 f16_to_ps(const uint8_t* p) { return _mm256_cvtph_ps(load16(p)); }

// Per lane: sum over k < kCount of the 4 unsigned bytes of w[k] times the signed bytes
// x[4k .. 4k + 3]; kGroup: vpmaddubsw results the non-VNNI path may add in 16 bits.
template <bool kVnni, int kCount, int kGroup>
inline __m256i dot_u8(const __m256i* w, const int8_t* x) {
  if constexpr (kVnni) {
    __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
    for (int k = 0; k + 1 < kCount; k += 2) {
      s0 = _mm256_dpbusd_avx_epi32(s0, w[k], bcast4(x + 4 * k));
      s1 = _mm256_dpbusd_avx_epi32(s1, w[k + 1], bcast4(x + 4 * k + 4));
    }
    return _mm256_add_epi32(s0, s1);
  } else {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i s = _mm256_setzero_si256();
    for (int k0 = 0; k0 < kCount; k0 += kGroup) {
      __m256i p = _mm256_maddubs_epi16(w[k0], bcast4(x + 4 * k0));
      for (int k = k0 + 1; k < k0 + kGroup && k < kCount; ++k)
        p = _mm256_add_epi16(p, _mm256_maddubs_epi16(w[k], bcast4(x + 4 * k)));
      s = _mm256_add_epi32(s, _mm256_madd_epi16(p, ones));
    }
    return s;
  }
}

// acc = fma((float)s * dw, dx, acc)
inline __m256 step(__m256 acc, __m256i s, __m256 dw, float dx) {
  return _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(s), dw), _mm256_set1_ps(dx), acc);
}

inline void store_half(const Args& a, int64_t g, int h, const __m256* acc, int n) {
  const int lanes = lanes_in_group(a.rows, g) - kHalf * h;
  if (lanes <= 0) return;
  for (int i = 0; i < n; ++i) {
    float* y = a.y + i * a.ldy + g * kLanes + kHalf * h;
    if (lanes >= kHalf) {
      _mm256_storeu_ps(y, acc[i]);
    } else {
      alignas(32) float tmp[kHalf];
      _mm256_store_ps(tmp, acc[i]);
      for (int l = 0; l < lanes; ++l) y[l] = tmp[l];
    }
  }
}

// Bit j of every byte moved to bit 4 (Q5_K's fifth bits).
inline __m256i bit_to_4(__m256i h, int j) {
  const __m256i mask = _mm256_set1_epi8(0x10);
  return j <= 4 ? _mm256_and_si256(_mm256_sll_epi16(h, _mm_cvtsi32_si128(4 - j)), mask)
                : _mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(j - 4)), mask);
}

// Q4_K / Q5_K (see matmul_avx512_impl.h), on half h of the group.
template <bool kVnni, int kType, int kN>
void q4_k_half(const Args& a, int64_t g, int h) {
  constexpr bool q5 = kType == kTypeQ5_K;
  constexpr int group = q5 ? 4 : 8;
  const int n = kN > 0 ? kN : a.n;
  const int64_t nsb = a.blocks_per_row, nb = a.cols / 32;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc[kMaxRows];
  for (int i = 0; i < n; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const int64_t rec = g * nsb + sb;
    const uint8_t* qs = a.plane[0] + rec * 2048 + 32 * h;
    const uint8_t* qh = q5 ? a.plane[1] + rec * 512 + 32 * h : nullptr;
    const uint8_t* sc = a.plane[q5 ? 2 : 1] + rec * 256 + 8 * h;
    const uint8_t* dm = a.plane[q5 ? 3 : 2] + rec * 64 + 16 * h;
    const __m256 d = f16_to_ps(dm);
    const __m256 dmin = f16_to_ps(dm + 32);
    for (int c = 0; c < 4; ++c) {
      __m256i lo[8], hi[8];
      for (int t = 0; t < 8; ++t) {
        const __m256i p = load32(qs + (8 * c + t) * 64);
        lo[t] = _mm256_and_si256(p, m4);
        hi[t] = _mm256_and_si256(_mm256_srli_epi16(p, 4), m4);
        if constexpr (q5) {
          const __m256i hb = load32(qh + 64 * t);
          lo[t] = _mm256_or_si256(lo[t], bit_to_4(hb, 2 * c));
          hi[t] = _mm256_or_si256(hi[t], bit_to_4(hb, 2 * c + 1));
        }
      }
      const __m256 dsc0 = _mm256_mul_ps(u8_to_ps(sc + 32 * c), d);
      const __m256 dsc1 = _mm256_mul_ps(u8_to_ps(sc + 32 * c + 16), d);
      const __m256 dm0 = _mm256_mul_ps(u8_to_ps(sc + 128 + 32 * c), dmin);
      const __m256 dm1 = _mm256_mul_ps(u8_to_ps(sc + 128 + 32 * c + 16), dmin);
      for (int i = 0; i < n; ++i) {
        const int64_t at = i * nb + sb * 8 + 2 * c;
        const int8_t* x = a.xq + i * a.cols + sb * 256 + 64 * c;
        const __m256i s0 = dot_u8<kVnni, 8, group>(lo, x);
        const __m256i s1 = dot_u8<kVnni, 8, group>(hi, x + 32);
        const float dx0 = a.xd[at], dx1 = a.xd[at + 1];
        const float xs0 = dx0 * static_cast<float>(a.xs0[at] + a.xs1[at]);
        const float xs1 = dx1 * static_cast<float>(a.xs0[at + 1] + a.xs1[at + 1]);
        __m256 v = step(acc[i], s0, dsc0, dx0);
        v = _mm256_fmadd_ps(dm0, _mm256_set1_ps(-xs0), v);
        v = step(v, s1, dsc1, dx1);
        acc[i] = _mm256_fmadd_ps(dm1, _mm256_set1_ps(-xs1), v);
      }
    }
  }
  store_half(a, g, h, acc, n);
}

inline __m256i bits_to_45(__m256i h, int m) {
  const __m256i mask = _mm256_set1_epi8(0x30);
  switch (m) {
    case 0:
      return _mm256_and_si256(_mm256_slli_epi16(h, 4), mask);
    case 1:
      return _mm256_and_si256(_mm256_slli_epi16(h, 2), mask);
    case 2:
      return _mm256_and_si256(h, mask);
    default:
      return _mm256_and_si256(_mm256_srli_epi16(h, 2), mask);
  }
}

// Q6_K (see matmul_avx512_impl.h), on half h of the group.
template <bool kVnni, int kN>
void q6_k_half(const Args& a, int64_t g, int h2) {
  const int n = kN > 0 ? kN : a.n;
  const int64_t nsb = a.blocks_per_row, nb = a.cols / 32;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc[kMaxRows];
  for (int i = 0; i < n; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const int64_t rec = g * nsb + sb;
    const uint8_t* ql = a.plane[0] + rec * 2048 + 32 * h2;
    const uint8_t* qh = a.plane[1] + rec * 1024 + 32 * h2;
    const uint8_t* sc = a.plane[2] + rec * 256 + 8 * h2;
    const __m256 d = f16_to_ps(a.plane[3] + rec * 32 + 16 * h2);
    for (int h = 0; h < 2; ++h) {
      for (int m = 0; m < 4; ++m) {
        __m256i e[8];
        for (int t = 0; t < 8; ++t) {
          const __m256i q = load32(ql + (16 * h + 8 * (m & 1) + t) * 64);
          const __m256i nib = m < 2 ? _mm256_and_si256(q, m4)
                                    : _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
          e[t] = _mm256_or_si256(nib, bits_to_45(load32(qh + (8 * h + t) * 64), m));
        }
        const __m256 dsa = _mm256_mul_ps(s8_to_ps(sc + (8 * h + 2 * m) * 16), d);
        const __m256 dsb = _mm256_mul_ps(s8_to_ps(sc + (8 * h + 2 * m + 1) * 16), d);
        for (int i = 0; i < n; ++i) {
          const int64_t at = i * nb + sb * 8 + 4 * h + m;
          const int8_t* x = a.xq + i * a.cols + sb * 256 + 128 * h + 32 * m;
          const __m256i sa = _mm256_sub_epi32(dot_u8<kVnni, 4, 2>(e, x),
                                              _mm256_set1_epi32(32 * a.xs0[at]));
          const __m256i sbv = _mm256_sub_epi32(dot_u8<kVnni, 4, 2>(e + 4, x + 16),
                                               _mm256_set1_epi32(32 * a.xs1[at]));
          const float dx = a.xd[at];
          acc[i] = step(step(acc[i], sa, dsa, dx), sbv, dsb, dx);
        }
      }
    }
  }
  store_half(a, g, h2, acc, n);
}

// Q4_0 / Q4_1 / Q5_0 / Q5_1 (see matmul_avx512_impl.h), on half h of the group.
template <bool kVnni, int kType, int kN>
void q32_half(const Args& a, int64_t g, int h) {
  constexpr bool q5 = kType == kTypeQ5_0 || kType == kTypeQ5_1;
  constexpr bool has_m = kType == kTypeQ4_1 || kType == kTypeQ5_1;
  constexpr int off = kType == kTypeQ4_0 ? 8 : kType == kTypeQ5_0 ? 16 : 0;
  constexpr int group = q5 ? 4 : 8;
  const int n = kN > 0 ? kN : a.n;
  const int64_t nb = a.blocks_per_row;
  const __m256i m4 = _mm256_set1_epi8(0x0F), m5 = _mm256_set1_epi8(0x10);
  __m256 acc[kMaxRows];
  for (int i = 0; i < n; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t rec = g * nb + b;
    const uint8_t* qs = a.plane[0] + rec * 256 + 32 * h;
    const uint8_t* dp = a.plane[q5 ? 2 : 1] + rec * (has_m ? 64 : 32) + 16 * h;
    const __m256 d = f16_to_ps(dp);
    __m256i w[8];
    for (int t = 0; t < 4; ++t) {
      const __m256i p = load32(qs + 64 * t);
      w[t] = _mm256_and_si256(p, m4);
      w[4 + t] = _mm256_and_si256(_mm256_srli_epi16(p, 4), m4);
    }
    if constexpr (q5) {
      const __m256i hb = load32(a.plane[1] + rec * 64 + 32 * h);
      w[0] = _mm256_or_si256(w[0], _mm256_and_si256(_mm256_slli_epi16(hb, 4), m5));
      w[1] = _mm256_or_si256(w[1], _mm256_and_si256(_mm256_slli_epi16(hb, 3), m5));
      w[2] = _mm256_or_si256(w[2], _mm256_and_si256(_mm256_slli_epi16(hb, 2), m5));
      w[3] = _mm256_or_si256(w[3], _mm256_and_si256(_mm256_slli_epi16(hb, 1), m5));
      w[4] = _mm256_or_si256(w[4], _mm256_and_si256(hb, m5));
      w[5] = _mm256_or_si256(w[5], _mm256_and_si256(_mm256_srli_epi16(hb, 1), m5));
      w[6] = _mm256_or_si256(w[6], _mm256_and_si256(_mm256_srli_epi16(hb, 2), m5));
      w[7] = _mm256_or_si256(w[7], _mm256_and_si256(_mm256_srli_epi16(hb, 3), m5));
    }
    for (int i = 0; i < n; ++i) {
      const int64_t at = i * nb + b;
      const int32_t sum = a.xs0[at] + a.xs1[at];
      __m256i s = dot_u8<kVnni, 8, group>(w, a.xq + i * a.cols + 32 * b);
      if constexpr (off != 0) s = _mm256_sub_epi32(s, _mm256_set1_epi32(off * sum));
      const float dx = a.xd[at];
      acc[i] = step(acc[i], s, d, dx);
      if constexpr (has_m) {
        acc[i] = _mm256_fmadd_ps(f16_to_ps(dp + 32), _mm256_set1_ps(dx * static_cast<float>(sum)),
                                 acc[i]);
      }
    }
  }
  store_half(a, g, h, acc, n);
}

// Q8_0 on half h. VNNI: vectors 2k, 2k + 1 (2 bytes per lane) interleaved by 16-bit unpacks into
// 4 bytes per lane, + 128 (xor 0x80), vpdpbusd, then 128 * sum(xq) off. Otherwise each vector is
// sign-extended to 16-bit pairs and dotted with the activation pair by vpmaddwd.
template <bool kVnni, int kN>
void q8_0_half(const Args& a, int64_t g, int h) {
  const int n = kN > 0 ? kN : a.n;
  const int64_t nb = a.blocks_per_row;
  __m256 acc[kMaxRows];
  for (int i = 0; i < n; ++i) acc[i] = _mm256_setzero_ps();
  alignas(32) int32_t pairs[16];
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t rec = g * nb + b;
    const uint8_t* qs = a.plane[0] + rec * 512 + 16 * h;
    const __m256 d = f16_to_ps(a.plane[1] + rec * 32 + 16 * h);
    if constexpr (kVnni) {
      const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
      __m256i w[8];
      for (int k = 0; k < 8; ++k) {
        const __m128i p0 = load16(qs + 64 * k), p1 = load16(qs + 64 * k + 32);
        w[k] = _mm256_xor_si256(
            _mm256_set_m128i(_mm_unpackhi_epi16(p0, p1), _mm_unpacklo_epi16(p0, p1)), bias);
      }
      for (int i = 0; i < n; ++i) {
        const int64_t at = i * nb + b;
        const __m256i s = _mm256_sub_epi32(dot_u8<true, 8, 1>(w, a.xq + i * a.cols + 32 * b),
                                           _mm256_set1_epi32(128 * (a.xs0[at] + a.xs1[at])));
        acc[i] = step(acc[i], s, d, a.xd[at]);
      }
    } else {
      __m256i w[16];
      for (int p = 0; p < 16; ++p) w[p] = _mm256_cvtepi8_epi16(load16(qs + 32 * p));
      for (int i = 0; i < n; ++i) {
        const int64_t at = i * nb + b;
        const int8_t* x = a.xq + i * a.cols + 32 * b;
        _mm256_store_si256(reinterpret_cast<__m256i*>(pairs),
                           _mm256_cvtepi8_epi16(load16(reinterpret_cast<const uint8_t*>(x))));
        _mm256_store_si256(reinterpret_cast<__m256i*>(pairs + 8),
                           _mm256_cvtepi8_epi16(load16(reinterpret_cast<const uint8_t*>(x + 16))));
        __m256i s0 = _mm256_madd_epi16(w[0], _mm256_set1_epi32(pairs[0]));
        __m256i s1 = _mm256_madd_epi16(w[1], _mm256_set1_epi32(pairs[1]));
        for (int p = 2; p < 16; p += 2) {
          s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(w[p], _mm256_set1_epi32(pairs[p])));
          s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(w[p + 1], _mm256_set1_epi32(pairs[p + 1])));
        }
        acc[i] = step(acc[i], _mm256_add_epi32(s0, s1), d, a.xd[at]);
      }
    }
  }
  store_half(a, g, h, acc, n);
}

// IQ4_NL / IQ4_XS (see matmul_avx512_impl.h), on half h of the group; the non-VNNI path moves
// the value's sign onto the activation bytes with vpsignb.
template <bool kVnni, int kType, int kN>
void iq4_half(const Args& a, int64_t g, int h) {
  constexpr bool xs = kType == kTypeIQ4_XS;
  constexpr int subs = xs ? 8 : 1;
  const int n = kN > 0 ? kN : a.n;
  const int64_t nrec = a.blocks_per_row, nb = a.cols / 32;
  alignas(32) int8_t table_bytes[32];
  for (int k = 0; k < 32; ++k)
    table_bytes[k] = static_cast<int8_t>(kVnni ? kIq4Table[k % 16] + 128 : kIq4Table[k % 16]);
  const __m256i table = _mm256_load_si256(reinterpret_cast<const __m256i*>(table_bytes));
  const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  __m256 acc[kMaxRows];
  for (int i = 0; i < n; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t r = 0; r < nrec; ++r) {
    const int64_t rec = g * nrec + r;
    const uint8_t* dp = a.plane[xs ? 2 : 1] + rec * 32 + 16 * h;
    for (int ib = 0; ib < subs; ++ib) {
      const uint8_t* qs = a.plane[0] + rec * (256 * subs) + 256 * ib + 32 * h;
      __m256 d = f16_to_ps(dp);
      if constexpr (xs) {
        const __m256i ls = _mm256_cvtepu8_epi32(_mm_loadl_epi64(
            reinterpret_cast<const __m128i*>(a.plane[1] + rec * 128 + 16 * ib + 8 * h)));
        d = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(ls, _mm256_set1_epi32(32))));
      }
      __m256i w[8], sgn[8];
      for (int t = 0; t < 4; ++t) {
        const __m256i p = load32(qs + 64 * t);
        w[t] = _mm256_shuffle_epi8(table, _mm256_and_si256(p, m4));
        w[4 + t] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(p, 4), m4));
      }
      if constexpr (!kVnni) {
        for (int k = 0; k < 8; ++k) {
          sgn[k] = w[k];
          w[k] = _mm256_abs_epi8(w[k]);
        }
      }
      const int64_t b = r * subs + ib;
      for (int i = 0; i < n; ++i) {
        const int64_t at = i * nb + b;
        const int8_t* x = a.xq + i * a.cols + 32 * b;
        __m256i s;
        if constexpr (kVnni) {
          s = _mm256_sub_epi32(dot_u8<true, 8, 1>(w, x),
                               _mm256_set1_epi32(128 * (a.xs0[at] + a.xs1[at])));
        } else {
          s = _mm256_setzero_si256();
          for (int k = 0; k < 8; ++k) {
            const __m256i xsg = _mm256_sign_epi8(bcast4(x + 4 * k), sgn[k]);
            s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(w[k], xsg), ones));
          }
        }
        acc[i] = step(acc[i], s, d, a.xd[at]);
      }
    }
  }
  store_half(a, g, h, acc, n);
}

// F32 / F16 / BF16 (see matmul_avx512_impl.h), on half h of the group.
template <int kType>
inline __m256 load_w(const uint8_t* rec) {
  if constexpr (kType == kTypeF32) return _mm256_loadu_ps(reinterpret_cast<const float*>(rec));
  if constexpr (kType == kTypeF16) return f16_to_ps(rec);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load16(rec)), 16));
}

template <int kType, int kN>
void float_half(const Args& a, int64_t g, int h) {
  constexpr int64_t es = kType == kTypeF32 ? 4 : 2, rec_bytes = es * kLanes;
  const int n = kN > 0 ? kN : a.n;
  const uint8_t* w = a.plane[0] + g * a.cols * rec_bytes + es * kHalf * h;
  __m256 acc[kMaxRows][4];
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < 4; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 4 <= a.cols; k += 4) {
    const __m256 w0 = load_w<kType>(w + k * rec_bytes), w1 = load_w<kType>(w + (k + 1) * rec_bytes);
    const __m256 w2 = load_w<kType>(w + (k + 2) * rec_bytes), w3 = load_w<kType>(w + (k + 3) * rec_bytes);
    for (int i = 0; i < n; ++i) {
      const float* x = a.x + i * a.cols + k;
      acc[i][0] = _mm256_fmadd_ps(w0, _mm256_set1_ps(x[0]), acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(w1, _mm256_set1_ps(x[1]), acc[i][1]);
      acc[i][2] = _mm256_fmadd_ps(w2, _mm256_set1_ps(x[2]), acc[i][2]);
      acc[i][3] = _mm256_fmadd_ps(w3, _mm256_set1_ps(x[3]), acc[i][3]);
    }
  }
  for (; k < a.cols; ++k) {
    const __m256 wk = load_w<kType>(w + k * rec_bytes);
    for (int i = 0; i < n; ++i)
      acc[i][k & 3] = _mm256_fmadd_ps(wk, _mm256_set1_ps(a.x[i * a.cols + k]), acc[i][k & 3]);
  }
  __m256 sum[kMaxRows];
  for (int i = 0; i < n; ++i)
    sum[i] = _mm256_add_ps(_mm256_add_ps(acc[i][0], acc[i][1]), _mm256_add_ps(acc[i][2], acc[i][3]));
  store_half(a, g, h, sum, n);
}

// Bit b of every byte moved to bit 2 (Q3_K's third bits).
inline __m256i bit_to_2(__m256i h, int b) {
  const __m256i mask = _mm256_set1_epi8(0x04);
  return b <= 2 ? _mm256_and_si256(_mm256_sll_epi16(h, _mm_cvtsi32_si128(2 - b)), mask)
                : _mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(b - 2)), mask);
}

// Q2_K / Q3_K: activation block (nh, j) = elements 128 nh + 32 j ..: vectors t < 4 hold 16-element
// sub-block 8 nh + 2 j (qs vector 8 nh + t, bits 2j), t >= 4 sub-block 8 nh + 2 j + 1; Q3_K's
// third bit from hm vector t, bit 4 nh + j, offset 4 off as 4 * sum(xq) with d * (ls - 32);
// Q2_K d * (sc & 15) and dmin * (sc >> 4) with fma(dmin * m, -(d_x * sum_half(xq))) after each
// sub-block (values <= 7: 4 pair sums fit in 16 bits).
template <bool kVnni, int kType, int kN>
void q2_q3_k_half(const Args& a, int64_t g, int h) {
  constexpr bool q3 = kType == kTypeQ3_K;
  const int n = kN > 0 ? kN : a.n;
  const int64_t nsb = a.blocks_per_row, nb = a.cols / 32;
  const __m256i m2 = _mm256_set1_epi8(0x03);
  __m256 acc[kMaxRows];
  for (int i = 0; i < n; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const int64_t rec = g * nsb + sb;
    const uint8_t* qs = a.plane[0] + rec * 1024 + 32 * h;
    const uint8_t* hm = q3 ? a.plane[1] + rec * 512 + 32 * h : nullptr;
    const uint8_t* sc = a.plane[q3 ? 2 : 1] + rec * 256 + 8 * h;
    const uint8_t* dp = a.plane[q3 ? 3 : 2] + rec * (q3 ? 32 : 64) + 16 * h;
    const __m256 d = f16_to_ps(dp);
    const __m256 dmin = q3 ? d : f16_to_ps(dp + 32);
    for (int nh = 0; nh < 2; ++nh) {
      for (int j = 0; j < 4; ++j) {
        __m256i e[8];
        for (int t = 0; t < 8; ++t) {
          e[t] = _mm256_and_si256(_mm256_srl_epi16(load32(qs + (8 * nh + t) * 64), _mm_cvtsi32_si128(2 * j)), m2);
          if constexpr (q3) e[t] = _mm256_or_si256(e[t], bit_to_2(load32(hm + 64 * t), 4 * nh + j));
        }
        __m256 dsab[2], dmab[2];
        for (int u = 0; u < 2; ++u) {
          const int s_ = 8 * nh + 2 * j + u;
          const __m256i ls = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc + 16 * s_)));
          if constexpr (q3) {
            dsab[u] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(ls, _mm256_set1_epi32(32))), d);
          } else {
            dsab[u] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(ls, _mm256_set1_epi32(15))), d);
            dmab[u] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(ls, 4)), dmin);
          }
        }
        for (int i = 0; i < n; ++i) {
          const int64_t at = i * nb + sb * 8 + 4 * nh + j;
          const int8_t* x = a.xq + i * a.cols + sb * 256 + 128 * nh + 32 * j;
          __m256i sa = dot_u8<kVnni, 4, 4>(e, x), sbv = dot_u8<kVnni, 4, 4>(e + 4, x + 16);
          const float dx = a.xd[at];
          if constexpr (q3) {
            sa = _mm256_sub_epi32(sa, _mm256_set1_epi32(4 * a.xs0[at]));
            sbv = _mm256_sub_epi32(sbv, _mm256_set1_epi32(4 * a.xs1[at]));
            acc[i] = step(step(acc[i], sa, dsab[0], dx), sbv, dsab[1], dx);
          } else {
            const float ma = dx * static_cast<float>(a.xs0[at]);
            const float mb = dx * static_cast<float>(a.xs1[at]);
            __m256 v = _mm256_fmadd_ps(dmab[0], _mm256_set1_ps(-ma), step(acc[i], sa, dsab[0], dx));
            acc[i] = _mm256_fmadd_ps(dmab[1], _mm256_set1_ps(-mb), step(v, sbv, dsab[1], dx));
          }
        }
      }
    }
  }
  store_half(a, g, h, acc, n);
}

// Both halves of a group; one row (decode) with n known at compile time, else 1..16 rows.
template <void (*kOne)(const Args&, int64_t, int), void (*kMany)(const Args&, int64_t, int)>
void halves(const Args& a, int64_t g) {
  const int num_halves = lanes_in_group(a.rows, g) > kHalf ? 2 : 1;
  for (int h = 0; h < num_halves; ++h) {
    if (a.n == 1)
      kOne(a, g, h);
    else
      kMany(a, g, h);
  }
}

template <bool kVnni>
GroupKernel avx2_kernel_of(int type) {
  switch (type) {
    case kTypeF32:
      return halves<float_half<kTypeF32, 1>, float_half<kTypeF32, 0>>;
    case kTypeF16:
      return halves<float_half<kTypeF16, 1>, float_half<kTypeF16, 0>>;
    case kTypeBF16:
      return halves<float_half<kTypeBF16, 1>, float_half<kTypeBF16, 0>>;
    case kTypeQ4_K:
      return halves<q4_k_half<kVnni, kTypeQ4_K, 1>, q4_k_half<kVnni, kTypeQ4_K, 0>>;
    case kTypeQ5_K:
      return halves<q4_k_half<kVnni, kTypeQ5_K, 1>, q4_k_half<kVnni, kTypeQ5_K, 0>>;
    case kTypeQ2_K:
      return halves<q2_q3_k_half<kVnni, kTypeQ2_K, 1>, q2_q3_k_half<kVnni, kTypeQ2_K, 0>>;
    case kTypeQ3_K:
      return halves<q2_q3_k_half<kVnni, kTypeQ3_K, 1>, q2_q3_k_half<kVnni, kTypeQ3_K, 0>>;
    case kTypeQ6_K:
      return halves<q6_k_half<kVnni, 1>, q6_k_half<kVnni, 0>>;
    case kTypeQ4_0:
      return halves<q32_half<kVnni, kTypeQ4_0, 1>, q32_half<kVnni, kTypeQ4_0, 0>>;
    case kTypeQ4_1:
      return halves<q32_half<kVnni, kTypeQ4_1, 1>, q32_half<kVnni, kTypeQ4_1, 0>>;
    case kTypeQ5_0:
      return halves<q32_half<kVnni, kTypeQ5_0, 1>, q32_half<kVnni, kTypeQ5_0, 0>>;
    case kTypeQ5_1:
      return halves<q32_half<kVnni, kTypeQ5_1, 1>, q32_half<kVnni, kTypeQ5_1, 0>>;
    case kTypeIQ4_NL:
      return halves<iq4_half<kVnni, kTypeIQ4_NL, 1>, iq4_half<kVnni, kTypeIQ4_NL, 0>>;
    case kTypeIQ4_XS:
      return halves<iq4_half<kVnni, kTypeIQ4_XS, 1>, iq4_half<kVnni, kTypeIQ4_XS, 0>>;
    case kTypeQ8_0:
      return halves<q8_0_half<kVnni, 1>, q8_0_half<kVnni, 0>>;
    default:
      return nullptr;
  }
}

}  // namespace
}  // namespace specdec::cpu::kernels
