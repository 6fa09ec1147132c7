// Activation rows quantised to int8 per 32-element block, as the quantized matmuls consume them
// (docs/quant.md, "Numerics"). Exactly ggml's quantize_row_q8_0 rounding: d = amax / 127,
// q = round(x / d) computed as round(x * (1 / d)). Each row is quantised on its own, so the
// result of a row never depends on the other rows of the batch.
#include "quant_common.clh"
#include "quant_rows.clh"

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
  quantize_block32(v0, v1, xq, xq16, rec, at, (size_t)i * nb + b);
}
