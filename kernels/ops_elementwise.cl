// Element-wise ops on f32 activations. Each work-item handles 16 consecutive elements of a row
// as one float16 (explicit vectors: PoCL does not vectorise exp / tanh across work-items, and
// these were 2x faster than one element per work-item); the last work-item of a row takes the
// remainder one by one. f32 arithmetic without FMA, so the C++ references match bitwise except
// where a libm function (exp, tanh) rounds differently.

#include "ops_common.clh"
#include "quant_rows.clh"

#define SQRT_2_OVER_PI 0.79788456080286535587989211986876f
#define GELU_COEF_A 0.044715f

// x += y.  global size: (cdiv(n, 16))
__kernel void add(__global float* x, const long x_off, __global const float* y, const long y_off,
                  const long n) {
  const long i = (long)get_global_id(0) * 16;
  __global float* xp = x + x_off + i;
  __global const float* yp = y + y_off + i;
  if (i + 16 <= n) {
    vstore16(vload16(0, xp) + vload16(0, yp), 0, xp);
  } else {
    for (long j = 0; j < n - i; ++j) xp[j] = xp[j] + yp[j];
  }
}

// x[r, :] += b.  global size: (cdiv(dim, 16), rows)
__kernel void add_bias(__global float* x, const long x_off, __global const float* b,
                       const long b_off, const int dim) {
  const int i = get_global_id(0) * 16;
  __global float* xp = x + x_off + (long)get_global_id(1) * dim + i;
  __global const float* bp = b + b_off + i;
  if (i + 16 <= dim) {
    vstore16(vload16(0, xp) + vload16(0, bp), 0, xp);
  } else {
    for (int j = 0; j < dim - i; ++j) xp[j] = xp[j] + bp[j];
  }
}

// x *= s.  global size: (cdiv(n, 16))
__kernel void scale(__global float* x, const long x_off, const float s, const long n) {
  const long i = (long)get_global_id(0) * 16;
  __global float* xp = x + x_off + i;
  if (i + 16 <= n) {
    vstore16(vload16(0, xp) * s, 0, xp);
  } else {
    for (long j = 0; j < n - i; ++j) xp[j] = xp[j] * s;
  }
}

// x = cap * tanh(x / cap). The remainder also goes through the 16-lane tanh (padded), so an
// element's bits never depend on where the flat range starts (a row alone or in a batch).
// global size: (cdiv(n, 16))
__kernel void softcap(__global float* x, const long x_off, const float cap, const long n) {
  const long i = (long)get_global_id(0) * 16;
  __global float* xp = x + x_off + i;
  if (i + 16 <= n) {
    vstore16(cap * tanh(vload16(0, xp) / cap), 0, xp);
  } else {
    const int m = (int)(n - i);
    float t[16];
    vstore16(cap * tanh(load16_tail(xp, m, 0.0f) / cap), 0, t);
    for (int j = 0; j < m; ++j) xp[j] = t[j];
  }
}

// silu(g) = g / (1 + exp(-g)).
// gelu_tanh(g) = 0.5 g (1 + tanh(z)), z = sqrt(2/pi) (g + 0.044715 g^3), computed as the equal
// g / (1 + exp(-2 z)), free of the cancellation of 1 + tanh(z) for negative z (where an f32 tanh
// 1 ulp from -1 leaves a residue of 6e-8 g).
#define SILU(g) ((g) / (1.0f + exp(-(g))))
#define GELU_Z(g) (SQRT_2_OVER_PI * ((g) + GELU_COEF_A * (g) * (g) * (g)))
inline float silu(float g) { return SILU(g); }
inline float16 silu16(float16 g) { return SILU(g); }
inline float gelu_tanh(float g) { return g / (1.0f + exp(-2.0f * GELU_Z(g))); }
inline float16 gelu_tanh16(float16 g) { return g / (1.0f + exp(-2.0f * GELU_Z(g))); }

// out = act(gate) * up, act 0: silu, 1: gelu_tanh. gate and up rows are in_stride apart (a fused
// [rows, 2 * ff] projection works); out is dense [rows, ff] and may be gate or up when those are
// dense too (in_stride == ff).
// global size: (cdiv(ff, 16), rows)
__kernel void gated_activation(__global const float* gate, const long gate_off,
                               __global const float* up, const long up_off,
                               __global float* out, const long out_off,
                               const int ff, const long in_stride, const int act) {
  const int i = get_global_id(0) * 16;
  const long r = get_global_id(1);
  __global const float* gp = gate + gate_off + r * in_stride + i;
  __global const float* upp = up + up_off + r * in_stride + i;
  __global float* op = out + out_off + r * ff + i;
  if (i + 16 <= ff) {
    const float16 g = vload16(0, gp);
    const float16 u = vload16(0, upp);
    vstore16((act == 0 ? silu16(g) : gelu_tanh16(g)) * u, 0, op);
  } else {
    for (int j = 0; j < ff - i; ++j) op[j] = (act == 0 ? silu(gp[j]) : gelu_tanh(gp[j])) * upp[j];
  }
}

// gated_activation with its output also quantised for the down projection, one scale per
// `quantize` values, 32 or 256 (quant_rows.clh; bitwise the bytes quantize_activations(_256) would
// write). ff % quantize == 0, out at offset 0. global size: (ff / quantize, rows)
__kernel void gated_activation_q(__global const float* gate, const long gate_off,
                                 __global const float* up, const long up_off,
                                 __global float* out, const int ff, const long in_stride,
                                 const int act, __global char* xq, __global short* xq16,
                                 __global act_rec* xrec, const int quantize) {
  const long r = get_global_id(1);
  const int i = get_global_id(0) * quantize;
  __global const float* gp = gate + gate_off + r * in_stride + i;
  __global const float* upp = up + up_off + r * in_stride + i;
  __global float* op = out + r * ff + i;
  const size_t at = (size_t)r * ff + i;
  for (int c = 0; c < quantize / 32; ++c) {
    const float16 g0 = vload16(2 * c, gp), g1 = vload16(2 * c + 1, gp);
    const float16 u0 = vload16(2 * c, upp), u1 = vload16(2 * c + 1, upp);
    const float16 v0 = (act == 0 ? silu16(g0) : gelu_tanh16(g0)) * u0;
    const float16 v1 = (act == 0 ? silu16(g1) : gelu_tanh16(g1)) * u1;
    vstore16(v0, 2 * c, op);
    vstore16(v1, 2 * c + 1, op);
    if (quantize == 32) quantize_block32(v0, v1, xq, xq16, xrec, at, at / 32);
  }
  if (quantize == 256) quantize_group256(op, xq, xq16, xrec, at, at / 32);  // its own stores
}
