// Shared helpers of the AVX-512 kernels (matmul_avx512_impl.h has the kernels' description);
// internal linkage only, included by that path's translation units.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu/matmul_kernels.h"

namespace specdec::cpu::kernels {
namespace {

inline __m512i bcast4(const int8_t* x) {
  int32_t v;
  std::memcpy(&v, x, 4);
  return _mm512_set1_epi32(v);
}

inline __m512i load64(const uint8_t* p) { return _mm512_loadu_si512(p); }

// 16 bytes (one per lane) as floats.
inline __m512 u8_to_ps(const uint8_t* p) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline __m512 s8_to_ps(const uint8_t* p) {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
// 16 f16 values (one per lane) as floats.
inline __m512 f16_to_ps(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Per lane: sum over k < kCount of the 4 unsigned bytes of w[k] times the 4 signed bytes
// x[4k .. 4k + 3]. kGroup: how many vpmaddubsw results the BW path may add in 16 bits (the
// caller's bound keeps those sums below 2^15).
template <bool kVnni, int kCount, int kGroup>
inline __m512i dot_u8(const __m512i* w, const int8_t* x) {
  if constexpr (kVnni) {
    __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
    for (int k = 0; k + 1 < kCount; k += 2) {
      s0 = _mm512_dpbusd_epi32(s0, w[k], bcast4(x + 4 * k));
      s1 = _mm512_dpbusd_epi32(s1, w[k + 1], bcast4(x + 4 * k + 4));
    }
    if constexpr (kCount % 2 == 1)
      s0 = _mm512_dpbusd_epi32(s0, w[kCount - 1], bcast4(x + 4 * kCount - 4));
    return _mm512_add_epi32(s0, s1);
  } else {
    const __m512i ones = _mm512_set1_epi16(1);
    __m512i s = _mm512_setzero_si512();
    for (int k0 = 0; k0 < kCount; k0 += kGroup) {
      __m512i p = _mm512_maddubs_epi16(w[k0], bcast4(x + 4 * k0));
      for (int k = k0 + 1; k < k0 + kGroup && k < kCount; ++k)
        p = _mm512_add_epi16(p, _mm512_maddubs_epi16(w[k], bcast4(x + 4 * k)));
      s = _mm512_add_epi32(s, _mm512_madd_epi16(p, ones));
    }
    return s;
  }
}

// acc = fma((float)s * dw, dx, acc)
inline __m512 step(__m512 acc, __m512i s, __m512 dw, float dx) {
  return _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), dw), _mm512_set1_ps(dx), acc);
}

inline void store_group(const Args& a, int64_t g, const __m512* acc, int n) {
  const int lanes = lanes_in_group(a.rows, g);
  const __mmask16 mask = static_cast<__mmask16>((1u << lanes) - 1u);
  for (int i = 0; i < n; ++i) _mm512_mask_storeu_ps(a.y + i * a.ldy + g * kLanes, mask, acc[i]);
}

}  // namespace
}  // namespace specdec::cpu::kernels
