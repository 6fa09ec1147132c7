// KV-cache kernels. Specialised with one of -DCACHE_F32, -DCACHE_F16, -DCACHE_BF16.
//
// A cache "part" (K or V of one layer, or one half of an MLA latent row) is addressed as in
// cpp/kv/layout.h: element (block, slot, head, dim) sits at
//   offset + block * stride_block + slot * stride_slot + head * stride_head + dim.

#include "cache_dtype.clh"

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

// K and V of the new tokens in one launch (get_global_id(2): 0 = K, 1 = V), each part from its own
// rows: token t's heads of a part start at src + src_off + t * src_stride, so the k and v columns of
// a fused [t, q + k + v] projection are read where they lie. A part with 0 heads writes nothing.
// global size: (LANES * max(k_heads, v_heads), num_tokens, 2), local size: (LANES, 1, 1)
__kernel void kv_cache_write_kv(
    __global const float* k_src, const long k_src_off, const long k_src_stride,
    __global const float* v_src, const long v_src_off, const long v_src_stride,
    __global const int* slot_mapping, __global cache_t* cache, const int block_size,
    const long k_offset, const long k_stride_block, const long k_stride_slot,
    const long k_stride_head, const int k_heads, const int k_width,
    const long v_offset, const long v_stride_block, const long v_stride_slot,
    const long v_stride_head, const int v_heads, const int v_width) {
  const int lane = get_local_id(0);
  const int head = get_group_id(0);
  const int token = get_global_id(1);
  const int is_v = get_global_id(2);
  const int slot = slot_mapping[token];
  const int heads = is_v ? v_heads : k_heads;
  if (slot < 0 || head >= heads) return;
  const long block = slot / block_size;
  const long pos = slot - block * block_size;
  const int width = is_v ? v_width : k_width;
  __global cache_t* dst = cache + (is_v ? v_offset + block * v_stride_block + pos * v_stride_slot + head * v_stride_head
                                        : k_offset + block * k_stride_block + pos * k_stride_slot + head * k_stride_head);
  __global const float* row = is_v ? v_src + v_src_off + token * v_src_stride + (long)head * width
                                   : k_src + k_src_off + token * k_src_stride + (long)head * width;
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
