// The AVX-512 kernels of the K-quants Q2_K .. Q6_K (see matmul_avx512_impl.h); internal
// linkage only, included by matmul_avx512_impl.h.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "cpu/matmul_avx512_common.h"

namespace specdec::cpu::kernels {
namespace {

// Bit j of every byte moved to bit 4 (Q5_K's fifth bits).
inline __m512i bit_to_4(__m512i h, int j) {
  const __m512i mask = _mm512_set1_epi8(0x10);
  return j <= 4 ? _mm512_and_si512(_mm512_sll_epi16(h, _mm_cvtsi32_si128(4 - j)), mask)
                : _mm512_and_si512(_mm512_srl_epi16(h, _mm_cvtsi32_si128(j - 4)), mask);
}

// Q4_K / Q5_K: per super-block 4 chunks of 64 elements; chunk c = 8 vectors whose low nibbles
// are 32-block 2c and high nibbles 32-block 2c + 1, Q5_K's fifth bits from qh vector t, bits 2c
// and 2c + 1 (values <= 15: 8 pair sums fit in 16 bits; <= 31: 4).
template <bool kVnni, int kType, int kN>
void q4_k(const Args& a, int64_t g) {
  constexpr bool q5 = kType == kTypeQ5_K;
  constexpr int group = q5 ? 4 : 8;
  const int n = kN > 0 ? kN : a.n;
  const int64_t nsb = a.blocks_per_row, nb = a.cols / 32;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 acc[kMaxRows];
  for (int i = 0; i < n; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const int64_t rec = g * nsb + sb;
    const uint8_t* qs = a.plane[0] + rec * 2048;
    prefetch_ahead<2048>(qs);
    const uint8_t* qh = q5 ? a.plane[1] + rec * 512 : nullptr;
    const uint8_t* sc = a.plane[q5 ? 2 : 1] + rec * 256;
    const uint8_t* dm = a.plane[q5 ? 3 : 2] + rec * 64;
    const __m512 d = f16_to_ps(dm);
    const __m512 dmin = f16_to_ps(dm + 32);
    for (int c = 0; c < 4; ++c) {
      __m512i lo[8], hi[8];
      for (int t = 0; t < 8; ++t) {
        const __m512i p = load64(qs + (8 * c + t) * 64);
        lo[t] = _mm512_and_si512(p, m4);
        hi[t] = _mm512_and_si512(_mm512_srli_epi16(p, 4), m4);
        if constexpr (q5) {
          const __m512i h = load64(qh + 64 * t);
          lo[t] = _mm512_or_si512(lo[t], bit_to_4(h, 2 * c));
          hi[t] = _mm512_or_si512(hi[t], bit_to_4(h, 2 * c + 1));
        }
      }
      const __m512 dsc0 = _mm512_mul_ps(u8_to_ps(sc + 32 * c), d);
      const __m512 dsc1 = _mm512_mul_ps(u8_to_ps(sc + 32 * c + 16), d);
      const __m512 dm0 = _mm512_mul_ps(u8_to_ps(sc + 128 + 32 * c), dmin);
      const __m512 dm1 = _mm512_mul_ps(u8_to_ps(sc + 128 + 32 * c + 16), dmin);
      for (int i = 0; i < n; ++i) {
        const int64_t at = i * nb + sb * 8 + 2 * c;
        const int8_t* x = a.xq + i * a.cols + sb * 256 + 64 * c;
        const __m512i s0 = dot_u8<kVnni, 8, group>(lo, x);
        const __m512i s1 = dot_u8<kVnni, 8, group>(hi, x + 32);
        // fma(dmin * m, -(d_x * sum(q)), acc) as fnmadd with the record's dsum (the same float)
        __m512 v = step(acc[i], s0, dsc0, a.xr[at].d);
        v = _mm512_fnmadd_ps(dm0, _mm512_set1_ps(a.xr[at].dsum), v);
        v = step(v, s1, dsc1, a.xr[at + 1].d);
        acc[i] = _mm512_fnmadd_ps(dm1, _mm512_set1_ps(a.xr[at + 1].dsum), v);
      }
    }
  }
  store_group(a, g, acc, n);
}

// Bits 2m, 2m + 1 of every byte moved to bits 4, 5 (Q6_K's high bits).
inline __m512i bits_to_45(__m512i h, int m) {
  const __m512i mask = _mm512_set1_epi8(0x30);
  switch (m) {
    case 0:
      return _mm512_and_si512(_mm512_slli_epi16(h, 4), mask);
    case 1:
      return _mm512_and_si512(_mm512_slli_epi16(h, 2), mask);
    case 2:
      return _mm512_and_si512(h, mask);
    default:
      return _mm512_and_si512(_mm512_srli_epi16(h, 2), mask);
  }
}

// Q6_K: 32-blocks (h, m) of 8 vectors, two 16-element sub-blocks each (values <= 63: 2 pair
// sums fit in 16 bits), offset 32 taken off as 32 * sum(xq).
template <bool kVnni, int kN>
void q6_k(const Args& a, int64_t g) {
  const int n = kN > 0 ? kN : a.n;
  const int64_t nsb = a.blocks_per_row, nb = a.cols / 32;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 acc[kMaxRows];
  for (int i = 0; i < n; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const int64_t rec = g * nsb + sb;
    const uint8_t* ql = a.plane[0] + rec * 2048;
    prefetch_ahead<2048>(ql);
    const uint8_t* qh = a.plane[1] + rec * 1024;
    const uint8_t* sc = a.plane[2] + rec * 256;
    const __m512 d = f16_to_ps(a.plane[3] + rec * 32);
    for (int h = 0; h < 2; ++h) {
      for (int m = 0; m < 4; ++m) {
        __m512i e[8];
        for (int t = 0; t < 8; ++t) {
          const __m512i q = load64(ql + (16 * h + 8 * (m & 1) + t) * 64);
          const __m512i nib =
              m < 2 ? _mm512_and_si512(q, m4) : _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
          e[t] = _mm512_or_si512(nib, bits_to_45(load64(qh + (8 * h + t) * 64), m));
        }
        const __m512 dsa = _mm512_mul_ps(s8_to_ps(sc + (8 * h + 2 * m) * 16), d);
        const __m512 dsb = _mm512_mul_ps(s8_to_ps(sc + (8 * h + 2 * m + 1) * 16), d);
        for (int i = 0; i < n; ++i) {
          const int64_t at = i * nb + sb * 8 + 4 * h + m;
          const int8_t* x = a.xq + i * a.cols + sb * 256 + 128 * h + 32 * m;
          const __m512i sa =
              _mm512_sub_epi32(dot_u8<kVnni, 4, 2>(e, x), _mm512_set1_epi32(32 * a.xr[at].s0));
          const __m512i sbv = _mm512_sub_epi32(dot_u8<kVnni, 4, 2>(e + 4, x + 16),
                                               _mm512_set1_epi32(32 * a.xr[at].s1));
          const float dx = a.xr[at].d;
          acc[i] = step(step(acc[i], sa, dsa, dx), sbv, dsb, dx);
        }
      }
    }
  }
  store_group(a, g, acc, n);
}

// Bit b of every byte moved to bit 2 (Q3_K's third bits).
inline __m512i bit_to_2(__m512i h, int b) {
  const __m512i mask = _mm512_set1_epi8(0x04);
  return b <= 2 ? _mm512_and_si512(_mm512_sll_epi16(h, _mm_cvtsi32_si128(2 - b)), mask)
                : _mm512_and_si512(_mm512_srl_epi16(h, _mm_cvtsi32_si128(b - 2)), mask);
}

// Q2_K / Q3_K: activation block (nh, j) = elements 128 nh + 32 j ..: vectors t < 4 hold 16-element
// sub-block 8 nh + 2 j (qs vector 8 nh + t, bits 2j), t >= 4 sub-block 8 nh + 2 j + 1; Q3_K's
// third bit from hm vector t, bit 4 nh + j, offset 4 off as 4 * sum(xq) with d * (ls - 32);
// Q2_K d * (sc & 15) and dmin * (sc >> 4) with fma(dmin * m, -(d_x * sum_half(xq))) after each
// sub-block (values <= 7: 4 pair sums fit in 16 bits).
template <bool kVnni, int kType, int kN>
void q2_q3_k(const Args& a, int64_t g) {
  constexpr bool q3 = kType == kTypeQ3_K;
  const int n = kN > 0 ? kN : a.n;
  const int64_t nsb = a.blocks_per_row, nb = a.cols / 32;
  const __m512i m2 = _mm512_set1_epi8(0x03);
  __m512 acc[kMaxRows];
  for (int i = 0; i < n; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < nsb; ++sb) {
    const int64_t rec = g * nsb + sb;
    const uint8_t* qs = a.plane[0] + rec * 1024;
    prefetch_ahead<1024>(qs);
    const uint8_t* hm = q3 ? a.plane[1] + rec * 512 : nullptr;
    const uint8_t* sc = a.plane[q3 ? 2 : 1] + rec * 256;
    const uint8_t* dp = a.plane[q3 ? 3 : 2] + rec * (q3 ? 32 : 64);
    const __m512 d = f16_to_ps(dp);
    const __m512 dmin = q3 ? d : f16_to_ps(dp + 32);
    for (int nh = 0; nh < 2; ++nh) {
      for (int j = 0; j < 4; ++j) {
        __m512i e[8];
        for (int t = 0; t < 8; ++t) {
          e[t] = _mm512_and_si512(
              _mm512_srl_epi16(load64(qs + (8 * nh + t) * 64), _mm_cvtsi32_si128(2 * j)), m2);
          if constexpr (q3) e[t] = _mm512_or_si512(e[t], bit_to_2(load64(hm + 64 * t), 4 * nh + j));
        }
        __m512 dsab[2], dmab[2];
        for (int u = 0; u < 2; ++u) {
          const int s_ = 8 * nh + 2 * j + u;
          const __m512i ls =
              _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + 16 * s_)));
          if constexpr (q3) {
            dsab[u] =
                _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(ls, _mm512_set1_epi32(32))), d);
          } else {
            dsab[u] =
                _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(ls, _mm512_set1_epi32(15))), d);
            dmab[u] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(ls, 4)), dmin);
          }
        }
        for (int i = 0; i < n; ++i) {
          const int64_t at = i * nb + sb * 8 + 4 * nh + j;
          const int8_t* x = a.xq + i * a.cols + sb * 256 + 128 * nh + 32 * j;
          __m512i sa = dot_u8<kVnni, 4, 4>(e, x), sbv = dot_u8<kVnni, 4, 4>(e + 4, x + 16);
          const float dx = a.xr[at].d;
          if constexpr (q3) {
            sa = _mm512_sub_epi32(sa, _mm512_set1_epi32(4 * a.xr[at].s0));
            sbv = _mm512_sub_epi32(sbv, _mm512_set1_epi32(4 * a.xr[at].s1));
            acc[i] = step(step(acc[i], sa, dsab[0], dx), sbv, dsab[1], dx);
          } else {
            const float ma = dx * static_cast<float>(a.xr[at].s0);
            const float mb = dx * static_cast<float>(a.xr[at].s1);
            __m512 v = _mm512_fmadd_ps(dmab[0], _mm512_set1_ps(-ma), step(acc[i], sa, dsab[0], dx));
            acc[i] = _mm512_fmadd_ps(dmab[1], _mm512_set1_ps(-mb), step(v, sbv, dsab[1], dx));
          }
        }
      }
    }
  }
  store_group(a, g, acc, n);
}

}  // namespace
}  // namespace specdec::cpu::kernels
