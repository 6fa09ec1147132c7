// Rotary position embedding, in place, on the first rope_dim dims of every head:
//   NORM (neox == 0) rotates adjacent pairs (x[2i], x[2i + 1]);
//   NEOX (neox == 1) rotates (x[i], x[i + rope_dim / 2]);
// for i < rope_dim / 2, by theta = (float)pos * inv_freq[i] (an f32 product, as Hugging Face
// computes it). inv_freq [rope_dim / 2] comes from the host (freq_scale * base^(-2i/rope_dim)
// in double, rounded to f32). cos and sin are evaluated in double and rounded to f32 where
// USE_FP64 holds (f32 cos / sin otherwise); the rotation is f32 without FMA:
//   x0' = x0 * c - x1 * s;  x1' = x0 * s + x1 * c.
// A work-item takes 16 consecutive pairs of one token (cos / sin once, then every head, as
// 16-lane vectors); when rope_dim / 2 is not a multiple of 16 the last chunk goes pair by pair.

#include "ops_common.clh"

#ifdef USE_FP64
#define COS16(t) convert_float16(cos(convert_double16(t)))
#define SIN16(t) convert_float16(sin(convert_double16(t)))
#define COS1(t) ((float)cos((double)(t)))
#define SIN1(t) ((float)sin((double)(t)))
#else
#define COS16(t) cos(t)
#define SIN16(t) sin(t)
#define COS1(t) cos(t)
#define SIN1(t) sin(t)
#endif

// Rotates 16 NEOX pairs (p[0..16), p[nhalf..nhalf + 16)).
inline void rotate_neox16(__global float* p, int nhalf, float16 c, float16 s) {
  const float16 x0 = vload16(0, p);
  const float16 x1 = vload16(0, p + nhalf);
  vstore16(x0 * c - x1 * s, 0, p);
  vstore16(x0 * s + x1 * c, 0, p + nhalf);
}

// Rotates 16 adjacent pairs p[0..32).
inline void rotate_norm16(__global float* p, float16 c, float16 s) {
  const float16 a = vload16(0, p);
  const float16 b = vload16(1, p);
  const float16 x0 = (float16)(a.even, b.even);
  const float16 x1 = (float16)(a.odd, b.odd);
  const float16 y0 = x0 * c - x1 * s;
  const float16 y1 = x0 * s + x1 * c;
  const uint16 lo = (uint16)(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  vstore16(shuffle2(y0, y1, lo), 0, p);
  vstore16(shuffle2(y0, y1, lo + (uint16)8), 1, p);
}

// global size: (cdiv(rope_dim / 2, 16), num_tokens)
__kernel void rope(
    __global float* x, const long x_off,                  // [num_tokens, token_stride]
    __global const int* positions, const long pos_off,    // [num_tokens]
    __global const float* inv_freq, const long freq_off,  // [rope_dim / 2]
    const long token_stride, const int num_heads, const int head_size, const int rope_dim,
    const int neox) {
  const int i0 = get_global_id(0) * 16;
  const long t = get_global_id(1);
  const int nhalf = rope_dim / 2;
  const float pos = (float)positions[pos_off + t];
  __global float* row = x + x_off + t * token_stride;
  if (i0 + 16 <= nhalf) {
    const float16 theta = pos * vload16(0, inv_freq + freq_off + i0);
    const float16 c = COS16(theta);
    const float16 s = SIN16(theta);
    for (int h = 0; h < num_heads; ++h) {
      __global float* head = row + (long)h * head_size;
      if (neox) {
        rotate_neox16(head + i0, nhalf, c, s);
      } else {
        rotate_norm16(head + 2 * i0, c, s);
      }
    }
    return;
  }
  for (int i = i0; i < nhalf; ++i) {
    const float theta = pos * inv_freq[freq_off + i];
    const float c = COS1(theta);
    const float s = SIN1(theta);
    const int d0 = neox ? i : 2 * i;
    const int d1 = neox ? i + nhalf : 2 * i + 1;
    for (int h = 0; h < num_heads; ++h) {
      __global float* head = row + (long)h * head_size;
      const float x0 = head[d0];
      const float x1 = head[d1];
      head[d0] = x0 * c - x1 * s;
      head[d1] = x0 * s + x1 * c;
    }
  }
}
