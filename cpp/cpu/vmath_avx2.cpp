// Vector exp-based rows with AVX2 + FMA (see vmath_kernels.h).
#include <cstdint>

#include "cpu/vmath_kernels.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

namespace specdec::cpu::vmath {
namespace {

// 2^k for integer-valued k in [-127, 128], as two factors in the normal range
__m256 pow2(__m256 k) {
  const __m256i ki = _mm256_cvtps_epi32(k);
  const __m256i h = _mm256_srai_epi32(ki, 1);
  const __m256i rest = _mm256_sub_epi32(ki, h);
  const __m256i b = _mm256_set1_epi32(127);
  const __m256 a = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, b), 23));
  const __m256 c = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(rest, b), 23));
  return _mm256_mul_ps(a, c);
}

__m256 exp_ps(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.7228317f), lo = _mm256_set1_ps(-87.3365447f);
  __m256 c = _mm256_min_ps(hi, x);  // the second operand when one is NaN: x stays NaN
  c = _mm256_max_ps(lo, c);
  const __m256 k = _mm256_round_ps(_mm256_mul_ps(c, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), c);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  __m256 e = _mm256_mul_ps(p, pow2(k));
  e = _mm256_blendv_ps(e, _mm256_set1_ps(__builtin_inff()), _mm256_cmp_ps(x, hi, _CMP_GT_OQ));
  e = _mm256_blendv_ps(e, _mm256_setzero_ps(), _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
  return e;
}

// n - i lanes (1..8) of p, the rest `fill`
__m256 load_part(const float* p, int left, float fill) {
  alignas(32) float tmp[8];
  for (int j = 0; j < 8; ++j) tmp[j] = j < left ? p[j] : fill;
  return _mm256_load_ps(tmp);
}

void store_part(float* p, __m256 v, int left) {
  alignas(32) float tmp[8];
  _mm256_store_ps(tmp, v);
  for (int j = 0; j < left && j < 8; ++j) p[j] = tmp[j];
}

template <bool kGelu>
void act_mul(const float* g, const float* u, float* out, int n) {
  const __m256 one = _mm256_set1_ps(1.0f), c0 = _mm256_set1_ps(0.79788456080286535587989211986876f);
  const __m256 c1 = _mm256_set1_ps(0.044715f), m2 = _mm256_set1_ps(-2.0f);
  for (int i = 0; i < n; i += 8) {
    const int left = n - i;
    const __m256 gv = left >= 8 ? _mm256_loadu_ps(g + i) : load_part(g + i, left, 0.0f);
    const __m256 uv = left >= 8 ? _mm256_loadu_ps(u + i) : load_part(u + i, left, 0.0f);
    __m256 arg;
    if constexpr (kGelu) {
      const __m256 g3 = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(c1, gv), gv), gv);  // the reference's order
      arg = _mm256_mul_ps(m2, _mm256_mul_ps(c0, _mm256_add_ps(gv, g3)));
    } else {
      arg = _mm256_sub_ps(_mm256_setzero_ps(), gv);
    }
    const __m256 r = _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, exp_ps(arg))), uv);
    if (left >= 8) {
      _mm256_storeu_ps(out + i, r);
    } else {
      store_part(out + i, r, left);
    }
  }
}

void silu_mul(const float* g, const float* u, float* out, int n) { act_mul<false>(g, u, out, n); }
void gelu_mul(const float* g, const float* u, float* out, int n) { act_mul<true>(g, u, out, n); }

double exp_sum(const float* x, float mx, int n) {
  const __m256 mv = _mm256_set1_ps(mx);
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  for (int i = 0; i < n; i += 8) {
    const int left = n - i;
    const __m256 xv = left >= 8 ? _mm256_loadu_ps(x + i) : load_part(x + i, left, -__builtin_inff());
    const __m256 e = exp_ps(_mm256_sub_ps(xv, mv));
    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  const __m256d a = _mm256_add_pd(a0, a1);
  const __m128d s = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
  return _mm_cvtsd_f64(_mm_add_sd(s, _mm_unpackhi_pd(s, s)));
}

void exp_shift(const float* x, float mx, float* out, int n) {
  const __m256 mv = _mm256_set1_ps(mx);
  for (int i = 0; i < n; i += 8) {
    const int left = n - i;
    const __m256 xv = left >= 8 ? _mm256_loadu_ps(x + i) : load_part(x + i, left, 0.0f);
    const __m256 e = exp_ps(_mm256_sub_ps(xv, mv));
    if (left >= 8) {
      _mm256_storeu_ps(out + i, e);
    } else {
      store_part(out + i, e, left);
    }
  }
}

// order_key of 8 floats: sign set -> ~u, else u | sign; +-0 -> the sign bit alone; NaN -> 0
__m256i order_keys(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i sign = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const __m256i abs = _mm256_andnot_si256(sign, u);
  // negative lanes: u | sign == u, and the xor with all ones gives ~u
  __m256i key = _mm256_xor_si256(_mm256_or_si256(u, sign), _mm256_srai_epi32(u, 31));
  key = _mm256_blendv_epi8(key, sign, _mm256_cmpeq_epi32(abs, _mm256_setzero_si256()));
  return _mm256_andnot_si256(_mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7F800000)), key);
}

float max_nan(const float* x, int n, bool* nan) {
  __m256 mx = _mm256_set1_ps(-__builtin_inff());
  __m256 any = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) {
    const int left = n - i;
    const __m256 v = left >= 8 ? _mm256_loadu_ps(x + i) : load_part(x + i, left, -__builtin_inff());
    any = _mm256_or_ps(any, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    mx = _mm256_max_ps(mx, v);
  }
  *nan = _mm256_movemask_ps(any) != 0;
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, mx);
  float r = lanes[0];
  for (int j = 1; j < 8; ++j) r = lanes[j] > r ? lanes[j] : r;
  return r == 0.0f ? 0.0f : r;
}

uint32_t argmax_key(const float* x, int n, int32_t* index) {
  __m256i best = _mm256_setzero_si256();
  const float kNan = __builtin_nanf("");  // fill: key 0, never above a real lane's
  for (int i = 0; i < n; i += 8) {
    const int left = n - i;
    const __m256 v = left >= 8 ? _mm256_loadu_ps(x + i) : load_part(x + i, left, kNan);
    best = _mm256_max_epu32(best, order_keys(v));
  }
  alignas(32) uint32_t lanes[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), best);
  uint32_t b = lanes[0];
  for (int j = 1; j < 8; ++j) b = lanes[j] > b ? lanes[j] : b;
  const __m256i bv = _mm256_set1_epi32(static_cast<int>(b));
  for (int i = 0; i < n; i += 8) {  // the first position holding it (in L1: the chunk was just read)
    const int left = n - i;
    const __m256 v = left >= 8 ? _mm256_loadu_ps(x + i) : load_part(x + i, left, kNan);
    const int valid = left >= 8 ? 0xFF : (1 << left) - 1;
    const int hit = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(order_keys(v), bv))) & valid;
    if (hit != 0) {
      *index = i + __builtin_ctz(static_cast<unsigned>(hit));
      return b;
    }
  }
  *index = 0;  // not reached for n >= 1
  return b;
}

}  // namespace

bool avx2_kernels(Kernels& k) {
  k.silu_mul = silu_mul;
  k.gelu_mul = gelu_mul;
  k.exp_sum = exp_sum;
  k.exp_shift = exp_shift;
  k.max_nan = max_nan;
  k.argmax_key = argmax_key;
  return true;
}

}  // namespace specdec::cpu::vmath

#else
namespace specdec::cpu::vmath {
bool avx2_kernels(Kernels&) { return false; }
}  // namespace specdec::cpu::vmath
#endif
