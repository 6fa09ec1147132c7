// Per-head matrix x vector products (MLA's absorbed attention):
//   y[t, h, r] = sum_k w[h, r, k] * x[t, h, k]      r < rows, k < cols
// where head (t, h) of x starts x_stride elements after head (t, h - 1) (and likewise for y),
// so a head's part of a wider projection is read where it lies. Each work-item computes one
// output: the row is cut into 16-float blocks accumulated in increasing order into 16 lanes
// (the last block zero-filled), then the lanes are summed as a tree (8 + 8, 4 + 4, 2 + 2,
// 1 + 1). Nothing depends on the batch, so the result is bitwise the same whatever the tokens
// around it.

#include "ops_common.clh"

inline float tree_sum16(float16 v) {
  const float8 a = v.lo + v.hi;
  const float4 b = a.lo + a.hi;
  const float2 c = b.lo + b.hi;
  return c.x + c.y;
}

// global size: (rows, heads, tokens)
__kernel void head_matmul(__global const float* w, const long w_off,
                          __global const float* x, const long x_off, const long x_stride,
                          __global float* y, const long y_off, const long y_stride,
                          const int heads, const int rows, const int cols) {
  const int r = get_global_id(0);
  const int h = get_global_id(1);
  const long t = get_global_id(2);
  __global const float* wr = w + w_off + ((long)h * rows + r) * cols;
  __global const float* xr = x + x_off + (t * heads + h) * x_stride;
  float16 acc = (float16)(0.0f);
  int k = 0;
  for (; k + 16 <= cols; k += 16) acc += vload16(0, wr + k) * vload16(0, xr + k);
  if (k < cols) acc += load16_tail(wr + k, cols - k, 0.0f) * load16_tail(xr + k, cols - k, 0.0f);
  y[y_off + (t * heads + h) * y_stride + r] = tree_sum16(acc);
}
