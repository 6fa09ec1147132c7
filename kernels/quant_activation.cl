// Activation rows quantised to int8 per 32-element block, as the quantized matmuls consume them
// (docs/quant.md, "Numerics"). Exactly ggml's quantize_row_q8_0 rounding: d = amax / 127,
// q = round(x / d) computed as round(x * (1 / d)). Each row is quantised on its own, so the
// result of a row never depends on the other rows of the batch.
#include "quant_common.clh"

// One work-item per (32-block b, row i).
kernel void quantize_activations(global const float* x,  // [n, cols]
                                 global char* xq,        // [n, cols]
                                 global short* xq16,     // [n, cols]: the same values as int16
                                 global act_rec* rec,    // [n, cols / 32]
                                 int cols) {
  const int b = get_global_id(0);
  const int i = get_global_id(1);
  const int nb = cols / 32;
  const size_t at = (size_t)i * cols + (size_t)b * 32;
  const float16 v0 = vload16(0, x + at);
  const float16 v1 = vload16(1, x + at);
  const float16 m = fmax(fabs(v0), fabs(v1));
  const float8 m8 = fmax(m.lo, m.hi);
  const float4 m4 = fmax(m8.lo, m8.hi);
  const float2 m2 = fmax(m4.lo, m4.hi);
  const float amax = fmax(m2.lo, m2.hi);
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const int16 q0 = convert_int16(round(v0 * id));
  const int16 q1 = convert_int16(round(v1 * id));
  vstore16(convert_char16(q0), 0, xq + at);
  vstore16(convert_char16(q1), 1, xq + at);
  vstore16(convert_short16(q0), 0, xq16 + at);
  vstore16(convert_short16(q1), 1, xq16 + at);
  const int8 s8 = q0.lo + q0.hi;
  const int4 s4 = s8.lo + s8.hi;
  const int2 s2 = s4.lo + s4.hi;
  const int s_lo = s2.lo + s2.hi;
  const int8 t8 = q1.lo + q1.hi;
  const int4 t4 = t8.lo + t8.hi;
  const int2 t2 = t4.lo + t4.hi;
  const int s_hi = t2.lo + t2.hi;
  rec[(size_t)i * nb + b] = (act_rec)(d, d * (float)(s_lo + s_hi), as_float(s_lo), as_float(s_hi));
}
