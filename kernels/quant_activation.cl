// Activation rows quantised to int8, as the quantized matmuls consume them (docs/quant.md,
// "Numerics"; the two rules are in quant_rows.clh): quantize_activations with one scale per
// 32-block (ggml's quantize_row_q8_0 rounding), quantize_activations_256 with one scale per 256
// values (ggml's quantize_row_q8_K, for K-quant weights). Each row is quantised on its own, so the
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

// One work-item per (256-value group g, row i); cols % 256 == 0.
kernel void quantize_activations_256(global const float* x, global char* xq, global short* xq16,
                                     global act_rec* rec, int cols) {
  const int g = get_global_id(0);
  const int i = get_global_id(1);
  const size_t at = (size_t)i * cols + (size_t)g * 256;
  quantize_group256(x + at, xq, xq16, rec, at, at / 32);
}
