// Flash attention over a block_major paged cache: split-KV ("flash decoding") with tiles of
// query tokens, for decodes, verify steps and prefill chunks in one ragged batch.
//
// Specialised with -D defines:
//   CACHE_F32 | CACHE_F16 | CACHE_BF16   cache element type
//   HEAD         head size (a multiple of 16: 64, 128, 256)
//   GROUP        q heads per kv head (num_q_heads / num_kv_heads)
//   BLOCK        tokens per cache block (a multiple of 16)
//   TILE         most query tokens of one request handled by one work-group
//   SPLIT_KEYS   keys per split (a multiple of BLOCK); split s covers the absolute key positions
//                [s * SPLIT_KEYS, (s + 1) * SPLIT_KEYS)
//   PF_DIST      software prefetch distance in blocks (0: off; the host sets 2 on CPU devices)
//   QUANT_OUT=32|256  also write the output quantised for the output projection, one scale per
//                32 or 256 values (the bytes quantize_activations(_256) would write:
//                kernels/quant_rows.clh), into the three buffers appended to each kernel's
//                arguments: one launch fewer per layer
//
// Work: one work-group of one work-item per (work item, kv head): a shape for CPU devices
// (PoCL), where the code vectorises through its explicit float16 types and the __local arrays
// (q rows, accumulators, the split's scores, one converted V block) are cache-resident scratch.
// A work item (first token, tokens, split) is up to TILE consecutive query tokens of one request
// and one split of their key ranges. The work-group serves all GROUP q heads of its kv head and
// all tokens of its tile, so each K/V row is read and converted once per work-group. Within the
// split it walks whole cache blocks ([BLOCK, HEAD] rows of one head, contiguous in block_major)
// twice: K rows to scores (kept in local memory: a split is small), one softmax per q row over
// the split (exact max, no rescaling), then V rows. Across splits the softmax is online: each
// split's (m, l, acc) is rescaled when merged. Base 2 throughout (queries pre-scaled by log2 e).
//
// Batch invariance: a token's arithmetic does not depend on the other tokens of its tile (its
// own visible keys, its own sums in a fixed order; keys it does not see contribute exact zeros
// or are skipped), and its splits depend only on its own position. A token with one split writes
// its output directly; otherwise it writes a partial (acc, m, l) per split and flash_attn_merge
// combines them in split order.

#include "cache_dtype.clh"
#ifdef QUANT_OUT
#include "quant_rows.clh"
#endif


#if !defined(HEAD) || !defined(GROUP) || !defined(BLOCK) || !defined(TILE) || !defined(SPLIT_KEYS)
#error "define HEAD, GROUP, BLOCK, TILE and SPLIT_KEYS"
#endif
#if HEAD % 16 != 0 || BLOCK % 16 != 0 || SPLIT_KEYS % BLOCK != 0
#error "HEAD and BLOCK must be multiples of 16, SPLIT_KEYS a multiple of BLOCK"
#endif

#define NC (HEAD / 16)       // float16 chunks per K/V row

// One output row (a token's q head, NC float16 chunks) into the output at element `at` of the
// [num_tokens, num_q_heads * HEAD] output; with QUANT_OUT also its int8 blocks, one scale per
// QUANT_OUT values (32, or 256 for K-quant output projections; quant_rows.clh). HEAD must be a
// multiple of QUANT_OUT: no scale group straddles two heads.
#ifdef QUANT_OUT
#if QUANT_OUT != 32 && QUANT_OUT != 256
#error "QUANT_OUT must be 32 or 256"
#endif
#if HEAD % QUANT_OUT != 0
#error "QUANT_OUT needs HEAD % QUANT_OUT == 0"
#endif
#define QUANT_OUT_ARGS , __global char* xq, __global short* xq16, __global act_rec* xrec
#define QUANT_OUT_PASS , xq, xq16, xrec
#else
#define QUANT_OUT_ARGS
#define QUANT_OUT_PASS
#endif
inline void store_output_row(__global float* output, long at, const float16* o QUANT_OUT_ARGS) {
  for (int c = 0; c < NC; ++c) vstore16(o[c], c, output + at);
#if defined(QUANT_OUT) && QUANT_OUT == 32
  for (int c = 0; c < NC; c += 2)
    quantize_block32(o[c], o[c + 1], xq, xq16, xrec, (size_t)(at + 16 * c), (size_t)((at + 16 * c) / 32));
#elif defined(QUANT_OUT)
  for (int g = 0; g < HEAD / 256; ++g)  // reads back its own stores
    quantize_group256(output + at + 256 * g, xq, xq16, xrec, (size_t)(at + 256 * g),
                      (size_t)((at + 256 * g) / 32));
#endif
}

#define ROWS (TILE * GROUP)  // q rows of a work-group: row = token * GROUP + q head in group

// Value chunks per pass: GROUP * VCHUNKS independent accumulators hide the FMA latency.
#if GROUP >= 8
#define VCHUNKS 1
#elif GROUP >= 4
#define VCHUNKS 2
#elif GROUP >= 2
#define VCHUNKS 4
#else
#define VCHUNKS 8
#endif
#if VCHUNKS > NC
#undef VCHUNKS
#define VCHUNKS NC
#endif

inline float hsum16(float16 a) {
  const float8 b = a.lo + a.hi;
  const float4 c = b.lo + b.hi;
  const float2 d = c.lo + c.hi;
  return d.x + d.y;
}

inline float hmax16(float16 a) {
  const float8 b = fmax(a.lo, a.hi);
  const float4 c = fmax(b.lo, b.hi);
  const float2 d = fmax(c.lo, c.hi);
  return fmax(d.x, d.y);
}

// Lowest visible key of the query at position p (causal: the highest is p).
inline int first_key(int p, int window, int chunk) {
  int lo = 0;
  if (window > 0) lo = max(lo, p - window + 1);
  if (chunk > 0) lo = max(lo, p / chunk * chunk);
  return lo;
}

// Sums of 16 vectors: lane j of the result = the sum of the lanes of x[j] (a transposed reduction,
// 45 vector operations instead of 16 horizontal sums, in a fixed order).
inline float16 sum16x16(__local const float16* x) {
  float16 b[8], c[4], d[2];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float16 u = x[2 * i], v = x[2 * i + 1];
    b[i] = (float16)(u.lo, v.lo) + (float16)(u.hi, v.hi);  // key 2i in lanes 0-7, 2i+1 in 8-15
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float16 u = b[2 * i], v = b[2 * i + 1];
    c[i] = (float16)(u.s0123, u.s89ab, v.s0123, v.s89ab) +
           (float16)(u.s4567, u.scdef, v.s4567, v.scdef);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float16 u = c[2 * i], v = c[2 * i + 1];
    d[i] = (float16)(u.s01, u.s45, u.s89, u.scd, v.s01, v.s45, v.s89, v.scd) +
           (float16)(u.s23, u.s67, u.sab, u.sef, v.s23, v.s67, v.sab, v.sef);
  }
  return (float16)(d[0].even, d[1].even) + (float16)(d[0].odd, d[1].odd);
}

#ifndef PF_DIST
#define PF_DIST 0  // blocks ahead to prefetch (0: none; the host sets 2 on CPU devices)
#endif

// Hints the cache to fetch row j of a block of one head (rows: null for none). A clang builtin
// (PoCL emits prefetcht0), issued one row per row processed: a whole block at once stalls on the
// line fill buffers. Measured ~1.3x faster decodes from DRAM on the CPU device than none.
inline void prefetch_row(__global const cache_t* rows, int j) {
#if PF_DIST > 0
  if (rows == 0) return;
  __global const char* x = (__global const char*)(rows + j * HEAD);
  for (int i = 0; i < HEAD * (int)sizeof(cache_t); i += 64) __builtin_prefetch(x + i, 0, 3);
#endif
}

// Scores of the keys [16 * jc_lo, 16 * jc_hi + 16) of one block (block-relative) for the q rows of
// tokens [t_lo, t_hi]: each K row is read and converted once for all of them.
//   q: [ROWS * NC] pre-scaled queries, part: [ROWS * 16] float16 partial dot products (lane-wise,
//   one vector per key of the chunk),
//   s: [ROWS * SPLIT_KEYS] the split's scores, this block's at offset `at`
inline void block_scores(__global const cache_t* kb, __global const cache_t* next, int jc_lo,
                         int jc_hi, int t_lo, int t_hi, int at, __local const float16* q,
                         __local float16* part, __local float* s) {
  for (int jc = jc_lo; jc <= jc_hi; ++jc) {
    for (int jj = 0; jj < 16; ++jj) {
      prefetch_row(next, jc * 16 + jj);
      __global const cache_t* krow = kb + (jc * 16 + jj) * HEAD;
      float16 k[NC];
#pragma unroll
      for (int c = 0; c < NC; ++c) k[c] = load16(krow + c * 16);
      for (int t = t_lo; t <= t_hi; ++t) {
#pragma unroll
        for (int g = 0; g < GROUP; ++g) {
          // two interleaved chains (even and odd chunks) halve the FMA latency
          __local const float16* qr = q + (t * GROUP + g) * NC;
          float16 a0 = qr[0] * k[0], a1 = qr[1] * k[1];
#pragma unroll
          for (int c = 2; c < NC; c += 2) {
            a0 = fma(qr[c], k[c], a0);
            a1 = fma(qr[c + 1], k[c + 1], a1);
          }
          part[(t * GROUP + g) * 16 + jj] = a0 + a1;
        }
      }
    }
    for (int row = t_lo * GROUP; row < (t_hi + 1) * GROUP; ++row) {
      vstore16(sum16x16(part + row * 16), 0, s + row * SPLIT_KEYS + at + jc * 16);
    }
  }
}

// Softmax of one q row over its visible keys [klo, khi] (split-relative): probabilities replace
// the scores in s (zeros in the lanes of the first and last chunks outside the range); returns
// (max, sum) in base 2.
inline float2 row_softmax(__local float* s, int klo, int khi, float softcap) {
  const int16 lane = (int16)(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  float16 mv = (float16)(-INFINITY);
  for (int c = klo / 16; c <= khi / 16; ++c) {
    float16 x = vload16(c, s);
    if (softcap > 0.0f) x = softcap * tanh(x);
    const int16 j = (int16)(c * 16) + lane;
    x = select((float16)(-INFINITY), x, j >= klo && j <= khi);
    vstore16(x, c, s);
    mv = fmax(mv, x);
  }
  const float m = hmax16(mv);  // finite: the row sees at least one key
  float16 sum = 0.0f;
  for (int c = klo / 16; c <= khi / 16; ++c) {
    const float16 p = exp2(vload16(c, s) - m);
    vstore16(p, c, s);
    sum += p;
  }
  return (float2)(m, hsum16(sum));
}

// acc[g] += sum_j p[g][j] v_j over the keys [jlo, jhi] of one block (block-relative) for the
// GROUP rows of one token, VCHUNKS 16-wide chunks of the head at a time. V rows come from the
// cache (from_buf = 0) or from vbuf, the block's V rows already converted (from_buf = 1): the
// same arithmetic either way.
inline void block_values(__global const cache_t* vb, __global const cache_t* next,
                         __local const float16* vbuf, int from_buf, int jlo, int jhi,
                         __local const float* p, __local float16* acc) {
  for (int c0 = 0; c0 < NC; c0 += VCHUNKS) {
    float16 a[GROUP][VCHUNKS];
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
#pragma unroll
      for (int c = 0; c < VCHUNKS; ++c) a[g][c] = acc[g * NC + c0 + c];
    }
    for (int j = jlo; j <= jhi; ++j) {
      if (c0 == 0) prefetch_row(next, j);
      float16 v[VCHUNKS];
#pragma unroll
      for (int c = 0; c < VCHUNKS; ++c) {
        v[c] = from_buf ? vbuf[j * NC + c0 + c] : load16(vb + j * HEAD + (c0 + c) * 16);
      }
#pragma unroll
      for (int g = 0; g < GROUP; ++g) {
        const float16 pj = p[g * SPLIT_KEYS + j];
#pragma unroll
        for (int c = 0; c < VCHUNKS; ++c) a[g][c] = fma(pj, v[c], a[g][c]);
      }
    }
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
#pragma unroll
      for (int c = 0; c < VCHUNKS; ++c) acc[g * NC + c0 + c] = a[g][c];
    }
  }
}

// The tile's tokens that see keys of block b form a range [t_lo, t_hi] (empty: t_hi < t_lo), and
// their visible keys in the block lie in [jmin, jmax] (block-relative).
typedef struct {
  int t_lo, t_hi, jmin, jmax;
} BlockUse;

inline BlockUse block_use(int b, int p0, int nt, int split_lo, int split_hi, int window,
                          int chunk) {
  BlockUse u = {nt, -1, BLOCK, -1};
  const int b_lo = b * BLOCK;
  for (int t = 0; t < nt; ++t) {
    const int jlo = max(max(first_key(p0 + t, window, chunk), split_lo), b_lo) - b_lo;
    const int jhi = min(min(p0 + t, split_hi), b_lo + BLOCK - 1) - b_lo;
    if (jlo > jhi) continue;
    u.t_lo = min(u.t_lo, t);
    u.t_hi = t;
    u.jmin = min(u.jmin, jlo);
    u.jmax = max(u.jmax, jhi);
  }
  return u;
}

// global size: (num_items, num_kv_heads), local size: (1, 1)
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void flash_attn_split(
    __global const float* query,          // [num_tokens, num_q_heads, HEAD]
    __global const cache_t* cache,        // the layer's raw tensor, block_major
    __global const int* block_table,      // [num_reqs, max_blocks]
    __global const int* query_start_loc,  // [num_reqs + 1]
    __global const int* seq_lens,         // [num_reqs]
    __global const int* token_request,    // [num_tokens]
    __global const int4* items,           // [num_items] (first token, tokens, split, 0)
    __global const int2* token_part,      // [num_tokens] (partial base in this launch, splits)
    __global float* output,               // [num_tokens, num_q_heads, HEAD]
    __global float* part_acc,             // [partials, num_q_heads, HEAD]
    __global float* part_ml,              // [partials, num_q_heads, 2]
    const int item_offset, const int max_blocks, const long k_offset, const long v_offset,
    const long stride_block, const long stride_head, const float q_scale, const float softcap,
    const int window, const int chunk QUANT_OUT_ARGS) {
  const int4 item = items[item_offset + get_group_id(0)];
  const int kvh = get_group_id(1);
  const int num_q_heads = get_num_groups(1) * GROUP;
  const int t0 = item.x, nt = item.y, split = item.z;
  const int r = token_request[t0];
  const int qs = query_start_loc[r];
  const int p0 = seq_lens[r] - (query_start_loc[r + 1] - qs) + (t0 - qs);
  const int split_lo = split * SPLIT_KEYS, split_hi = split_lo + SPLIT_KEYS - 1;

  // Local memory: ROWS * (8 * HEAD + 4 * SPLIT_KEYS + 1024) + 4 * BLOCK * HEAD bytes. The host
  // sizes tiles by this (flash_local_mem_estimate in ocl_flash.cpp): keep the two in step.
  __local float16 q[ROWS * NC];     // ROWS * HEAD floats
  __local float16 acc[ROWS * NC];   // ROWS * HEAD floats
  __local float s[ROWS * SPLIT_KEYS];
  __local float16 part[ROWS * 16];  // 16 vectors (1 KiB) a row
  __local float16 vbuf[BLOCK * NC];  // BLOCK * HEAD floats

  for (int row = 0; row < nt * GROUP; ++row) {
    const int t = row / GROUP, h = kvh * GROUP + row % GROUP;
    __global const float* qrow = query + ((long)(t0 + t) * num_q_heads + h) * HEAD;
    for (int c = 0; c < NC; ++c) {
      q[row * NC + c] = vload16(c, qrow) * q_scale;
      acc[row * NC + c] = 0.0f;
    }
  }

  const int lo = max(first_key(p0, window, chunk), split_lo);  // first keys are non-decreasing in t
  const int hi = min(p0 + nt - 1, split_hi);
  const int b_first = lo / BLOCK, b_last = hi / BLOCK;
  __global const int* table = block_table + (long)r * max_blocks;
  const long head_at = kvh * stride_head;

  // pass 1: scores of every token that sees keys of each block
  for (int b = b_first; b <= b_last; ++b) {
    __global const cache_t* kb = cache + k_offset + table[b] * stride_block + head_at;
    __global const cache_t* next = 0;  // to prefetch: a K block ahead, past the last the first V
    if (PF_DIST > 0) {
      const int nb = b + PF_DIST, vb_at = nb - b_last - 1 + b_first;
      if (nb <= b_last)
        next = cache + k_offset + table[nb] * stride_block + head_at;
      else if (vb_at <= b_last)
        next = cache + v_offset + table[vb_at] * stride_block + head_at;
    }
    const BlockUse u = block_use(b, p0, nt, split_lo, split_hi, window, chunk);
    if (u.t_hi < u.t_lo) continue;
    block_scores(kb, next, u.jmin / 16, u.jmax / 16, u.t_lo, u.t_hi, b * BLOCK - split_lo, q, part,
                 s);
  }

  // softmax per q row over the keys of the split it sees
  float2 ml[ROWS];
  for (int t = 0; t < nt; ++t) {
    const int klo = max(first_key(p0 + t, window, chunk), split_lo) - split_lo;
    const int khi = min(p0 + t, split_hi) - split_lo;
    for (int g = 0; g < GROUP; ++g) {
      const int row = t * GROUP + g;
      ml[row] = klo <= khi ? row_softmax(s + row * SPLIT_KEYS, klo, khi, softcap)
                           : (float2)(-INFINITY, 0.0f);
    }
  }

  // pass 2: values
  for (int b = b_first; b <= b_last; ++b) {
    __global const cache_t* vb = cache + v_offset + table[b] * stride_block + head_at;
    const BlockUse u = block_use(b, p0, nt, split_lo, split_hi, window, chunk);
    if (u.t_hi < u.t_lo) continue;
    __global const cache_t* next = 0;
    if (PF_DIST > 0 && b + PF_DIST <= b_last) {
      next = cache + v_offset + table[b + PF_DIST] * stride_block + head_at;
    }
    const int from_buf = u.t_hi > u.t_lo;  // several tokens: convert the V rows once
    if (from_buf) {
      for (int j = u.jmin; j <= u.jmax; ++j) {
        for (int c = 0; c < NC; ++c) vbuf[j * NC + c] = load16(vb + j * HEAD + c * 16);
      }
    }
    const int b_lo = b * BLOCK;
    for (int t = u.t_lo; t <= u.t_hi; ++t) {
      const int jlo = max(max(first_key(p0 + t, window, chunk), split_lo), b_lo) - b_lo;
      const int jhi = min(min(p0 + t, split_hi), b_lo + BLOCK - 1) - b_lo;
      if (jlo > jhi) continue;
      block_values(vb, t == u.t_lo ? next : 0, vbuf, from_buf, jlo, jhi,
                   s + t * GROUP * SPLIT_KEYS + b_lo - split_lo, acc + t * GROUP * NC);
    }
  }

  for (int t = 0; t < nt; ++t) {
    const int p = p0 + t;
    const int first_split = first_key(p, window, chunk) / SPLIT_KEYS;
    if (split < first_split || split > p / SPLIT_KEYS) continue;  // no key of this token here
    const int2 tp = token_part[t0 + t];
    for (int g = 0; g < GROUP; ++g) {
      const int row = t * GROUP + g, h = kvh * GROUP + g;
      __local const float16* a = acc + row * NC;
      if (tp.y == 1) {
        const float inv = 1.0f / ml[row].y;
        float16 o[NC];
        for (int c = 0; c < NC; ++c) o[c] = a[c] * inv;
        store_output_row(output, ((long)(t0 + t) * num_q_heads + h) * HEAD, o QUANT_OUT_PASS);
      } else {
        const long pi = (long)(tp.x + split - first_split) * num_q_heads + h;
        for (int c = 0; c < NC; ++c) vstore16(a[c], c, part_acc + pi * HEAD);
        vstore2(ml[row], pi, part_ml);
      }
    }
  }
}

// Combines the splits of each token that has more than one, in split order.
// global size: (num_q_heads, tokens of the launch), local size: (1, 1)
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void flash_attn_merge(
    __global const int2* token_part,  // [num_tokens] (partial base in this launch, splits)
    __global const float* part_acc,   // [partials, num_q_heads, HEAD]
    __global const float* part_ml,    // [partials, num_q_heads, 2]
    __global float* output,           // [num_tokens, num_q_heads, HEAD]
    const int token_offset QUANT_OUT_ARGS) {
  const int h = get_global_id(0), num_q_heads = get_global_size(0);
  const int t = token_offset + get_global_id(1);
  const int2 tp = token_part[t];
  if (tp.y <= 1) return;
  float mx = -INFINITY;
  for (int i = 0; i < tp.y; ++i) mx = fmax(mx, part_ml[((long)(tp.x + i) * num_q_heads + h) * 2]);
  float denom = 0.0f;
  for (int i = 0; i < tp.y; ++i) {
    const float2 ml = vload2((long)(tp.x + i) * num_q_heads + h, part_ml);
    denom += ml.y * exp2(ml.x - mx);
  }
  const float inv = 1.0f / denom;
  float16 o[NC];
  for (int c = 0; c < NC; ++c) {
    float16 a = 0.0f;
    for (int i = 0; i < tp.y; ++i) {
      const long pi = (long)(tp.x + i) * num_q_heads + h;
      a = fma((float16)(exp2(part_ml[pi * 2] - mx)), vload16(c, part_acc + pi * HEAD), a);
    }
    o[c] = a * inv;
  }
  store_output_row(output, ((long)t * num_q_heads + h) * HEAD, o QUANT_OUT_PASS);
}
