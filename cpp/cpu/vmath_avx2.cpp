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

// One group of 8 * nv values at x, as quantize_group in vmath_avx512.cpp (the reference's
// rounding, saturated to int8, the 16-value sums from the stored bytes).
template <int kBlock>
void quantize_group(const float* x, int8_t* q, ActRec* rec) {
  constexpr int nv = kBlock / 8;
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 amax = _mm256_setzero_ps();
  for (int j = 0; j < nv; ++j) {
    // vmaxps returns the second operand when one is NaN: a NaN value is skipped, as fmax skips it
    amax = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + 8 * j), abs_mask), amax);
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
  const float a = _mm_cvtss_f32(m4);
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
  const __m256 idv = _mm256_set1_ps(id), half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
  const __m256i sign = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const __m256i lo = _mm256_set1_epi32(-128), hi = _mm256_set1_epi32(127);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int b = 0; b < kBlock / 32; ++b) {
    __m256i v[4];
    for (int j = 0; j < 4; ++j) {
      const __m256 y = _mm256_mul_ps(_mm256_loadu_ps(x + 32 * b + 8 * j), idv);
      __m256 r;
      if (kBlock == 32) {  // round half away from zero: trunc, then a step away when |y - t| >= 0.5
        const __m256 t = _mm256_round_ps(y, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        const __m256 up = _mm256_cmp_ps(_mm256_and_ps(_mm256_sub_ps(y, t), abs_mask), half, _CMP_GE_OQ);
        const __m256 step = _mm256_or_ps(one, _mm256_and_ps(y, _mm256_castsi256_ps(sign)));
        r = _mm256_add_ps(t, _mm256_and_ps(up, step));
      } else {
        r = _mm256_round_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      }
      // saturated to int8 (only a non-finite input leaves [-127, 127]; NaN converts to INT_MIN)
      v[j] = _mm256_min_epi32(_mm256_max_epi32(_mm256_cvttps_epi32(r), lo), hi);
    }
    const __m256i w = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b), _mm256_permutevar8x32_epi32(w, order));
    int32_t s[2];
    for (int u = 0; u < 2; ++u) {
      const __m256i t = _mm256_add_epi32(v[2 * u], v[2 * u + 1]);
      __m128i h = _mm_add_epi32(_mm256_castsi256_si128(t), _mm256_extracti128_si256(t, 1));
      h = _mm_add_epi32(h, _mm_unpackhi_epi64(h, h));
      h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 1));
      s[u] = _mm_cvtsi128_si32(h);
    }
    rec[b] = ActRec{d, d * static_cast<float>(s[0] + s[1]), s[0], s[1]};
  }
}

void quantize_row(const float* x, int64_t cols, int scale_block, int8_t* q, ActRec* rec) {
  if (scale_block == 32) {
    for (int64_t g = 0; g < cols; g += 32) quantize_group<32>(x + g, q + g, rec + g / 32);
  } else {
    for (int64_t g = 0; g < cols; g += 256) quantize_group<256>(x + g, q + g, rec + g / 32);
  }
}

// The squares in f32 (as the reference), summed in f64 lanes; then the row scaled.
void norm_row(const float* x, const float* w, float* y, int dim, float eps, float off, int c0, int c1) {
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  for (int i = 0; i < dim; i += 8) {
    const int left = dim - i;
    const __m256 v = left >= 8 ? _mm256_loadu_ps(x + i) : load_part(x + i, left, 0.0f);
    const __m256 sq = _mm256_mul_ps(v, v);
    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
  }
  const __m256d a = _mm256_add_pd(a0, a1);
  const __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
  const double sum = _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
  const float mean = static_cast<float>(sum / dim);
  const __m256 sc = _mm256_set1_ps(1.0f / _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(mean + eps))));
  const __m256 offv = _mm256_set1_ps(off);
  for (int i = c0; i < c1; i += 8) {
    const int left = c1 - i;
    __m256 v = _mm256_mul_ps(left >= 8 ? _mm256_loadu_ps(x + i) : load_part(x + i, left, 0.0f), sc);
    if (w != nullptr) {
      const __m256 wv = left >= 8 ? _mm256_loadu_ps(w + i) : load_part(w + i, left, 0.0f);
      v = _mm256_mul_ps(v, _mm256_add_ps(wv, offv));
    }
    if (left >= 8) {
      _mm256_storeu_ps(y + i, v);
    } else {
      store_part(y + i, v, left);
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
  k.quantize_row = quantize_row;
  k.norm_row = norm_row;
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
