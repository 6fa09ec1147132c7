// Rotary position embedding, in place, on the first rope_dim dims of every head:
//   NORM (NEOX == 0) rotates adjacent pairs (x[2i], x[2i + 1]);
//   NEOX (NEOX == 1) rotates (x[i], x[i + rope_dim / 2]);
// for i < rope_dim / 2, by theta = (float)pos * inv_freq[i] (an f32 product, as Hugging Face
// computes it). inv_freq [rope_dim / 2] comes from the host (freq_scale * base^(-2i/rope_dim)
// in double, rounded to f32). cos and sin are evaluated in double and rounded to f32 where
// USE_FP64 holds (f32 cos / sin otherwise); the rotation is f32 without FMA:
//   x0' = x0 * c - x1 * s;  x1' = x0 * s + x1 * c.

#include "ops_common.clh"

// One work-item per (pair i, token): computes cos / sin once and rotates that pair in every head.
// global size: (rope_dim / 2, num_tokens)
__kernel void rope(
    __global float* x, const long x_off,                  // [num_tokens, token_stride]
    __global const int* positions, const long pos_off,    // [num_tokens]
    __global const float* inv_freq, const long freq_off,  // [rope_dim / 2]
    const long token_stride, const int num_heads, const int head_size, const int rope_dim,
    const int neox) {
  const int i = get_global_id(0);
  const long t = get_global_id(1);
  const float theta = (float)positions[pos_off + t] * inv_freq[freq_off + i];
#ifdef USE_FP64
  const float c = (float)cos((double)theta);
  const float s = (float)sin((double)theta);
#else
  const float c = cos(theta);
  const float s = sin(theta);
#endif
  const int d0 = neox ? i : 2 * i;
  const int d1 = neox ? i + rope_dim / 2 : 2 * i + 1;
  __global float* row = x + x_off + t * token_stride;
  for (int h = 0; h < num_heads; ++h) {
    __global float* head = row + (long)h * head_size;
    const float x0 = head[d0];
    const float x1 = head[d1];
    head[d0] = x0 * c - x1 * s;
    head[d1] = x0 * s + x1 * c;
  }
}
