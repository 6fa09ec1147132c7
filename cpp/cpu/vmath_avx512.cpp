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

// One group of 16 * nv values at x: |x| max, then q = round(x * id) (half away from zero for 32,
// half to even for 256), the 16-value sums of q.
template <int kBlock>
void quantize_group(const float* x, int8_t* q, ActRec* rec) {
  constexpr int nv = kBlock / 16;
  __m512 v[nv];
  __m512 amax = _mm512_setzero_ps();
  for (int j = 0; j < nv; ++j) {
    v[j] = _mm512_loadu_ps(x + 16 * j);
    amax = _mm512_max_ps(_mm512_abs_ps(v[j]), amax);  // a NaN value is skipped, as fmax skips it
  }
  const float a = _mm512_reduce_max_ps(amax);
  float d = 0.0f, id = 0.0f;
  if (kBlock == 32) {
    d = a / 127.0f;
    const float inv = 1.0f / d;
    id = d != 0.0f && inv - inv == 0.0f ? inv : 0.0f;  // inv finite
    if (id == 0.0f) d = 0.0f;
  } else {
    const float inv = 127.0f / a;
    id = a != 0.0f && inv - inv == 0.0f ? inv : 0.0f;
    d = id != 0.0f ? 1.0f / id : 0.0f;
  }
  const __m512 idv = _mm512_set1_ps(id), half = _mm512_set1_ps(0.5f);
  int32_t sums[nv];
  for (int j = 0; j < nv; ++j) {
    const __m512 y = _mm512_mul_ps(v[j], idv);
    __m512 r;
    if (kBlock == 32) {  // round half away from zero: trunc, then a step away when |y - t| >= 0.5
      const __m512 t = _mm512_roundscale_ps(y, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
      const __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(y, t)), half, _CMP_GE_OQ);
      const __m512 step = _mm512_castsi512_ps(_mm512_or_si512(
          _mm512_castps_si512(_mm512_set1_ps(1.0f)),
          _mm512_and_si512(_mm512_castps_si512(y), _mm512_set1_epi32(static_cast<int>(0x80000000u)))));
      r = _mm512_mask_add_ps(t, up, t, step);
    } else {
      r = _mm512_roundscale_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    }
    // saturated to int8 (only a non-finite input leaves [-127, 127]); the sums from the stored bytes
    const __m128i q8 = _mm512_cvtsepi32_epi8(_mm512_cvttps_epi32(r));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16 * j), q8);
    sums[j] = _mm512_reduce_add_epi32(_mm512_cvtepi8_epi32(q8));
  }
  for (int b = 0; b < kBlock / 32; ++b) {
    const int32_t s0 = sums[2 * b], s1 = sums[2 * b + 1];
    rec[b] = ActRec{d, d * static_cast<float>(s0 + s1), s0, s1};
  }
}

void quantize_row(const float* x, int64_t cols, int scale_block, int8_t* q, ActRec* rec) {
  if (scale_block == 32) {
    for (int64_t g = 0; g < cols; g += 32) quantize_group<32>(x + g, q + g, rec + g / 32);
  } else {
    for (int64_t g = 0; g < cols; g += 256) quantize_group<256>(x + g, q + g, rec + g / 32);
  }
}

void norm_row(const float* x, const float* w, float* y, int dim, float eps, float off, int c0, int c1) {
  __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
  for (int i = 0; i < dim; i += 16) {
    const __mmask16 m = tail(dim - i);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    const __m512 sq = _mm512_mul_ps(v, v);  // squares in f32, as the reference
    a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(sq)));
    a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(sq), 1))));
  }
  const double sum = _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
  const float mean = static_cast<float>(sum / dim);
  const __m512 sc = _mm512_set1_ps(1.0f / _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(mean + eps))));
  const __m512 offv = _mm512_set1_ps(off);
  for (int i = c0; i < c1; i += 16) {
    const __mmask16 m = tail(c1 - i);
    __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), sc);
    if (w != nullptr) v = _mm512_mul_ps(v, _mm512_add_ps(_mm512_maskz_loadu_ps(m, w + i), offv));
    _mm512_mask_storeu_ps(y + i, m, v);
  }
}

// order_key of 16 floats: sign set -> ~u, else u | sign; +-0 -> the sign bit alone; NaN -> 0
__m512i order_keys(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  const __m512i abs = _mm512_andnot_si512(sign, u);
  __m512i key = _mm512_mask_xor_epi32(_mm512_or_si512(u, sign), _mm512_test_epi32_mask(u, sign), u,
                                      _mm512_set1_epi32(-1));
  key = _mm512_mask_mov_epi32(key, _mm512_cmpeq_epi32_mask(abs, _mm512_setzero_si512()), sign);
  return _mm512_maskz_mov_epi32(_mm512_cmple_epu32_mask(abs, _mm512_set1_epi32(0x7F800000)), key);
}

float max_nan(const float* x, int n, bool* nan) {
  __m512 mx = _mm512_set1_ps(-__builtin_inff());
  __mmask16 any = 0;
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = tail(n - i);
    const __m512 v = _mm512_mask_loadu_ps(_mm512_set1_ps(-__builtin_inff()), m, x + i);
    any = static_cast<__mmask16>(any | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q));
    mx = _mm512_max_ps(mx, v);
  }
  *nan = any != 0;
  const float r = _mm512_reduce_max_ps(mx);
  return r == 0.0f ? 0.0f : r;
}

uint32_t argmax_key(const float* x, int n, int32_t* index) {
  __m512i best = _mm512_setzero_si512();
  for (int i = 0; i < n; i += 16) {
    const __mmask16 m = tail(n - i);
    best = _mm512_max_epu32(best, _mm512_maskz_mov_epi32(m, order_keys(_mm512_maskz_loadu_ps(m, x + i))));
  }
  const uint32_t b = _mm512_reduce_max_epu32(best);
  const __m512i bv = _mm512_set1_epi32(static_cast<int>(b));
  for (int i = 0; i < n; i += 16) {  // the first position holding it (in L1: the chunk was just read)
    const __mmask16 m = tail(n - i);
    const uint32_t hit = _mm512_mask_cmpeq_epi32_mask(m, order_keys(_mm512_maskz_loadu_ps(m, x + i)), bv);
    if (hit != 0) {
      *index = i + __builtin_ctz(hit);
      return b;
    }
  }
  *index = 0;  // not reached for n >= 1
  return b;
}

}  // namespace

bool avx512_kernels(Kernels& k) {
  k.silu_mul = silu_mul;
  k.gelu_mul = gelu_mul;
  k.exp_sum = exp_sum;
  k.exp_shift = exp_shift;
  k.quantize_row = quantize_row;
  k.norm_row = norm_row;
  k.max_nan = max_nan;
  k.argmax_key = argmax_key;
  return true;
}

}  // namespace specdec::cpu::vmath

#else
namespace specdec::cpu::vmath {
bool avx512_kernels(Kernels&) { return false; }
}  // namespace specdec::cpu::vmath
#endif
