// Vector exp-based rows with AVX-512 F (see vmath_kernels.h).
#include <cstdint>

#include "cpu/vmath_kernels.h"

#if defined(__x86_64__) && defined(__AVX512F__)
#include <immintrin.h>

namespace specdec::cpu::vmath {
namespace {

__m512 exp_ps(__m512 x) {
  const __m512 hi = _mm512_set1_ps(88.7228317f), lo = _mm512_set1_ps(-87.3365447f);
  // vminps / vmaxps return the second operand when one is NaN: x stays NaN
  __m512 c = _mm512_min_ps(hi, x);
  c = _mm512_max_ps(lo, c);
  const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(c, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), c);
  r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  __m512 e = _mm512_scalef_ps(p, k);  // p * 2^k
  e = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), e, _mm512_set1_ps(__builtin_inff()));
  e = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), e, _mm512_setzero_ps());
  return e;
}

__mmask16 tail(int left) { return left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1); }

void silu_mul(const float* g, const float* u, float* out, int n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = tail(n - i);
    const __m512 gv = _mm512_maskz_loadu_ps(m, g + i), uv = _mm512_maskz_loadu_ps(m, u + i);
    const __m512 s = _mm512_div_ps(gv, _mm512_add_ps(one, exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), gv))));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(s, uv));
  }
}

void gelu_mul(const float* g, const float* u, float* out, int n) {
  const __m512 one = _mm512_set1_ps(1.0f), c0 = _mm512_set1_ps(0.79788456080286535587989211986876f);
  const __m512 c1 = _mm512_set1_ps(0.044715f), m2 = _mm512_set1_ps(-2.0f);
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = tail(n - i);
    const __m512 gv = _mm512_maskz_loadu_ps(m, g + i), uv = _mm512_maskz_loadu_ps(m, u + i);
    const __m512 g3 = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(c1, gv), gv), gv);  // the reference's order
    const __m512 z = _mm512_mul_ps(c0, _mm512_add_ps(gv, g3));
    const __m512 s = _mm512_div_ps(gv, _mm512_add_ps(one, exp_ps(_mm512_mul_ps(m2, z))));
    _mm512_mask_storeu_ps(out + i, m, _mm512_mul_ps(s, uv));
  }
}

double exp_sum(const float* x, float mx, int n) {
  const __m512 mv = _mm512_set1_ps(mx);
  __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = tail(n - i);
    // masked-off lanes: exp(-inf) = 0
    const __m512 xv = _mm512_mask_loadu_ps(_mm512_set1_ps(-__builtin_inff()), m, x + i);
    const __m512 e = exp_ps(_mm512_sub_ps(xv, mv));
    a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
    a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
}

void exp_shift(const float* x, float mx, float* out, int n) {
  const __m512 mv = _mm512_set1_ps(mx);
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = tail(n - i);
    _mm512_mask_storeu_ps(out + i, m, exp_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), mv)));
  }
}

}  // namespace

bool avx512_kernels(Kernels& k) {
  k.silu_mul = silu_mul;
  k.gelu_mul = gelu_mul;
  k.exp_sum = exp_sum;
  k.exp_shift = exp_shift;
  return true;
}

}  // namespace specdec::cpu::vmath

#else
namespace specdec::cpu::vmath {
bool avx512_kernels(Kernels&) { return false; }
}  // namespace specdec::cpu::vmath
#endif
