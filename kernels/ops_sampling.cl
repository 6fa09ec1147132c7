// Per-row reductions over logits [rows, vocab] for sampling and logprobs: argmax and
// logsumexp / log_softmax. One work-group of LOCAL work-items per row, in the fixed order of
// ops_common.clh, so a row's result never depends on the batch.

#include "ops_common.clh"

// (key, index) packed so that a larger value wins and, among equal keys, the lower index.
inline ulong pack_key(uint key, uint idx) { return ((ulong)key << 32) | (ulong)(~idx); }

// Largest packed key of one per work-item.
inline ulong group_max_ulong(__local ulong* scratch, ulong v) {
#if LOCAL == 1
  return v;
#else
  const int lid = get_local_id(0);
  scratch[lid] = v;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int s = LOCAL / 2; s > 0; s >>= 1) {
    if (lid < s) scratch[lid] = max(scratch[lid], scratch[lid + s]);
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const ulong m = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return m;
#endif
}

// out[row] = index of the largest logit; ties go to the lowest index, -0 == +0, NaN loses to
// every number (a row of NaN gives 0). Exact: max over a total order, whatever the order.
// global size: (LOCAL * rows), local size: (LOCAL); LOCAL == 1: global (rows), any local size
__kernel void argmax(__global const float* x, const long x_off,  // [rows, vocab]
                     __global int* out, const long out_off,      // [rows]
                     const int vocab, const long num_rows) {
  __local ulong scratch[LOCAL];
  const int lid = LANE_ID();
  const long row = ROW_ID();
#if LOCAL == 1  // (with barriers, PoCL miscompiles an early return, even a uniform one)
  if (row >= num_rows) return;  // padding of the last work-group
#endif
  __global const float* xr = x + x_off + row * vocab;
  const int num_blocks = vocab / 16;
  const uint16 lane = (uint16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  ulong16 best = (ulong16)0;
  for (int b = lid; b < num_blocks; b += LOCAL) {
    const uint16 key = ukey16(vload16(b, xr));
    const uint16 idx = (uint16)(b * 16) + lane;
    best = max(best, (convert_ulong16(key) << (ulong16)32) | convert_ulong16(~idx));
  }
  ulong m = 0;
  if (num_blocks % LOCAL == lid) {
    for (int i = num_blocks * 16; i < vocab; ++i) m = max(m, pack_key(ukey(xr[i]), (uint)i));
  }
  const ulong8 a = max(best.lo, best.hi);
  const ulong4 b4 = max(a.lo, a.hi);
  const ulong2 c2 = max(b4.lo, b4.hi);
  m = max(m, max(c2.lo, c2.hi));
  m = group_max_ulong(scratch, m);
  if (lid == 0) out[out_off + row] = (int)(~(uint)(m & 0xffffffffUL));
}

// lse[row] = log(sum(exp(x))) computed as m + log(sum(exp(x - m))), m = the row's max:
// exp in f32, the sum in acc_t (double where USE_FP64) in the fixed order, then
// lse = (float)(m + log(sum)). NaN anywhere gives NaN; a row of -inf gives -inf; +inf gives +inf.
// With write_out, also out = x - lse (f32; out may be x).
// global size: (LOCAL * rows), local size: (LOCAL); LOCAL == 1: global (rows), any local size
__kernel void logsumexp(__global const float* x, const long x_off,  // [rows, vocab]
                        __global float* lse, const long lse_off,    // [rows]
                        __global float* out, const long out_off,    // [rows, vocab] if write_out
                        const int vocab, const int write_out, const long num_rows) {
  __local acc_t scratch[LOCAL];
  __local float fscratch[LOCAL];
  const int lid = LANE_ID();
  const long row = ROW_ID();
#if LOCAL == 1  // (with barriers, PoCL miscompiles an early return, even a uniform one)
  if (row >= num_rows) return;  // padding of the last work-group
#endif
  __global const float* xr = x + x_off + row * vocab;
  const int num_blocks = vocab / 16;
  const int tail = vocab % 16;
  const bool has_tail = num_blocks % LOCAL == lid && tail != 0;
  float16 mv = (float16)(-INFINITY);
  int16 nan = (int16)0;
  for (int b = lid; b < num_blocks; b += LOCAL) {
    const float16 v = vload16(b, xr);
    mv = fmax(mv, v);
    nan |= isnan(v);
  }
  if (has_tail) {
    const float16 v = load16_tail(xr + num_blocks * 16, tail, -INFINITY);
    mv = fmax(mv, v);
    nan |= isnan(v);
  }
  const float any_nan = any(nan) ? 1.0f : 0.0f;
  const bool row_nan = group_max(fscratch, any_nan) > 0.0f;
  const float m = group_max(fscratch, max16(mv));
  acc16_t acc = (acc16_t)0;
  if (isfinite(m)) {
    for (int b = lid; b < num_blocks; b += LOCAL) acc += convert_acc16(exp(vload16(b, xr) - m));
    if (has_tail) acc += convert_acc16(exp(load16_tail(xr + num_blocks * 16, tail, -INFINITY) - m));
  }
  const acc_t sum = group_sum(scratch, sum16(acc));
  float result = m;
  if (row_nan) {
    result = NAN;
  } else if (isfinite(m)) {
    result = (float)((acc_t)m + log(sum));
  }
  if (lid == 0) lse[lse_off + row] = result;
  if (!write_out) return;
  __global float* orow = out + out_off + row * vocab;
  for (int b = lid; b < num_blocks; b += LOCAL) vstore16(vload16(b, xr) - result, b, orow);
  if (num_blocks % LOCAL == lid) {
    for (int i = num_blocks * 16; i < vocab; ++i) orow[i] = xr[i] - result;
  }
}
