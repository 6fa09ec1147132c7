// The native attention's inner loops with AVX2 + FMA (+ F16C): a 16-key tile is two 8-lane
// vectors per head element; up to 4 q rows at a time (8 independent FMA chains).
#include <cstdint>
#include <cstring>

#include "cpu/attention_kernels.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
#include <immintrin.h>

namespace specdec::cpu::attn_kernels {
namespace {

static_assert(kKeyTile == 16, "two 8-lane halves");

// 8 x 8 block transpose: r[j] (8 elements of key j) -> r[c]
void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int q = 0; q < 2; ++q) {
    u[4 * q + 0] = _mm256_shuffle_ps(t[4 * q], t[4 * q + 2], 0x44);
    u[4 * q + 1] = _mm256_shuffle_ps(t[4 * q], t[4 * q + 2], 0xEE);
    u[4 * q + 2] = _mm256_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0x44);
    u[4 * q + 3] = _mm256_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0xEE);
  }
  for (int k = 0; k < 4; ++k) {
    r[k] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x20);
    r[k + 4] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x31);
  }
}

void transpose_keys(const float* k, int nk, int d, float* kt) {
  for (int c0 = 0; c0 < d; c0 += 8) {
    const int cw = d - c0 < 8 ? d - c0 : 8;
    for (int half = 0; half < 2; ++half) {
      __m256 r[8];
      for (int j = 0; j < 8; ++j) {
        const int key = 8 * half + j;
        if (key >= nk) {
          r[j] = _mm256_setzero_ps();
        } else if (cw == 8) {
          r[j] = _mm256_loadu_ps(k + int64_t{key} * d + c0);
        } else {
          float tmp[8] = {};
          for (int c = 0; c < cw; ++c) tmp[c] = k[int64_t{key} * d + c0 + c];
          r[j] = _mm256_loadu_ps(tmp);
        }
      }
      transpose8(r);
      for (int c = 0; c < cw; ++c) _mm256_storeu_ps(kt + int64_t{c0 + c} * 16 + 8 * half, r[c]);
    }
  }
}

template <int kRows>
void qk_rows(const float* q, int64_t q_stride, const float* kt, int d, float scale, int a, int b, int nk, float* out,
             int64_t out_stride, float* mx) {
  __m256 lo[kRows], hi[kRows];
  for (int r = 0; r < kRows; ++r) lo[r] = hi[r] = _mm256_setzero_ps();
  for (int c = 0; c < d; ++c) {
    const __m256 k0 = _mm256_loadu_ps(kt + int64_t{c} * 16), k1 = _mm256_loadu_ps(kt + int64_t{c} * 16 + 8);
    for (int r = 0; r < kRows; ++r) {
      const __m256 x = _mm256_set1_ps(q[r * q_stride + c]);
      lo[r] = _mm256_fmadd_ps(x, k0, lo[r]);
      hi[r] = _mm256_fmadd_ps(x, k1, hi[r]);
    }
  }
  const __m256 sc = _mm256_set1_ps(scale);
  for (int r = 0; r < kRows; ++r) {
    float s[16];
    _mm256_storeu_ps(s, _mm256_mul_ps(lo[r], sc));
    _mm256_storeu_ps(s + 8, _mm256_mul_ps(hi[r], sc));
    float* o = out + r * out_stride;
    for (int j = 0; j < nk; ++j) o[j] = j < a || j > b ? -__builtin_inff() : s[j];
    if (mx != nullptr) {
      for (int j = a; j <= b; ++j)
        if (s[j] > mx[r]) mx[r] = s[j];
    }
  }
}

void qk_tile(const float* q, int rows, int64_t q_stride, const float* kt, int d, float scale, int a, int b, int nk,
             float* out, int64_t out_stride, float* mx) {
  for (int r0 = 0; r0 < rows; r0 += 4) {
    const float* qr = q + r0 * q_stride;
    float* o = out + r0 * out_stride;
    float* m = mx != nullptr ? mx + r0 : nullptr;
    switch (rows - r0 < 4 ? rows - r0 : 4) {
      case 1: qk_rows<1>(qr, q_stride, kt, d, scale, a, b, nk, o, out_stride, m); break;
      case 2: qk_rows<2>(qr, q_stride, kt, d, scale, a, b, nk, o, out_stride, m); break;
      case 3: qk_rows<3>(qr, q_stride, kt, d, scale, a, b, nk, o, out_stride, m); break;
      default: qk_rows<4>(qr, q_stride, kt, d, scale, a, b, nk, o, out_stride, m); break;
    }
  }
}

template <int kRows>
void pv_rows(float* acc, int64_t acc_stride, const float* w, int64_t w_stride, const float* v, int a, int b, int dv) {
  int e0 = 0;
  for (; e0 + 8 <= dv; e0 += 8) {
    __m256 s[kRows];
    for (int r = 0; r < kRows; ++r) s[r] = _mm256_loadu_ps(acc + r * acc_stride + e0);
    for (int j = a; j <= b; ++j) {
      const __m256 vj = _mm256_loadu_ps(v + int64_t{j} * dv + e0);
      for (int r = 0; r < kRows; ++r) s[r] = _mm256_fmadd_ps(_mm256_set1_ps(w[r * w_stride + j]), vj, s[r]);
    }
    for (int r = 0; r < kRows; ++r) _mm256_storeu_ps(acc + r * acc_stride + e0, s[r]);
  }
  for (; e0 < dv; ++e0) {
    for (int r = 0; r < kRows; ++r) {
      float s = acc[r * acc_stride + e0];
      for (int j = a; j <= b; ++j) s = __builtin_fmaf(w[r * w_stride + j], v[int64_t{j} * dv + e0], s);
      acc[r * acc_stride + e0] = s;
    }
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
  for (; j + 8 <= n; j += 8)
    _mm256_storeu_ps(dst + j, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * j))));
  for (; j < n; ++j) {
    uint16_t h;
    std::memcpy(&h, src + 2 * j, 2);
    dst[j] = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h)));
  }
}

}  // namespace

bool avx2_kernels(Kernels& k) {
  k.transpose_keys = transpose_keys;
  k.qk_tile = qk_tile;
  k.pv_tile = pv_tile;
  k.f16_row = f16_row;
  return true;
}

}  // namespace specdec::cpu::attn_kernels

#else
namespace specdec::cpu::attn_kernels {
bool avx2_kernels(Kernels&) { return false; }
}  // namespace specdec::cpu::attn_kernels
#endif
