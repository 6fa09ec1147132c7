// Row and column moves on 4-byte elements (f32 activations): gather_rows (select the rows whose
// logits are needed), copy_2d (strided copy), split_columns (a fused [n, a + b + c] projection
// into three buffers) and gather_columns (one element per row, e.g. the logit of a given token).

#include "ops_common.clh"

// dst[j, :] = src[idx[j], :]; an index outside [0, num_src_rows) gives a row of NaN.
// global size: (dim, num_idx)
__kernel void gather_rows(__global const float* src, const long src_off,
                          __global const int* idx, const long idx_off,
                          __global float* dst, const long dst_off,
                          const int dim, const long num_src_rows) {
  const int i = get_global_id(0);
  const long j = get_global_id(1);
  const long r = idx[idx_off + j];
  dst[dst_off + j * dim + i] = (r >= 0 && r < num_src_rows) ? src[src_off + r * dim + i] : NAN;
}

// dst[r * dst_stride + c] = src[r * src_stride + c].  global size: (cols, rows)
__kernel void copy_2d(__global const float* src, const long src_off, const long src_stride,
                      __global float* dst, const long dst_off, const long dst_stride) {
  const long c = get_global_id(0);
  const long r = get_global_id(1);
  dst[dst_off + r * dst_stride + c] = src[src_off + r * src_stride + c];
}

// src [n, a + b + c] -> dst_a [n, a], dst_b [n, b], dst_c [n, c].  global size: (a + b + c, n)
__kernel void split_columns(__global const float* src, const long src_off,
                            __global float* dst_a, const long a_off,
                            __global float* dst_b, const long b_off,
                            __global float* dst_c, const long c_off,
                            const int a, const int b, const int c) {
  const int j = get_global_id(0);
  const long r = get_global_id(1);
  const float v = src[src_off + r * (a + b + c) + j];
  if (j < a) {
    dst_a[a_off + r * a + j] = v;
  } else if (j < a + b) {
    dst_b[b_off + r * b + (j - a)] = v;
  } else {
    dst_c[c_off + r * c + (j - a - b)] = v;
  }
}

// dst[r] = src[r, cols[r]]; a column outside [0, dim) gives NaN.  global size: (rows)
__kernel void gather_columns(__global const float* src, const long src_off,
                             __global const int* cols, const long cols_off,
                             __global float* dst, const long dst_off, const int dim) {
  const long r = get_global_id(0);
  const int c = cols[cols_off + r];
  dst[dst_off + r] = (c >= 0 && c < dim) ? src[src_off + r * dim + c] : NAN;
}
