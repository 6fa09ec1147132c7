// Row and column moves on 4-byte elements (f32 activations): gather_rows (select the rows whose
// logits are needed), copy_2d (strided copy), split_columns (a fused [n, a + b + c] projection
// into three buffers) and gather_columns (one element per row, e.g. the logit of a given token).
// Each work-item moves 16 consecutive elements of a row as one float16 (the last of a row, or
// one straddling two destinations, moves its elements one by one).

#include "ops_common.clh"

// Copies 16 elements, or the first n < 16 one by one.
inline void move16(__global const float* src, __global float* dst, int n) {
  if (n >= 16) {
    vstore16(vload16(0, src), 0, dst);
  } else {
    for (int j = 0; j < n; ++j) dst[j] = src[j];
  }
}

// dst[j, :] = src[idx[j], :]; an index outside [0, num_src_rows) gives a row of NaN.
// global size: (cdiv(dim, 16), num_idx)
__kernel void gather_rows(__global const float* src, const long src_off,
                          __global const int* idx, const long idx_off,
                          __global float* dst, const long dst_off,
                          const int dim, const long num_src_rows) {
  const int i = get_global_id(0) * 16;
  const long j = get_global_id(1);
  const long r = idx[idx_off + j];
  __global float* d = dst + dst_off + j * dim + i;
  if (r >= 0 && r < num_src_rows) {
    move16(src + src_off + r * dim + i, d, dim - i);
  } else {
    for (int k = 0; k < min(16, dim - i); ++k) d[k] = NAN;
  }
}

// dst[r * dst_stride + c] = src[r * src_stride + c] for c < cols.
// global size: (cdiv(cols, 16), rows)
__kernel void copy_2d(__global const float* src, const long src_off, const long src_stride,
                      __global float* dst, const long dst_off, const long dst_stride,
                      const long cols) {
  const long c = (long)get_global_id(0) * 16;
  const long r = get_global_id(1);
  move16(src + src_off + r * src_stride + c, dst + dst_off + r * dst_stride + c, (int)min(16L, cols - c));
}

// src [n, a + b + c] -> dst_a [n, a], dst_b [n, b], dst_c [n, c].
// global size: (cdiv(a + b + c, 16), n)
__kernel void split_columns(__global const float* src, const long src_off,
                            __global float* dst_a, const long a_off,
                            __global float* dst_b, const long b_off,
                            __global float* dst_c, const long c_off,
                            const int a, const int b, const int c) {
  const int j = get_global_id(0) * 16;
  const long r = get_global_id(1);
  const int w = a + b + c;
  __global const float* s = src + src_off + r * w + j;
  __global float* da = dst_a + a_off + r * a;  // column k of a row goes to da[k], db[k - a] or
  __global float* db = dst_b + b_off + r * b;  // dc[k - a - b]
  __global float* dc = dst_c + c_off + r * c;
  const int end = min(j + 16, w);
  if (end <= a) {
    move16(s, da + j, end - j);
  } else if (j >= a && end <= a + b) {
    move16(s, db + (j - a), end - j);
  } else if (j >= a + b) {
    move16(s, dc + (j - a - b), end - j);
  } else {
    for (int k = j; k < end; ++k) {
      const float v = s[k - j];
      if (k < a) {
        da[k] = v;
      } else if (k < a + b) {
        db[k - a] = v;
      } else {
        dc[k - a - b] = v;
      }
    }
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
