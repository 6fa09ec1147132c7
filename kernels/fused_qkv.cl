// The epilogue of a fused q | k | v projection in one launch (decode and verify steps): QKV bias,
// RoPE on q and k, q written out for attention, k and v written into the KV cache through the
// slot mapping. It replaces add_bias + rope + split_columns + kv_cache_write_kv and gives the same
// bits: the bias is added in f32 first (as add_bias), the rotation is the rope kernel's (f32
// theta = pos * inv_freq, cos / sin in double where USE_FP64 holds, products not contracted), the
// cache stores round like kv_cache_write_kv's.
// Specialised with -DCACHE_F32 / -DCACHE_F16 / -DCACHE_BF16 and the forward-op options.
//
// Shape: every head (q, k and v) has head_size = rope_dim = 2 * nhalf elements. A work-item takes
// 16 rotation pairs of one token (NEOX: dims [i0, i0 + 16) and [nhalf + i0, ...); NORM: the 32
// dims from 2 * i0), computes their cos / sin once, and applies them to every q and k head; the
// same dims of every v head are copied. The last chunk of a head whose nhalf is not a multiple of
// 16 goes pair by pair, as in the rope kernel.
// global size: (cdiv(nhalf, 16), num_tokens)

#include "ops_common.clh"
#include "cache_dtype.clh"

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

// 16 elements of a head from p (+ the bias at b when has_bias).
inline float16 load_biased16(__global const float* p, __global const float* b, int has_bias) {
  float16 x = vload16(0, p);
  if (has_bias) x = x + vload16(0, b);
  return x;
}

inline float load_biased(__global const float* p, __global const float* b, int has_bias, int i) {
  return has_bias ? p[i] + b[i] : p[i];
}

inline void store_cache16(__global cache_t* dst, int d, float16 x) {
  float v[16];
  vstore16(x, 0, v);
  for (int j = 0; j < 16; ++j) store_elem(dst, d + j, v[j]);
}

__kernel void qkv_bias_rope_kv(
    __global const float* x, const long x_off, const long x_stride,   // [t, x_stride]: q | k | v
    __global const float* bias, const long bias_off, const int has_bias,  // [q + k + v]
    __global const int* positions, const long pos_off,                  // [t]
    __global const float* inv_freq, const long freq_off,                // [nhalf]
    const int neox, const int rope,                                     // rope 0: no rotation
    __global float* q_out, const long q_off, const long q_stride,       // [t, q_stride]
    const int q_heads, const int kv_heads, const int head_size,
    __global const int* slot_mapping, __global cache_t* cache, const int block_size,
    const long k_offset, const long k_stride_block, const long k_stride_slot, const long k_stride_head,
    const long v_offset, const long v_stride_block, const long v_stride_slot, const long v_stride_head) {
  const int i0 = get_global_id(0) * 16;
  const long t = get_global_id(1);
  const int nhalf = head_size / 2;
  if (i0 >= nhalf) return;
  __global const float* row = x + x_off + t * x_stride;
  __global const float* brow = bias + bias_off;
  __global float* qrow = q_out + q_off + t * q_stride;
  const int slot = slot_mapping[t];
  const long block = slot >= 0 ? slot / block_size : 0;
  const long pos_in_block = slot - block * block_size;
  __global cache_t* kdst = cache + k_offset + block * k_stride_block + pos_in_block * k_stride_slot;
  __global cache_t* vdst = cache + v_offset + block * v_stride_block + pos_in_block * v_stride_slot;
  const int nq = q_heads * head_size, nk = kv_heads * head_size;
  const float pos = (float)positions[pos_off + t];

  if (i0 + 16 <= nhalf) {
    float16 c = (float16)(1.0f), s = (float16)(0.0f);
    if (rope) {
      const float16 theta = pos * vload16(0, inv_freq + freq_off + i0);
      c = COS16(theta);
      s = SIN16(theta);
    }
    // the two 16-element pieces of this chunk in a head: NEOX halves, or NORM's 32 dims
    const int da = neox ? i0 : 2 * i0, db = neox ? nhalf + i0 : 2 * i0 + 16;
    for (int h = 0; h < q_heads + 2 * kv_heads; ++h) {
      const int base = h * head_size;  // in the fused row
      const float16 a = load_biased16(row + base + da, brow + base + da, has_bias);
      const float16 b = load_biased16(row + base + db, brow + base + db, has_bias);
      float16 ya = a, yb = b;
      if (h < q_heads + kv_heads && rope) {
        if (neox) {
          ya = a * c - b * s;
          yb = a * s + b * c;
        } else {
          const float16 x0 = (float16)(a.even, b.even);
          const float16 x1 = (float16)(a.odd, b.odd);
          const float16 y0 = x0 * c - x1 * s;
          const float16 y1 = x0 * s + x1 * c;
          const uint16 lo = (uint16)(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
          ya = shuffle2(y0, y1, lo);
          yb = shuffle2(y0, y1, lo + (uint16)8);
        }
      }
      if (h < q_heads) {
        vstore16(ya, 0, qrow + base + da);
        vstore16(yb, 0, qrow + base + db);
      } else if (slot >= 0) {
        const int is_v = h >= q_heads + kv_heads;
        const int head = h - q_heads - (is_v ? kv_heads : 0);
        __global cache_t* dst = is_v ? vdst + head * v_stride_head : kdst + head * k_stride_head;
        store_cache16(dst, da, ya);
        store_cache16(dst, db, yb);
      }
    }
    return;
  }
  for (int i = i0; i < nhalf; ++i) {  // the last chunk, pair by pair
    float c = 1.0f, s = 0.0f;
    if (rope) {
      const float theta = pos * inv_freq[freq_off + i];
      c = COS1(theta);
      s = SIN1(theta);
    }
    const int d0 = neox ? i : 2 * i;
    const int d1 = neox ? i + nhalf : 2 * i + 1;
    for (int h = 0; h < q_heads + 2 * kv_heads; ++h) {
      const int base = h * head_size;
      const float x0 = load_biased(row + base, brow + base, has_bias, d0);
      const float x1 = load_biased(row + base, brow + base, has_bias, d1);
      float y0 = x0, y1 = x1;
      if (h < q_heads + kv_heads && rope) {
        y0 = x0 * c - x1 * s;
        y1 = x0 * s + x1 * c;
      }
      if (h < q_heads) {
        qrow[base + d0] = y0;
        qrow[base + d1] = y1;
      } else if (slot >= 0) {
        const int is_v = h >= q_heads + kv_heads;
        const int head = h - q_heads - (is_v ? kv_heads : 0);
        __global cache_t* dst = is_v ? vdst + head * v_stride_head : kdst + head * k_stride_head;
        store_elem(dst, d0, y0);
        store_elem(dst, d1, y1);
      }
    }
  }
}
