// General paged attention over a ragged batch (prefill chunks, decodes and verify steps mixed).
// Specialised with one of -DCACHE_F32, -DCACHE_F16, -DCACHE_BF16 and
//   LOCAL     work-items per work-group (one work-group per (query token, q head))
//   KPW       keys per work-item per tile (a tile is TILE = LOCAL * KPW keys)
//   VEC       4 or 8: float lanes per vector load (dot products and output chunks)
//   ACC       output vectors per work-item: >= cdiv(head_size_v, VEC * LOCAL) (the host buckets it)
//   HEAD_MAX  the largest head_size (size of the q row in local memory)
//
// A cache part (K or V) is addressed as in cpp/kv/layout.h: element (block, slot, head, dim)
// sits at offset + block * stride_block + slot * stride_slot + head * stride_head + dim, so
// any attention layout works. Query token t of request r sits at position
// p = seq_len - query_len + (t - query_start_loc[r]) and sees keys [lo, hi]:
//   hi = p if causal else seq_len - 1
//   lo = max(0, p - sliding_window + 1 with a window, floor(p / chunk) * chunk with a chunk)
// (chunked local attention normally arrives as virtual batches, where lo = 0 anyway).
//
// Keys are processed in tiles of TILE keys starting at lo: the work-items score the tile's keys
// (dot product, scale, softcap) into local memory; every work-item takes the tile's maximum
// and rescales the running (m, l, acc) online (sinks start m at the sink's logit, l at 1); then
// work-items split the output dims (VEC-wide chunks) and add the tile's values in key order.
// Every sum runs in an order fixed by the token's own [lo, hi] (and the -D shape), so a token's
// output is bitwise the same whatever else is in the batch.

#include "cache_dtype.clh"

#ifndef LOCAL
#define LOCAL 64
#endif
#ifndef VEC
#define VEC 4
#endif
#ifndef ACC
#define ACC 1
#endif
#ifndef KPW
#define KPW 1
#endif
#define TILE (LOCAL * KPW)
#ifndef HEAD_MAX
#define HEAD_MAX 512
#endif

#if VEC == 4
typedef float4 floatv;
#define VLOAD vload4
#define VSTORE vstore4
#elif VEC == 8
typedef float8 floatv;
#define VLOAD vload8
#define VSTORE vstore8
#else
#error "VEC must be 4 or 8"
#endif

// VEC consecutive cache elements starting at element i, as floats.
inline floatv load_vec(__global const cache_t* p, long i) {
#if VEC == 8
  return load8(p + i);
#else
  return load4(p + i);
#endif
}

// The first n < VEC elements starting at i; the rest 0.
inline floatv load_tail(__global const cache_t* p, long i, int n) {
  float tmp[VEC];
  for (int k = 0; k < VEC; ++k) tmp[k] = k < n ? load_elem(p, i + k) : 0.0f;
  return VLOAD(0, tmp);
}

// Horizontal sum in a fixed order.
inline float hsum(floatv a) {
#if VEC == 8
  const float4 b = a.lo + a.hi;
#else
  const float4 b = a;
#endif
  const float2 c = b.lo + b.hi;
  return c.x + c.y;
}

// q . k over n elements (q in local memory, k a cache row).
inline float dot_row(__local const float* q, __global const cache_t* k, int n) {
  floatv a = 0.0f;
  int d = 0;
  for (; d + VEC <= n; d += VEC) a = mad(VLOAD(0, q + d), load_vec(k, d), a);
  float s = hsum(a);
  for (; d < n; ++d) s = mad(q[d], load_elem(k, d), s);
  return s;
}

// One work-group of LOCAL work-items per (q head, query token).
// global size: (LOCAL * num_q_heads, num_tokens), local size: (LOCAL, 1)
__kernel __attribute__((reqd_work_group_size(LOCAL, 1, 1))) void paged_attention(
    __global const float* query,          // [num_tokens, num_q_heads, head_size]
    __global float* output,               // [num_tokens, num_q_heads, head_size_v]
    __global const cache_t* cache,        // the layer's raw tensor, in cache_t elements
    __global const int* query_start_loc,  // [num_reqs + 1]
    __global const int* seq_lens,         // [num_reqs]
    __global const int* block_table,      // [num_reqs, max_blocks_per_req]
    __global const int* token_request,    // [num_tokens] request of each token
    __global const float* sinks,          // [num_q_heads] when has_sinks (else never read)
    const long k_offset, const long k_stride_block, const long k_stride_slot,
    const long k_stride_head, const long v_offset, const long v_stride_block,
    const long v_stride_slot, const long v_stride_head, const int block_size,
    const int max_blocks_per_req, const int num_q_heads, const int num_kv_heads,
    const int head_size, const int head_size_v, const float scale, const float softcap,
    const int sliding_window, const int chunk_size, const int causal, const int has_sinks) {
  __local float q_row[HEAD_MAX];
  __local float scores[TILE];  // then the tile's probabilities
  __local long v_base[TILE];   // element index of each key's V row

  const int lid = get_local_id(0);
  const int h = get_group_id(0);
  const int t = get_group_id(1);
  const int r = token_request[t];
  const int seq_len = seq_lens[r];
  const int q_start = query_start_loc[r];
  const int pos = seq_len - (query_start_loc[r + 1] - q_start) + (t - q_start);
  const int hi = causal ? pos : seq_len - 1;
  int lo = 0;
  if (sliding_window > 0) lo = max(lo, pos - sliding_window + 1);
  if (chunk_size > 0) lo = max(lo, pos / chunk_size * chunk_size);
  const int kvh = h / (num_q_heads / num_kv_heads);
  __global const int* table = block_table + (long)r * max_blocks_per_req;

  __global const float* q = query + ((long)t * num_q_heads + h) * head_size;
  for (int d = lid; d < head_size; d += LOCAL) q_row[d] = q[d];
  barrier(CLK_LOCAL_MEM_FENCE);

  float m = has_sinks ? sinks[h] : -INFINITY;  // running max (the sink's logit counts)
  float l = has_sinks ? 1.0f : 0.0f;           // running denominator: exp(sink - m) so far
  floatv acc[ACC];
#pragma unroll
  for (int c = 0; c < ACC; ++c) acc[c] = 0.0f;

  for (int start = lo; start <= hi; start += TILE) {
    // Scores of the tile's keys: work-item lid takes keys start + lid + LOCAL * k.
    for (int i = lid; i < TILE; i += LOCAL) {
      const int j = start + i;
      float s = -INFINITY;
      if (j <= hi) {
        const int col = j / block_size;
        const long block = table[col];
        const long slot = j - col * block_size;
        const long k_base =
            k_offset + block * k_stride_block + slot * k_stride_slot + kvh * k_stride_head;
        s = scale * dot_row(q_row, cache + k_base, head_size);
        if (softcap > 0.0f) s = softcap * tanh(s / softcap);
        v_base[i] = v_offset + block * v_stride_block + slot * v_stride_slot + kvh * v_stride_head;
      }
      scores[i] = s;
    }
    barrier(CLK_LOCAL_MEM_FENCE);

    // Online softmax update (every work-item computes the same m, alpha, l).
    float tile_max = scores[0];
    for (int i = 1; i < TILE; ++i) tile_max = fmax(tile_max, scores[i]);
    const float m_new = fmax(m, tile_max);  // finite: the tile has at least one key
    const float alpha = exp(m - m_new);
    m = m_new;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int i = lid; i < TILE; i += LOCAL) scores[i] = exp(scores[i] - m_new);  // 0 past hi
    barrier(CLK_LOCAL_MEM_FENCE);

    // Values, in key order: work-item lid owns output chunks lid + LOCAL * c (VEC floats each).
    const int n = min(TILE, hi - start + 1);
    float psum = 0.0f;
    for (int i = 0; i < n; ++i) psum += scores[i];
    l = l * alpha + psum;
#pragma unroll
    for (int c = 0; c < ACC; ++c) {
      const int d0 = VEC * (lid + c * LOCAL);
      floatv a = acc[c] * alpha;
      if (d0 + VEC <= head_size_v) {
        for (int i = 0; i < n; ++i) a = mad((floatv)scores[i], load_vec(cache + v_base[i], d0), a);
      } else if (d0 < head_size_v) {
        for (int i = 0; i < n; ++i) {
          a = mad((floatv)scores[i], load_tail(cache + v_base[i], d0, head_size_v - d0), a);
        }
      }
      acc[c] = a;
    }
    barrier(CLK_LOCAL_MEM_FENCE);  // scores and v_base are rewritten by the next tile
  }

  __global float* out = output + ((long)t * num_q_heads + h) * head_size_v;
  const float inv = hi >= lo ? 1.0f / l : 0.0f;  // no visible key: zeros
#pragma unroll
  for (int c = 0; c < ACC; ++c) {
    const int d0 = VEC * (lid + c * LOCAL);
    const floatv o = acc[c] * inv;
    if (d0 + VEC <= head_size_v) {
      VSTORE(o, 0, out + d0);
    } else if (d0 < head_size_v) {
      float tmp[VEC];
      VSTORE(o, 0, tmp);
      for (int k = 0; k < head_size_v - d0; ++k) out[d0 + k] = tmp[k];
    }
  }
}
