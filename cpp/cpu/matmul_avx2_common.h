// Shared helpers of the AVX2 kernels (matmul_avx2_impl.h has the kernels' description);
// internal linkage only, included by that path's translation units.
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
  return _mm256_cvtepi32_ps(
      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
inline __m256 s8_to_ps(const uint8_t* p) {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
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

// dot_u8<kVnni, 8, kGroup> of one activation row against both halves' weights w0 and w1 (8
// vectors each, the same activation bytes): s[0], s[1]. Each broadcast serves both halves.
template <bool kVnni, int kGroup>
inline void dot_u8_both(const __m256i* w0, const __m256i* w1, const int8_t* x, __m256i* s) {
  s[0] = s[1] = _mm256_setzero_si256();
  if constexpr (kVnni) {
    for (int t = 0; t < 8; ++t) {
      const __m256i xb = bcast4(x + 4 * t);
      s[0] = _mm256_dpbusd_avx_epi32(s[0], w0[t], xb);
      s[1] = _mm256_dpbusd_avx_epi32(s[1], w1[t], xb);
    }
  } else {
    const __m256i ones = _mm256_set1_epi16(1);
    for (int t0 = 0; t0 < 8; t0 += kGroup) {
      __m256i xb = bcast4(x + 4 * t0);
      __m256i p0 = _mm256_maddubs_epi16(w0[t0], xb), p1 = _mm256_maddubs_epi16(w1[t0], xb);
      for (int t = t0 + 1; t < t0 + kGroup; ++t) {
        xb = bcast4(x + 4 * t);
        p0 = _mm256_add_epi16(p0, _mm256_maddubs_epi16(w0[t], xb));
        p1 = _mm256_add_epi16(p1, _mm256_maddubs_epi16(w1[t], xb));
      }
      s[0] = _mm256_add_epi32(s[0], _mm256_madd_epi16(p0, ones));
      s[1] = _mm256_add_epi32(s[1], _mm256_madd_epi16(p1, ones));
    }
  }
}

// From this many activation rows the non-VNNI kernels of both halves (q4_k_both) take the
// integer dots of every row first, half by half (split_dots), and the float steps after.
constexpr int kSplitRows = 4;

// s[i][h] = dot_u8<false, 8, kGroup>(w[h], x + i * ldx) for rows i < n: half by half, so a half's
// 8 weight vectors stay in registers through the row loop (rows one at a time: unrolling them
// spills). Measured from memory, one thread, Zen 3, Q4_K 8960 x 1536 and 1536 x 8960 against one
// fused loop over rows with both halves: 4 rows 0.92x the time, 8 rows 0.87-0.91x, 16 rows 0.87x;
// 1-2 rows 3-10 % slower, 3 rows not measured (kSplitRows). Q4_0 and Q6_K, whose half kernels
// keep their weights in registers already, gained nothing from separating the float steps.
template <int kGroup>
inline void split_dots(const __m256i (*w)[8], const int8_t* x, int64_t ldx, int n,
                       __m256i (*s)[2]) {
  for (int h = 0; h < 2; ++h) {
    __m256i wh[8];
    for (int t = 0; t < 8; ++t) wh[t] = w[h][t];
#pragma GCC unroll 1
    for (int i = 0; i < n; ++i) s[i][h] = dot_u8<false, 8, kGroup>(wh, x + i * ldx);
  }
}

// Q5_0 / Q5_1's fifth bits: bit t of each byte of hb onto bit 4 of w[t] (t < 8).
inline void or_fifth_bits(__m256i* w, __m256i hb) {
  const __m256i m5 = _mm256_set1_epi8(0x10);
  for (int t = 0; t < 8; ++t) {
    const __m256i b = t <= 4 ? _mm256_slli_epi16(hb, 4 - t) : _mm256_srli_epi16(hb, t - 4);
    w[t] = _mm256_or_si256(w[t], _mm256_and_si256(b, m5));
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

}  // namespace
}  // namespace specdec::cpu::kernels
