// The native attention's inner loops with AVX2 (+ F16C): 8 lanes, explicit mul and add.
#include <cstdint>

#include "cpu/attention_kernels.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__F16C__)
#include <immintrin.h>

namespace specdec::cpu::attn_kernels {
namespace {

float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

void dots(const float* q, int m, int64_t q_stride, const float* k, int d, float* out) {
  for (int i = 0; i < m; ++i) {
    const float* qi = q + i * q_stride;
    __m256 acc = _mm256_setzero_ps();
    int j = 0;
    for (; j + 8 <= d; j += 8) acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_loadu_ps(qi + j), _mm256_loadu_ps(k + j)));
    float s = hsum(acc);
    for (; j < d; ++j) s = s + qi[j] * k[j];
    out[i] = s;
  }
}

void axpys(float* acc, int m, int64_t acc_stride, const float* w, const float* v, int dv) {
  for (int i = 0; i < m; ++i) {
    if (w[i] == 0.0f) continue;
    float* a = acc + i * acc_stride;
    const __m256 wi = _mm256_set1_ps(w[i]);
    int j = 0;
    for (; j + 8 <= dv; j += 8)
      _mm256_storeu_ps(a + j, _mm256_add_ps(_mm256_loadu_ps(a + j), _mm256_mul_ps(wi, _mm256_loadu_ps(v + j))));
    for (; j < dv; ++j) a[j] = a[j] + w[i] * v[j];
  }
}

void f16_row(const uint16_t* src, float* dst, int n) {
  int j = 0;
  for (; j + 8 <= n; j += 8)
    _mm256_storeu_ps(dst + j, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + j))));
  for (; j < n; ++j) dst[j] = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(src[j])));
}

}  // namespace

bool avx2_kernels(Kernels& k) {
  k.dots = dots;
  k.axpys = axpys;
  k.f16_row = f16_row;
  return true;
}

}  // namespace specdec::cpu::attn_kernels

#else
namespace specdec::cpu::attn_kernels {
bool avx2_kernels(Kernels&) { return false; }
}  // namespace specdec::cpu::attn_kernels
#endif
