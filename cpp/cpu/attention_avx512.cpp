// The native attention's inner loops with AVX-512 F (+ F16C): 16 lanes, explicit mul and add (no
// contraction, as everywhere in cpp/cpu).
#include <cstdint>

#include "cpu/attention_kernels.h"

#if defined(__x86_64__) && defined(__AVX512F__)
#include <immintrin.h>

namespace specdec::cpu::attn_kernels {
namespace {

void dots(const float* q, int m, int64_t q_stride, const float* k, int d, float* out) {
  for (int i = 0; i < m; ++i) {
    const float* qi = q + i * q_stride;
    __m512 acc = _mm512_setzero_ps();
    int j = 0;
    for (; j + 16 <= d; j += 16) acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_loadu_ps(qi + j), _mm512_loadu_ps(k + j)));
    if (j < d) {
      const __mmask16 mask = static_cast<__mmask16>((1u << (d - j)) - 1);
      acc = _mm512_add_ps(acc, _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, qi + j), _mm512_maskz_loadu_ps(mask, k + j)));
    }
    out[i] = _mm512_reduce_add_ps(acc);
  }
}

void axpys(float* acc, int m, int64_t acc_stride, const float* w, const float* v, int dv) {
  for (int i = 0; i < m; ++i) {
    if (w[i] == 0.0f) continue;
    float* a = acc + i * acc_stride;
    const __m512 wi = _mm512_set1_ps(w[i]);
    int j = 0;
    for (; j + 16 <= dv; j += 16)
      _mm512_storeu_ps(a + j, _mm512_add_ps(_mm512_loadu_ps(a + j), _mm512_mul_ps(wi, _mm512_loadu_ps(v + j))));
    for (; j < dv; ++j) a[j] = a[j] + w[i] * v[j];
  }
}

void f16_row(const uint16_t* src, float* dst, int n) {
  int j = 0;
  for (; j + 16 <= n; j += 16)
    _mm512_storeu_ps(dst + j, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + j))));
  for (; j < n; ++j) dst[j] = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(src[j])));
}

}  // namespace

bool avx512_kernels(Kernels& k) {
  k.dots = dots;
  k.axpys = axpys;
  k.f16_row = f16_row;
  return true;
}

}  // namespace specdec::cpu::attn_kernels

#else
namespace specdec::cpu::attn_kernels {
bool avx512_kernels(Kernels&) { return false; }
}  // namespace specdec::cpu::attn_kernels
#endif
