// KV-cache kernels. Specialised with one of -DCACHE_F32, -DCACHE_F16, -DCACHE_BF16.
//
// A cache "part" (K or V of one layer, or one half of an MLA latent row) is addressed as in
// cpp/kv/layout.h: element (block, slot, head, dim) sits at
//   offset + block * stride_block + slot * stride_slot + head * stride_head + dim.

#if defined(CACHE_F32)
typedef float cache_t;
inline void store_elem(__global cache_t* p, long i, float x) { p[i] = x; }
inline float load_elem(__global const cache_t* p, long i) { return p[i]; }
#elif defined(CACHE_F16)
// f16 stored as ushort bits, converted with integer arithmetic (round to nearest even): on
// PoCL's CPU device this vectorises, where vstore_half_rte / vload_half do not.
typedef ushort cache_t;
inline void store_elem(__global cache_t* p, long i, float x) {
  const uint u = as_uint(x);
  const uint sign = (u >> 16) & 0x8000u;
  const uint a = u & 0x7fffffffu;
  uint h;
  if (a >= 0x7f800000u) {
    h = a > 0x7f800000u ? 0x7e00u : 0x7c00u;  // NaN, inf
  } else if (a >= 0x477ff000u) {
    h = 0x7c00u;  // overflow -> inf
  } else if (a < 0x38800000u) {
    h = as_uint(as_float(a) + 0.5f) - 0x3f000000u;  // subnormal: 0.5f has a 2^-24 ulp
  } else {
    h = (a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13;
  }
  p[i] = (ushort)(sign | h);
}
inline float load_elem(__global const cache_t* p, long i) {
  const uint h = p[i];
  const uint sign = (h & 0x8000u) << 16;
  const uint e = (h >> 10) & 0x1fu;
  const uint m = h & 0x3ffu;
  if (e == 0) return as_float(sign | as_uint((float)m * 5.9604645e-08f));  // m * 2^-24
  if (e == 31) return as_float(sign | 0x7f800000u | (m << 13));
  return as_float(sign | ((e + 112u) << 23) | (m << 13));
}
#elif defined(CACHE_BF16)
typedef ushort cache_t;
inline void store_elem(__global cache_t* p, long i, float x) {
  uint u = as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) {
    p[i] = (ushort)((u >> 16) | 0x40u);  // quiet NaN
  } else {
    p[i] = (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);  // round to nearest even
  }
}
inline float load_elem(__global const cache_t* p, long i) { return as_float(((uint)p[i]) << 16); }
#else
#error "define one of CACHE_F32, CACHE_F16, CACHE_BF16"
#endif

#ifndef LANES
#define LANES 16
#endif

// Writes new rows into one cache part through the slot mapping; slot -1 is padding (skipped).
// One work-group of LANES work-items per (head, token); each work-item strides over the row.
// global size: (LANES * num_heads, num_tokens), local size: (LANES, 1)
__kernel void kv_cache_write(
    __global const float* src,          // [num_tokens, num_heads, width], token stride src_stride
    __global const int* slot_mapping,   // [num_tokens]: block_id * block_size + offset, or -1
    __global cache_t* cache,            // the layer's raw tensor, in cache_t elements
    const long offset, const long stride_block, const long stride_slot, const long stride_head,
    const int block_size, const int num_heads, const int width, const long src_stride) {
  const int lane = get_local_id(0);
  const int head = get_group_id(0);
  const int token = get_global_id(1);
  const int slot = slot_mapping[token];
  if (slot < 0) return;
  const long block = slot / block_size;
  const long pos = slot - block * block_size;
  __global cache_t* dst = cache + offset + block * stride_block + pos * stride_slot + head * stride_head;
  __global const float* row = src + token * src_stride + (long)head * width;
  for (int dim = lane; dim < width; dim += LANES) store_elem(dst, dim, row[dim]);
}

// Reads rows back through the slot mapping (the inverse of kv_cache_write); slot -1 gives 0.
// global size: (LANES * num_heads, num_tokens), local size: (LANES, 1)
__kernel void kv_cache_gather(
    __global const cache_t* cache,      // the layer's raw tensor
    __global const int* slot_mapping,   // [num_tokens]
    __global float* dst,                // [num_tokens, num_heads, width]
    const long offset, const long stride_block, const long stride_slot, const long stride_head,
    const int block_size, const int num_heads, const int width) {
  const int lane = get_local_id(0);
  const int head = get_group_id(0);
  const int token = get_global_id(1);
  const int slot = slot_mapping[token];
  __global float* out = dst + ((long)token * num_heads + head) * width;
  if (slot < 0) {
    for (int dim = lane; dim < width; dim += LANES) out[dim] = 0.0f;
    return;
  }
  const long block = slot / block_size;
  const long pos = slot - block * block_size;
  __global const cache_t* src = cache + offset + block * stride_block + pos * stride_slot + head * stride_head;
  for (int dim = lane; dim < width; dim += LANES) out[dim] = load_elem(src, dim);
}
