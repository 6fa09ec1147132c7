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
typedef half cache_t;
inline void store_elem(__global cache_t* p, long i, float x) { vstore_half_rte(x, i, p); }
inline float load_elem(__global const cache_t* p, long i) { return vload_half(i, p); }
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

// Writes new rows into one cache part through the slot mapping; slot -1 is padding (skipped).
// global size: (num_heads * width, num_tokens)
__kernel void kv_cache_write(
    __global const float* src,          // [num_tokens, num_heads, width], token stride src_stride
    __global const int* slot_mapping,   // [num_tokens]: block_id * block_size + offset, or -1
    __global cache_t* cache,            // the layer's raw tensor, in cache_t elements
    const long offset, const long stride_block, const long stride_slot, const long stride_head,
    const int block_size, const int num_heads, const int width, const long src_stride) {
  const int hd = get_global_id(0);
  const int token = get_global_id(1);
  if (hd >= num_heads * width) return;
  const int slot = slot_mapping[token];
  if (slot < 0) return;
  const int head = hd / width;
  const int dim = hd - head * width;
  const long block = slot / block_size;
  const long pos = slot - block * block_size;
  const long idx = offset + block * stride_block + pos * stride_slot + head * stride_head + dim;
  store_elem(cache, idx, src[token * src_stride + hd]);
}

// Reads rows back through the slot mapping (the inverse of kv_cache_write); slot -1 gives 0.
// global size: (num_heads * width, num_tokens)
__kernel void kv_cache_gather(
    __global const cache_t* cache,      // the layer's raw tensor
    __global const int* slot_mapping,   // [num_tokens]
    __global float* dst,                // [num_tokens, num_heads, width]
    const long offset, const long stride_block, const long stride_slot, const long stride_head,
    const int block_size, const int num_heads, const int width) {
  const int hd = get_global_id(0);
  const int token = get_global_id(1);
  if (hd >= num_heads * width) return;
  const int slot = slot_mapping[token];
  float x = 0.0f;
  if (slot >= 0) {
    const int head = hd / width;
    const int dim = hd - head * width;
    const long block = slot / block_size;
    const long pos = slot - block * block_size;
    x = load_elem(cache, offset + block * stride_block + pos * stride_slot + head * stride_head + dim);
  }
  dst[(long)token * num_heads * width + hd] = x;
}
