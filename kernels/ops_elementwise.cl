// Element-wise ops on f32 activations, one element per work-item (PoCL vectorises the
// work-item loop). f32 arithmetic without FMA, so the C++ references match bitwise except where a
// libm function (exp, tanh) rounds differently.

#include "ops_common.clh"

// x += y.  global size: (n)
__kernel void add(__global float* x, const long x_off, __global const float* y, const long y_off) {
  const long i = get_global_id(0);
  x[x_off + i] = x[x_off + i] + y[y_off + i];
}

// x[r, :] += b.  global size: (dim, rows)
__kernel void add_bias(__global float* x, const long x_off, __global const float* b,
                       const long b_off, const int dim) {
  const int i = get_global_id(0);
  const long at = x_off + (long)get_global_id(1) * dim + i;
  x[at] = x[at] + b[b_off + i];
}

// x *= s.  global size: (n)
__kernel void scale(__global float* x, const long x_off, const float s) {
  const long i = get_global_id(0);
  x[x_off + i] = x[x_off + i] * s;
}

// x = cap * tanh(x / cap).  global size: (n)
__kernel void softcap(__global float* x, const long x_off, const float cap) {
  const long i = get_global_id(0);
  x[x_off + i] = cap * tanh(x[x_off + i] / cap);
}

#define SQRT_2_OVER_PI 0.79788456080286535587989211986876f
#define GELU_COEF_A 0.044715f

inline float silu(float g) { return g / (1.0f + exp(-g)); }
// 0.5 g (1 + tanh(z)) == g / (1 + exp(-2 z)): the same function without the cancellation of
// 1 + tanh(z) for negative z (where an f32 tanh 1 ulp from -1 would leave a residue of 6e-8 g).
inline float gelu_tanh(float g) {
  const float z = SQRT_2_OVER_PI * (g + GELU_COEF_A * g * g * g);
  return g / (1.0f + exp(-2.0f * z));
}

// out = act(gate) * up, ACT 0: silu, 1: gelu_tanh. gate and up rows are in_stride apart (a fused
// [rows, 2 * ff] projection works); out is dense [rows, ff] and may be gate or up when those are
// dense too (in_stride == ff).
// global size: (ff, rows)
__kernel void gated_activation(__global const float* gate, const long gate_off,
                               __global const float* up, const long up_off,
                               __global float* out, const long out_off,
                               const int ff, const long in_stride, const int act) {
  const int i = get_global_id(0);
  const long r = get_global_id(1);
  const float g = gate[gate_off + r * in_stride + i];
  const float u = up[up_off + r * in_stride + i];
  out[out_off + r * ff + i] = (act == 0 ? silu(g) : gelu_tanh(g)) * u;
}
