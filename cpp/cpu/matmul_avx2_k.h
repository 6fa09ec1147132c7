// The AVX2 kernels of the K-quants Q2_K .. Q6_K (see matmul_avx2_impl.h); internal
// linkage only, included by matmul_avx2_impl.h.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "cpu/matmul_avx2_common.h"

namespace specdec::cpu::kernels {
namespace {

// Bit j of every byte moved to bit 4 (Q5_K's fifth bits).
inline __m256i bit_to_4(__m256i h, int j) {
  const __m256i mask = _mm256_set1_epi8(0x10);
  return j <= 4 ? _mm256_and_si256(_mm256_sll_epi16(h, _mm_cvtsi32_si128(4 - j)), mask)
                : _mm256_and_si256(_mm256_srl_epi16(h, _mm_cvtsi32_si128(j - 4)), mask);
}

// Q4_K / Q5_K (see matmul_avx512_k.h), on half h of the group.
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
    if (h == 0) prefetch_ahead<2048>(qs);
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
        // fma(dmin * m, -(d_x * sum(q)), acc) as fnmadd with the record's dsum (the same float)
        __m256 v = step(acc[i], s0, dsc0, a.xr[at].d);
        v = _mm256_fnmadd_ps(dm0, _mm256_set1_ps(a.xr[at].dsum), v);
        v = step(v, s1, dsc1, a.xr[at + 1].d);
        acc[i] = _mm256_fnmadd_ps(dm1, _mm256_set1_ps(a.xr[at + 1].dsum), v);
      }
    }
  }
  store_half(a, g, h, acc, n);
}

// Q4_K / Q5_K on both halves of a full group in one pass: every 64-byte weight vector comes
// from memory once (the high nibbles' pass reads it again from L1), and each activation
// broadcast and scale serves both halves. Up to 3 rows (and on VNNI) one loop over rows runs both
// halves, the 16 decoded vectors spilled to the stack (reloads are load-port µops only); from 4
// rows the integer dots go half by half with that half's vectors in registers (split_dots), then
// the float steps. Per lane the float
// operations are those of q4_k_half, in its order.
template <bool kVnni, int kType, int kN>
void q4_k_both(const Args& a, int64_t g) {
  constexpr bool q5 = kType == kTypeQ5_K;
  constexpr int group = q5 ? 4 : 8;
  const int n = kN > 0 ? kN : a.n;
  const int64_t nsb = a.blocks_per_row, nb = a.cols / 32;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc[2][kMaxRows];
  for (int i = 0; i < n; ++i) acc[0][i] = acc[1][i] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const int64_t rec = g * nsb + sb;
    const uint8_t* qs = a.plane[0] + rec * 2048;
    prefetch_ahead<2048>(qs);
    const uint8_t* qh = q5 ? a.plane[1] + rec * 512 : nullptr;
    const uint8_t* sc = a.plane[q5 ? 2 : 1] + rec * 256;
    const uint8_t* dm = a.plane[q5 ? 3 : 2] + rec * 64;
    for (int c = 0; c < 4; ++c) {
      for (int u = 0; u < 2; ++u) {  // sub-block 2c + u: low (0) or high (1) nibbles
        __m256i w[2][8];
        for (int h = 0; h < 2; ++h) {
          for (int t = 0; t < 8; ++t) {
            const __m256i p = load32(qs + (8 * c + t) * 64 + 32 * h);
            w[h][t] = _mm256_and_si256(u == 0 ? p : _mm256_srli_epi16(p, 4), m4);
            if constexpr (q5)
              w[h][t] = _mm256_or_si256(w[h][t], bit_to_4(load32(qh + 64 * t + 32 * h), 2 * c + u));
          }
        }
        __m256 dsc[2], dmn[2];
        for (int h = 0; h < 2; ++h) {
          dsc[h] = _mm256_mul_ps(u8_to_ps(sc + 8 * h + 32 * c + 16 * u), f16_to_ps(dm + 16 * h));
          dmn[h] = _mm256_mul_ps(u8_to_ps(sc + 8 * h + 128 + 32 * c + 16 * u), f16_to_ps(dm + 16 * h + 32));
        }
        const int64_t blk = sb * 8 + 2 * c + u;
        const auto finish = [&](int i, const __m256i* s) {
          const ActRec& ar = a.xr[i * nb + blk];
          const __m256 dx = _mm256_set1_ps(ar.d), dsum = _mm256_set1_ps(ar.dsum);
          for (int h = 0; h < 2; ++h) {
            // fma(dmin * m, -(d_x * sum(q)), acc) as fnmadd with the record's dsum (the same float)
            const __m256 v = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(s[h]), dsc[h]), dx, acc[h][i]);
            acc[h][i] = _mm256_fnmadd_ps(dmn[h], dsum, v);
          }
        };
        if (kVnni || n < kSplitRows) {
          for (int i = 0; i < n; ++i) {
            __m256i s[2];
            dot_u8_both<kVnni, group>(w[0], w[1], a.xq + i * a.cols + 32 * blk, s);
            finish(i, s);
          }
        } else {
          __m256i sums[kMaxRows][2];
          split_dots<group>(w, a.xq + 32 * blk, a.cols, n, sums);
          for (int i = 0; i < n; ++i) finish(i, sums[i]);
        }
      }
    }
  }
  store_half(a, g, 0, acc[0], n);
  store_half(a, g, 1, acc[1], n);
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

// Q6_K (see matmul_avx512_k.h), on half h of the group.
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
    if (h2 == 0) prefetch_ahead<2048>(ql);
    const uint8_t* qh = a.plane[1] + rec * 1024 + 32 * h2;
    const uint8_t* sc = a.plane[2] + rec * 256 + 8 * h2;
    const __m256 d = f16_to_ps(a.plane[3] + rec * 32 + 16 * h2);
    for (int h = 0; h < 2; ++h) {
      for (int m = 0; m < 4; ++m) {
        __m256i e[8];
        for (int t = 0; t < 8; ++t) {
          const __m256i q = load32(ql + (16 * h + 8 * (m & 1) + t) * 64);
          const __m256i nib =
              m < 2 ? _mm256_and_si256(q, m4) : _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
          e[t] = _mm256_or_si256(nib, bits_to_45(load32(qh + (8 * h + t) * 64), m));
        }
        const __m256 dsa = _mm256_mul_ps(s8_to_ps(sc + (8 * h + 2 * m) * 16), d);
        const __m256 dsb = _mm256_mul_ps(s8_to_ps(sc + (8 * h + 2 * m + 1) * 16), d);
        for (int i = 0; i < n; ++i) {
          const int64_t at = i * nb + sb * 8 + 4 * h + m;
          const int8_t* x = a.xq + i * a.cols + sb * 256 + 128 * h + 32 * m;
          const __m256i sa =
              _mm256_sub_epi32(dot_u8<kVnni, 4, 2>(e, x), _mm256_set1_epi32(32 * a.xr[at].s0));
          const __m256i sbv = _mm256_sub_epi32(dot_u8<kVnni, 4, 2>(e + 4, x + 16),
                                               _mm256_set1_epi32(32 * a.xr[at].s1));
          const float dx = a.xr[at].d;
          acc[i] = step(step(acc[i], sa, dsa, dx), sbv, dsb, dx);
        }
      }
    }
  }
  store_half(a, g, h2, acc, n);
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
    if (h == 0) prefetch_ahead<1024>(qs);
    const uint8_t* hm = q3 ? a.plane[1] + rec * 512 + 32 * h : nullptr;
    const uint8_t* sc = a.plane[q3 ? 2 : 1] + rec * 256 + 8 * h;
    const uint8_t* dp = a.plane[q3 ? 3 : 2] + rec * (q3 ? 32 : 64) + 16 * h;
    const __m256 d = f16_to_ps(dp);
    const __m256 dmin = q3 ? d : f16_to_ps(dp + 32);
    for (int nh = 0; nh < 2; ++nh) {
      for (int j = 0; j < 4; ++j) {
        __m256i e[8];
        for (int t = 0; t < 8; ++t) {
          e[t] = _mm256_and_si256(
              _mm256_srl_epi16(load32(qs + (8 * nh + t) * 64), _mm_cvtsi32_si128(2 * j)), m2);
          if constexpr (q3) e[t] = _mm256_or_si256(e[t], bit_to_2(load32(hm + 64 * t), 4 * nh + j));
        }
        __m256 dsab[2], dmab[2];
        for (int u = 0; u < 2; ++u) {
          const int s_ = 8 * nh + 2 * j + u;
          const __m256i ls =
              _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc + 16 * s_)));
          if constexpr (q3) {
            dsab[u] =
                _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(ls, _mm256_set1_epi32(32))), d);
          } else {
            dsab[u] =
                _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(ls, _mm256_set1_epi32(15))), d);
            dmab[u] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(ls, 4)), dmin);
          }
        }
        for (int i = 0; i < n; ++i) {
          const int64_t at = i * nb + sb * 8 + 4 * nh + j;
          const int8_t* x = a.xq + i * a.cols + sb * 256 + 128 * nh + 32 * j;
          __m256i sa = dot_u8<kVnni, 4, 4>(e, x), sbv = dot_u8<kVnni, 4, 4>(e + 4, x + 16);
          const float dx = a.xr[at].d;
          if constexpr (q3) {
            sa = _mm256_sub_epi32(sa, _mm256_set1_epi32(4 * a.xr[at].s0));
            sbv = _mm256_sub_epi32(sbv, _mm256_set1_epi32(4 * a.xr[at].s1));
            acc[i] = step(step(acc[i], sa, dsab[0], dx), sbv, dsab[1], dx);
          } else {
            const float ma = dx * static_cast<float>(a.xr[at].s0);
            const float mb = dx * static_cast<float>(a.xr[at].s1);
            __m256 v = _mm256_fmadd_ps(dmab[0], _mm256_set1_ps(-ma), step(acc[i], sa, dsab[0], dx));
            acc[i] = _mm256_fmadd_ps(dmab[1], _mm256_set1_ps(-mb), step(v, sbv, dsab[1], dx));
          }
        }
      }
    }
  }
  store_half(a, g, h, acc, n);
}

}  // namespace
}  // namespace specdec::cpu::kernels
