// The native attention's inner loops with AVX-512 F (+ F16C): a key tile is one 16-lane vector
// per head element, so a q row's 16 scores are 16 lanes of one accumulator; up to 8 rows at a
// time (8 independent FMA chains), and each value row is loaded once for all of them.
#include <cstdint>
#include <cstring>

#include "cpu/attention_kernels.h"

#if defined(__x86_64__) && defined(__AVX512F__) && defined(__F16C__) && defined(__FMA__)
#include <immintrin.h>

namespace specdec::cpu::attn_kernels {
namespace {

static_assert(kKeyTile == 16, "one key per lane");

inline __m512 unpacklo_pd(__m512 a, __m512 b) {
  return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}
inline __m512 unpackhi_pd(__m512 a, __m512 b) {
  return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(a), _mm512_castps_pd(b)));
}

// r[j] (16 elements of key j) -> r[c] (element c of the 16 keys)
void transpose16(__m512 r[16]) {
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // u[k + 4q], 128-bit lane L: element 4L + k of rows 4q .. 4q + 3
  for (int q = 0; q < 4; ++q) {
    u[4 * q + 0] = unpacklo_pd(t[4 * q], t[4 * q + 2]);
    u[4 * q + 1] = unpackhi_pd(t[4 * q], t[4 * q + 2]);
    u[4 * q + 2] = unpacklo_pd(t[4 * q + 1], t[4 * q + 3]);
    u[4 * q + 3] = unpackhi_pd(t[4 * q + 1], t[4 * q + 3]);
  }
  for (int k = 0; k < 4; ++k) {
    const __m512 v = _mm512_shuffle_f32x4(u[k], u[k + 4], 0x88), w = _mm512_shuffle_f32x4(u[k], u[k + 4], 0xDD);
    const __m512 x = _mm512_shuffle_f32x4(u[k + 8], u[k + 12], 0x88);
    const __m512 y = _mm512_shuffle_f32x4(u[k + 8], u[k + 12], 0xDD);
    r[k] = _mm512_shuffle_f32x4(v, x, 0x88);
    r[k + 8] = _mm512_shuffle_f32x4(v, x, 0xDD);
    r[k + 4] = _mm512_shuffle_f32x4(w, y, 0x88);
    r[k + 12] = _mm512_shuffle_f32x4(w, y, 0xDD);
  }
}

__mmask16 first(int n) { return n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u); }

void transpose_keys(const float* k, int nk, int d, float* kt) {
  for (int c0 = 0; c0 < d; c0 += 16) {
    const int cw = d - c0 < 16 ? d - c0 : 16;
    const __mmask16 m = first(cw);
    __m512 r[16];
    for (int j = 0; j < 16; ++j) r[j] = j < nk ? _mm512_maskz_loadu_ps(m, k + int64_t{j} * d + c0) : _mm512_setzero_ps();
    transpose16(r);
    for (int c = 0; c < cw; ++c) _mm512_storeu_ps(kt + int64_t{c0 + c} * 16, r[c]);
  }
}

template <int kRows>
void qk_rows(const float* q, int64_t q_stride, const float* kt, int d, __m512 scale, __mmask16 valid, __mmask16 store,
             float* out, int64_t out_stride, float* mx) {
  __m512 acc[kRows];
  for (int r = 0; r < kRows; ++r) acc[r] = _mm512_setzero_ps();
  for (int c = 0; c < d; ++c) {
    const __m512 k = _mm512_loadu_ps(kt + int64_t{c} * 16);
    for (int r = 0; r < kRows; ++r) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(q[r * q_stride + c]), k, acc[r]);
  }
  const __m512 ninf = _mm512_set1_ps(-__builtin_inff());
  for (int r = 0; r < kRows; ++r) {
    const __m512 v = _mm512_mask_mov_ps(ninf, valid, _mm512_mul_ps(acc[r], scale));
    _mm512_mask_storeu_ps(out + r * out_stride, store, v);
    if (mx != nullptr) {  // NaN scores left out, as the other paths' compare-and-keep loops do
      const float top = _mm512_mask_reduce_max_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), v);
      if (top > mx[r]) mx[r] = top;
    }
  }
}

void qk_tile(const float* q, int rows, int64_t q_stride, const float* kt, int d, float scale, int a, int b, int nk,
             float* out, int64_t out_stride, float* mx) {
  const __mmask16 valid = static_cast<__mmask16>(first(b + 1) & ~first(a)), store = first(nk);
  const __m512 sc = _mm512_set1_ps(scale);
  for (int r0 = 0; r0 < rows; r0 += 8) {
    const float* qr = q + r0 * q_stride;
    float* o = out + r0 * out_stride;
    float* m = mx != nullptr ? mx + r0 : nullptr;
    switch (rows - r0 < 8 ? rows - r0 : 8) {
      case 1: qk_rows<1>(qr, q_stride, kt, d, sc, valid, store, o, out_stride, m); break;
      case 2: qk_rows<2>(qr, q_stride, kt, d, sc, valid, store, o, out_stride, m); break;
      case 3: qk_rows<3>(qr, q_stride, kt, d, sc, valid, store, o, out_stride, m); break;
      case 4: qk_rows<4>(qr, q_stride, kt, d, sc, valid, store, o, out_stride, m); break;
      case 5: qk_rows<5>(qr, q_stride, kt, d, sc, valid, store, o, out_stride, m); break;
      case 6: qk_rows<6>(qr, q_stride, kt, d, sc, valid, store, o, out_stride, m); break;
      case 7: qk_rows<7>(qr, q_stride, kt, d, sc, valid, store, o, out_stride, m); break;
      default: qk_rows<8>(qr, q_stride, kt, d, sc, valid, store, o, out_stride, m); break;
    }
  }
}

template <int kRows>
void pv_rows(float* acc, int64_t acc_stride, const float* w, int64_t w_stride, const float* v, int a, int b, int dv) {
  for (int e0 = 0; e0 < dv; e0 += 16) {
    const __mmask16 m = first(dv - e0);
    __m512 s[kRows];
    for (int r = 0; r < kRows; ++r) s[r] = _mm512_maskz_loadu_ps(m, acc + r * acc_stride + e0);
    for (int j = a; j <= b; ++j) {
      const __m512 vj = _mm512_maskz_loadu_ps(m, v + int64_t{j} * dv + e0);
      for (int r = 0; r < kRows; ++r) s[r] = _mm512_fmadd_ps(_mm512_set1_ps(w[r * w_stride + j]), vj, s[r]);
    }
    for (int r = 0; r < kRows; ++r) _mm512_mask_storeu_ps(acc + r * acc_stride + e0, m, s[r]);
  }
}

void pv_tile(float* acc, int rows, int64_t acc_stride, const float* w, int64_t w_stride, const float* v, int a, int b,
             int dv) {
  for (int r0 = 0; r0 < rows; r0 += 8) {
    float* ar = acc + r0 * acc_stride;
    const float* wr = w + r0 * w_stride;
    switch (rows - r0 < 8 ? rows - r0 : 8) {
      case 1: pv_rows<1>(ar, acc_stride, wr, w_stride, v, a, b, dv); break;
      case 2: pv_rows<2>(ar, acc_stride, wr, w_stride, v, a, b, dv); break;
      case 3: pv_rows<3>(ar, acc_stride, wr, w_stride, v, a, b, dv); break;
      case 4: pv_rows<4>(ar, acc_stride, wr, w_stride, v, a, b, dv); break;
      case 5: pv_rows<5>(ar, acc_stride, wr, w_stride, v, a, b, dv); break;
      case 6: pv_rows<6>(ar, acc_stride, wr, w_stride, v, a, b, dv); break;
      case 7: pv_rows<7>(ar, acc_stride, wr, w_stride, v, a, b, dv); break;
      default: pv_rows<8>(ar, acc_stride, wr, w_stride, v, a, b, dv); break;
    }
  }
}

void f16_row(const uint8_t* src, float* dst, int n) {
  int j = 0;
  for (; j + 16 <= n; j += 16)
    _mm512_storeu_ps(dst + j, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + 2 * j))));
  for (; j < n; ++j) {
    uint16_t h;
    std::memcpy(&h, src + 2 * j, 2);
    dst[j] = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
  }
}

}  // namespace

bool avx512_kernels(Kernels& k) {
  k.transpose_keys = transpose_keys;
  k.qk_tile = qk_tile;
  k.pv_tile = pv_tile;
  k.f16_row = f16_row;
  return true;
}

}  // namespace specdec::cpu::attn_kernels

#else
namespace specdec::cpu::attn_kernels {
bool avx512_kernels(Kernels&) { return false; }
}  // namespace specdec::cpu::attn_kernels
#endif
