// Internal to cpp/cpu/ops*.cpp: vector exp-based row loops, one set per ISA path (vmath_avx2.cpp,
// vmath_avx512.cpp with their own flags; the portable set, glibc's expf, in ops.cpp). The vector
// exp is Cody-Waite range reduction and a degree-6 polynomial (Cephes' expf coefficients, explicit
// FMA), within 2 ulp of the correctly rounded value on [-87.3, 88.7], +inf above, 0 below, NaN
// kept. Per-ISA files include only this header, <cstdint> and <immintrin.h>.
#pragma once

#include <cstdint>

#include "cpu/act_rec.h"

namespace specdec::cpu::vmath {

// The sampling ops' order (docs/ops.md): larger value -> larger key, -0 == +0, NaN lowest.
inline uint32_t order_key(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0u;
  if (a == 0) return 0x80000000u;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

struct Kernels {
  // out[i] = silu(g[i]) * u[i] = g / (1 + exp(-g)) * u
  void (*silu_mul)(const float* g, const float* u, float* out, int n) = nullptr;
  // out[i] = gelu_tanh(g[i]) * u[i] = g / (1 + exp(-2z)) * u, z = sqrt(2/pi) (g + 0.044715 g^3)
  void (*gelu_mul)(const float* g, const float* u, float* out, int n) = nullptr;
  // sum of exp(x[i] - m), accumulated in double
  double (*exp_sum)(const float* x, float m, int n) = nullptr;
  // out[i] = exp(x[i] - m) (x[i] = -inf gives 0); out may be x
  void (*exp_shift)(const float* x, float m, float* out, int n) = nullptr;
  // One row of cols values quantised with scale_block 32 or 256 (cpu/activations.h's rules,
  // bitwise on every path: max, one multiply and a rounding per value are exact operations).
  void (*quantize_row)(const float* x, int64_t cols, int scale_block, int8_t* q, ActRec* rec) = nullptr;
  // y = x / sqrt(mean(x^2) + eps) * (w + off) (w null: no weight), squares in f32 summed in double
  // (portable: in order, bitwise the reference; vector paths: in lanes, within 1e-6 relative),
  // written for columns [c0, c1) only (the sum is always the whole row's; each column's value is
  // the same whatever the range: a row may be written in column chunks by several threads)
  void (*norm_row)(const float* x, const float* w, float* y, int dim, float eps, float off, int c0, int c1) = nullptr;
  // The largest of x[0, n) (n >= 1; -inf for n = 0), +0 for a zero maximum, and whether any value
  // is NaN (*nan; the maximum is then meaningless). Exact on every path (a max is exact).
  float (*max_nan)(const float* x, int n, bool* nan) = nullptr;
  // The largest order key (order_key above: larger value larger key, -0 == +0, NaN lowest) of x[0, n), n >= 1, and in *index the first position holding it. Exact on every path.
  uint32_t (*argmax_key)(const float* x, int n, int32_t* index) = nullptr;
};

bool avx2_kernels(Kernels& k);
bool avx512_kernels(Kernels& k);

}  // namespace specdec::cpu::vmath
