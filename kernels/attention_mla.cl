// MLA latent attention (absorbed form) on the mla_latent cache layout.
//
// Every cached token has one latent row of LORA + ROPE elements (c_kv, then k_rope) shared by
// all q heads. For query token t at position p and q head h:
//   s_j = scale * q[t, h, :] . row_j              (the whole row, LORA + ROPE elements)
//   out[t, h, :] = sum_j softmax(s)_j * row_j[0:LORA]
// with keys j in [0, p] (causal) or [0, seq_len - 1] (non-causal).
//
// Split-KV: the keys of a token are cut into splits of SPLIT keys (a fixed size, so the
// splits of a token depend on its own context length only). mla_attention_split computes, per
// (split, head group, token), the split's max m, sum l and unnormalised sum acc for HPG heads
// at once, reading each latent row once for all of them; mla_attention_merge combines a
// token's splits in split order. Nothing depends on the rest of the batch: a token's output is
// bitwise the same alone or inside any ragged batch.
//
// Specialised with: one of CACHE_F32 / CACHE_F16 / CACHE_BF16, LORA, ROPE, HPG (heads per
// work-group), SPLIT (keys per split). One work-item per work-group (local size 1): on PoCL's
// CPU device the explicit float16 code maps onto AVX-512 registers.

#pragma OPENCL FP_CONTRACT OFF

#include "cache_dtype.clh"

#if !defined(LORA) || !defined(ROPE) || !defined(HPG) || !defined(SPLIT)
#error "define LORA, ROPE, HPG and SPLIT"
#endif

#define ROW (LORA + ROPE)
#define ROW16 (ROW / 16)    // whole float16 chunks of a row
#define LORA16 (LORA / 16)  // whole float16 chunks of the c_kv part

inline float hsum16(float16 v) {
  const float8 a = v.lo + v.hi;
  const float4 b = a.lo + a.hi;
  const float2 c = b.lo + b.hi;
  return c.x + c.y;
}

// Keys visible to token t: [0, *num_keys). Returns the request of t.
inline int visible_keys(int t, __global const int* query_start_loc, __global const int* seq_lens,
                        __global const int* token_request, int causal, int* num_keys) {
  const int r = token_request[t];
  const int q0 = query_start_loc[r];
  const int seq = seq_lens[r];
  const int pos = seq - (query_start_loc[r + 1] - q0) + (t - q0);
  *num_keys = causal ? pos + 1 : seq;
  return r;
}

// One split of one token for HPG heads.
// global size: (max_splits, num_q_heads / HPG, num_tokens_in_launch), local size: (1, 1, 1)
__kernel void mla_attention_split(
    __global const float* query,          // [num_tokens, num_q_heads, ROW]
    __global const cache_t* cache,        // the layer's raw tensor (mla_latent)
    __global const int* block_table,      // [num_reqs, max_blocks_per_req]
    __global const int* query_start_loc,  // [num_reqs + 1]
    __global const int* seq_lens,         // [num_reqs]
    __global const int* token_request,    // [num_tokens]
    __global float* part_acc,             // [launch_tokens, max_splits, num_q_heads, LORA]
    __global float* part_ml,              // [launch_tokens, max_splits, num_q_heads, 2]: m, l
    const int token_offset, const int max_splits, const int num_q_heads,
    const int max_blocks_per_req, const int block_size,
    const long row_offset, const long stride_block, const long stride_slot,
    const float scale, const float softcap, const int causal) {
  __local long rows[SPLIT];      // element offset of each key's latent row
  __local float p[SPLIT * HPG];  // [key][head]: scores, then exp(score - m)
  const int split = get_global_id(0);
  const int head0 = get_global_id(1) * HPG;
  const int lt = get_global_id(2);
  const int t = token_offset + lt;
  int num_keys;
  const int r = visible_keys(t, query_start_loc, seq_lens, token_request, causal, &num_keys);
  const int key0 = split * SPLIT;
  if (key0 >= num_keys) return;
  const int count = min(SPLIT, num_keys - key0);

  __global const float* q = query + ((long)t * num_q_heads + head0) * ROW;
  __global const int* table = block_table + (long)r * max_blocks_per_req;

  // Scores: each row is read once for all HPG heads.
  float m[HPG];
#pragma unroll
  for (int h = 0; h < HPG; ++h) m[h] = -INFINITY;
  for (int j = 0; j < count; ++j) {
    const int key = key0 + j;
    const long row =
        row_offset + table[key / block_size] * stride_block + (key % block_size) * stride_slot;
    rows[j] = row;
    __global const cache_t* x = cache + row;
    float16 acc[HPG];
#pragma unroll
    for (int h = 0; h < HPG; ++h) acc[h] = (float16)(0.0f);
    for (int c = 0; c < ROW16; ++c) {
      const float16 xv = load16(x + c * 16);
#pragma unroll
      for (int h = 0; h < HPG; ++h) acc[h] = fma(vload16(c, q + h * ROW), xv, acc[h]);
    }
#pragma unroll
    for (int h = 0; h < HPG; ++h) {
      float s = hsum16(acc[h]);
      for (int i = ROW16 * 16; i < ROW; ++i) s = fma(q[h * ROW + i], load_elem(x, i), s);
      s *= scale;
      if (softcap > 0.0f) s = softcap * tanh(s / softcap);
      p[j * HPG + h] = s;
      m[h] = fmax(m[h], s);
    }
  }

  // Softmax numerators and their sums, in key order.
  float l[HPG];
#pragma unroll
  for (int h = 0; h < HPG; ++h) l[h] = 0.0f;
  for (int j = 0; j < count; ++j) {
#pragma unroll
    for (int h = 0; h < HPG; ++h) {
      const float e = exp(p[j * HPG + h] - m[h]);
      p[j * HPG + h] = e;
      l[h] += e;
    }
  }

  const long part = ((long)lt * max_splits + split) * num_q_heads + head0;
  __global float* out = part_acc + part * LORA;
#pragma unroll
  for (int h = 0; h < HPG; ++h) vstore2((float2)(m[h], l[h]), part + h, part_ml);

  // Weighted sum of the c_kv parts, 16 dims at a time for all heads, keys in order.
  for (int c = 0; c < LORA16; ++c) {
    float16 acc[HPG];
#pragma unroll
    for (int h = 0; h < HPG; ++h) acc[h] = (float16)(0.0f);
    for (int j = 0; j < count; ++j) {
      const float16 xv = load16(cache + rows[j] + c * 16);
#pragma unroll
      for (int h = 0; h < HPG; ++h) acc[h] = fma((float16)(p[j * HPG + h]), xv, acc[h]);
    }
#pragma unroll
    for (int h = 0; h < HPG; ++h) vstore16(acc[h], c, out + h * LORA);
  }
  for (int i = LORA16 * 16; i < LORA; ++i) {
    float acc[HPG];
#pragma unroll
    for (int h = 0; h < HPG; ++h) acc[h] = 0.0f;
    for (int j = 0; j < count; ++j) {
      const float x = load_elem(cache + rows[j], i);
#pragma unroll
      for (int h = 0; h < HPG; ++h) acc[h] = fma(p[j * HPG + h], x, acc[h]);
    }
#pragma unroll
    for (int h = 0; h < HPG; ++h) out[h * LORA + i] = acc[h];
  }
}

// Combines a token's splits in split order (and the head's sink logit, when has_sinks).
// global size: (num_q_heads, num_tokens_in_launch), local size: (1, 1)
__kernel void mla_attention_merge(
    __global const float* part_acc,       // [launch_tokens, max_splits, num_q_heads, LORA]
    __global const float* part_ml,        // [launch_tokens, max_splits, num_q_heads, 2]
    __global const int* query_start_loc,  // [num_reqs + 1]
    __global const int* seq_lens,         // [num_reqs]
    __global const int* token_request,    // [num_tokens]
    __global const float* sinks,          // [num_q_heads] when has_sinks
    __global float* output,               // [num_tokens, num_q_heads, LORA]
    const int token_offset, const int max_splits, const int num_q_heads, const int causal,
    const int has_sinks) {
  const int h = get_global_id(0);
  const int lt = get_global_id(1);
  const int t = token_offset + lt;
  int num_keys;
  visible_keys(t, query_start_loc, seq_lens, token_request, causal, &num_keys);
  const int num_splits = num_keys > 0 ? (num_keys + SPLIT - 1) / SPLIT : 0;
  __global float* out = output + ((long)t * num_q_heads + h) * LORA;
  const long part0 = (long)lt * max_splits * num_q_heads + h;  // split s: part0 + s * num_q_heads

  float m = has_sinks ? sinks[h] : -INFINITY;
  for (int s = 0; s < num_splits; ++s) m = fmax(m, part_ml[2 * (part0 + s * num_q_heads)]);
  float denom = has_sinks ? exp(sinks[h] - m) : 0.0f;
  for (int s = 0; s < num_splits; ++s) {
    const float2 ml = vload2(part0 + s * num_q_heads, part_ml);
    denom = fma(exp(ml.x - m), ml.y, denom);
  }
  const float inv = num_splits > 0 ? 1.0f / denom : 0.0f;

  for (int c = 0; c < LORA16; ++c) {
    float16 acc = (float16)(0.0f);
    for (int s = 0; s < num_splits; ++s) {
      const long part = part0 + s * num_q_heads;
      acc = fma((float16)(exp(part_ml[2 * part] - m)), vload16(c, part_acc + part * LORA), acc);
    }
    vstore16(acc * inv, c, out);
  }
  for (int i = LORA16 * 16; i < LORA; ++i) {
    float acc = 0.0f;
    for (int s = 0; s < num_splits; ++s) {
      const long part = part0 + s * num_q_heads;
      acc = fma(exp(part_ml[2 * part] - m), part_acc[part * LORA + i], acc);
    }
    out[i] = acc * inv;
  }
}
