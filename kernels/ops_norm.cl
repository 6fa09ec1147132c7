// RMSNorm over rows: y = x / sqrt(mean(x^2) + eps) * (w + w_offset), as llama.cpp computes it:
//   sum   = sum of (float)(x * x), accumulated in double (USE_FP64; float otherwise) in the fixed
//           order of ops_common.clh
//   mean  = (float)(sum / dim); scale = 1.0f / sqrtf(mean + eps) (correctly rounded f32 ops,
//           done through double where USE_FP64 holds)
//   y     = (x * scale) * (w + w_offset)   (two f32 roundings, no FMA)
// One work-group of LOCAL work-items per row; y may be x (in place).

#include "ops_common.clh"
#include "quant_rows.clh"

inline float rms_scale(acc_t sum, int dim, float eps) {
#ifdef USE_FP64
  const float mean = (float)(sum / (double)dim);
  const float root = (float)sqrt((double)(mean + eps));
  return (float)(1.0 / (double)root);
#else
  const float mean = sum / (float)dim;
  return 1.0f / sqrt(mean + eps);
#endif
}

// With has_residual, first x += r (written back: the residual stream), then the norm of the sum.
// With quantize = 32 or 256 (dim % quantize == 0, y at offset 0), y is also quantised with one
// scale per `quantize` values into xq / xq16 / xrec exactly as quantize_activations(_256) would
// (quant_rows.clh): the quantized matmul that reads y
// next needs no launch of its own, and reads the row while it is in cache.
// global size: (LOCAL * rows), local size: (LOCAL); LOCAL == 1: global (rows), any local size
__kernel void rms_norm(
    __global float* x, const long x_off,        // [rows, dim]; x += r when has_residual
    __global const float* r, const long r_off,  // [rows, dim], read when has_residual
    __global const float* w, const long w_off,  // [dim], read when has_weight
    __global float* y, const long y_off,        // [rows, dim]; may alias x or r
    const int dim, const float eps, const float w_offset, const int has_weight,
    const int has_residual,
    __global char* xq, __global short* xq16, __global act_rec* xrec,  // [rows, dim], [rows, dim / 32]
    const int quantize, const long num_rows) {
  __local acc_t scratch[LOCAL];
  const int lid = LANE_ID();
  const long row = ROW_ID();
#if LOCAL == 1  // (with barriers, PoCL miscompiles an early return, even a uniform one)
  if (row >= num_rows) return;  // padding of the last work-group
#endif
  __global float* xr = x + x_off + row * dim;
  __global const float* rr = r + r_off + row * dim;
  __global float* yr = y + y_off + row * dim;
  const int num_blocks = dim / 16;
  const int tail = dim % 16;
  acc16_t acc = (acc16_t)0;
  for (int b = lid; b < num_blocks; b += LOCAL) {
    float16 v = vload16(b, xr);
    if (has_residual) {
      v = v + vload16(b, rr);
      vstore16(v, b, xr);
    }
    acc += convert_acc16(v * v);
  }
  if (num_blocks % LOCAL == lid && tail != 0) {
    __global float* xt = xr + num_blocks * 16;
    if (has_residual) {
      for (int i = 0; i < tail; ++i) xt[i] = xt[i] + rr[num_blocks * 16 + i];
    }
    const float16 v = load16_tail(xt, tail, 0.0f);
    acc += convert_acc16(v * v);
  }
  const float scale = rms_scale(group_sum(scratch, sum16(acc)), dim, eps);
  for (int b = lid; b < num_blocks; b += LOCAL) {
    float16 v = vload16(b, xr) * scale;
    if (has_weight) v = v * (vload16(b, w + w_off) + w_offset);
    vstore16(v, b, yr);
  }
  if (num_blocks % LOCAL == lid) {
    for (int i = num_blocks * 16; i < dim; ++i) {
      float v = xr[i] * scale;
      if (has_weight) v = v * (w[w_off + i] + w_offset);
      yr[i] = v;
    }
  }
#if LOCAL > 1
  // the values of a block or group may come from several work-items. Outside the `if`: PoCL
  // miscompiled the barrier inside it once the 256 branch was there (work-items with no group
  // wrote past the buffers; tests/cpp ops_norm_test_local8 runs the wide shape on the CPU).
  barrier(CLK_GLOBAL_MEM_FENCE);
#endif
  if (quantize != 0) {
    const int nq = dim / quantize;  // quantize: the values per scale, 32 or 256 (quant_rows.clh)
    for (int j = lid; j < nq; j += LOCAL) {
      const size_t at = (size_t)row * dim + (size_t)j * quantize;
      if (quantize == 256) {
        quantize_group256(yr + j * 256, xq, xq16, xrec, at, at / 32);
      } else {
        const float16 v0 = vload16(2 * j, yr);
        const float16 v1 = vload16(2 * j + 1, yr);
        quantize_block32(v0, v1, xq, xq16, xrec, at, at / 32);
      }
    }
  }
}
