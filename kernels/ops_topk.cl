// Top-k of each logits row [rows, vocab] (k <= 128): values sorted descending, ties to the lower
// index, -0 == +0, NaN below every number (ukey in ops_common.clh). Exact (a selection of
// distinct (key, index) pairs), so both kernels and any LOCAL give the same result.
//
// top_k_heap: one work-item per row (CPUs). A min-heap of the k best (key, index) pairs seen so
// far; a 16-float block is skipped when no key in it reaches the heap's smallest key. Random
// logits touch the heap ~k ln(vocab / k) times; an ascending row touches it for every element.
//
// top_k: one work-group of LOCAL work-items per row (GPUs):
//   1. The row is split into NSUB = LOCAL * 16 disjoint subsets (lane j of work-item w's blocks).
//      The k largest subset maxima are k distinct elements, so the k-th largest of them, lo,
//      satisfies count(key >= lo) >= k: every top-k element has key >= lo.
//   2. While more than CAP elements have key >= lo, bisect the key range [lo, hi) by counting
//      (count(hi) < k always); stops at CAP candidates or at hi == lo + 1 (lo = the k-th key).
//   3. Candidates (key > lo, plus key == lo: all of them, or when the ties alone overflow CAP,
//      the lowest-index ones needed to reach k) are appended to local memory, bitonic-sorted by
//      (key desc, index asc) and the first k written out.
// Typical logits take three reads of the row; adversarial rows (long sorted runs) take up to 32
// counting passes more.

#include "ops_common.clh"

#ifndef CAP
#define CAP 4096
#endif
#define NSUB (LOCAL * 16)
#define KMAX 128

inline ulong pack_key(uint key, uint idx) { return ((ulong)key << 32) | (ulong)(~idx); }

inline void heap_sift_down(ulong* h, int size, int i) {
  for (;;) {
    const int l = 2 * i + 1;
    int m = i;
    if (l < size && h[l] < h[m]) m = l;
    if (l + 1 < size && h[l + 1] < h[m]) m = l + 1;
    if (m == i) return;
    const ulong t = h[i];
    h[i] = h[m];
    h[m] = t;
    i = m;
  }
}

inline void heap_offer(ulong* h, int* size, int k, ulong p) {
  if (*size < k) {
    int i = (*size)++;
    h[i] = p;
    while (i > 0 && h[(i - 1) / 2] > h[i]) {
      const int parent = (i - 1) / 2;
      const ulong t = h[i];
      h[i] = h[parent];
      h[parent] = t;
      i = parent;
    }
  } else if (p > h[0]) {
    h[0] = p;
    heap_sift_down(h, k, 0);
  }
}

// global size: (rows, padded), any local size
__kernel void top_k_heap(__global const float* x, const long x_off,  // [rows, vocab]
                         __global float* values, const long v_off,   // [rows, k]
                         __global int* ids, const long i_off,        // [rows, k]
                         const int vocab, const int k, const long num_rows) {
  const long row = get_global_id(0);
  if (row >= num_rows) return;  // padding of the last work-group
  __global const float* xr = x + x_off + row * vocab;
  ulong h[KMAX];
  int size = 0;
  uint least = 0;  // key of the heap's smallest pair once it holds k
  const int num_blocks = vocab / 16;
  for (int b = 0; b < num_blocks; ++b) {
    const uint16 key = ukey16(vload16(b, xr));
    if (size == k && !any(key >= (uint16)least)) continue;
    uint kk[16];
    vstore16(key, 0, kk);
    for (int j = 0; j < 16; ++j) heap_offer(h, &size, k, pack_key(kk[j], (uint)(b * 16 + j)));
    if (size == k) least = (uint)(h[0] >> 32);
  }
  for (int i = num_blocks * 16; i < vocab; ++i) heap_offer(h, &size, k, pack_key(ukey(xr[i]), (uint)i));
  for (int n = size - 1; n > 0; --n) {  // heap sort: smallest to the back, so h ends descending
    const ulong t = h[0];
    h[0] = h[n];
    h[n] = t;
    heap_sift_down(h, n, 0);
  }
  for (int t = 0; t < k; ++t) {
    const uint idx = ~(uint)(h[t] & 0xffffffffUL);
    values[v_off + row * k + t] = xr[idx];
    ids[i_off + row * k + t] = (int)idx;
  }
}

// Sorts a[0, size) descending; size a power of two. Called by every work-item.
inline void bitonic_desc(__local ulong* a, int size) {
  const int lid = get_local_id(0);
  for (int k = 2; k <= size; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int t = lid; t < size / 2; t += LOCAL) {
        const int i = 2 * t - (t & (j - 1));
        const ulong x = a[i];
        const ulong y = a[i + j];
        if (((i & k) == 0) ? (x < y) : (x > y)) {
          a[i] = y;
          a[i + j] = x;
        }
      }
      barrier(CLK_LOCAL_MEM_FENCE);
    }
  }
}

// Number of elements of the row with key >= t; every work-item gets it.
inline uint count_ge(__global const float* xr, int vocab, uint t, __local uint* scratch) {
  const int lid = get_local_id(0);
  const int num_blocks = vocab / 16;
  int16 n = (int16)0;
  for (int b = lid; b < num_blocks; b += LOCAL) n -= ukey16(vload16(b, xr)) >= (uint16)t;
  uint c = 0;
  if (num_blocks % LOCAL == lid) {
    for (int i = num_blocks * 16; i < vocab; ++i) c += ukey(xr[i]) >= t ? 1u : 0u;
  }
  const int8 a = n.lo + n.hi;
  const int4 b4 = a.lo + a.hi;
  const int2 c2 = b4.lo + b4.hi;
  return group_sum_uint(scratch, c + (uint)(c2.lo + c2.hi));
}

// Appends element i (key) to the candidates when it qualifies.
inline void offer(__local ulong* cand, volatile __local uint* num, uint key, uint i, uint lo,
                  bool take_ties) {
  if (key > lo || (take_ties && key == lo)) cand[atomic_inc(num)] = pack_key(key, i);
}

// global size: (LOCAL * rows), local size: (LOCAL)
__kernel void top_k(__global const float* x, const long x_off,    // [rows, vocab]
                    __global float* values, const long v_off,     // [rows, k]
                    __global int* ids, const long i_off,          // [rows, k]
                    const int vocab, const int k,
                    const long num_rows) {  // unused: one work-group per row (an early return
                                            // before barriers miscompiles on PoCL)
  __local ulong buf[CAP > NSUB ? CAP : NSUB];
  __local uint scratch[LOCAL];
  __local uint num;
  const int lid = get_local_id(0);
  const long row = get_group_id(0);
  __global const float* xr = x + x_off + row * vocab;
  const int num_blocks = vocab / 16;
  const bool tail_owner = num_blocks % LOCAL == lid;

  // 1. Subset maxima -> lower bound lo, upper bound hi.
  uint16 sub = (uint16)0;
  for (int b = lid; b < num_blocks; b += LOCAL) sub = max(sub, ukey16(vload16(b, xr)));
  uint part[16];
  vstore16(sub, 0, part);
  if (tail_owner) {
    for (int i = num_blocks * 16; i < vocab; ++i) part[i % 16] = max(part[i % 16], ukey(xr[i]));
  }
  for (int j = 0; j < 16; ++j) buf[lid * 16 + j] = (ulong)part[j] << 32;
  barrier(CLK_LOCAL_MEM_FENCE);
  bitonic_desc(buf, NSUB);
  uint lo = (uint)(buf[k - 1] >> 32);
  ulong hi = (buf[0] >> 32) + 1;
  barrier(CLK_LOCAL_MEM_FENCE);

  // 2. Narrow until the candidates fit.
  uint c = count_ge(xr, vocab, lo, scratch);
  while (c > CAP && hi - lo > 1) {
    const uint mid = lo + (uint)((hi - lo) / 2);
    const uint cm = count_ge(xr, vocab, mid, scratch);
    if (cm >= (uint)k) {
      lo = mid;
      c = cm;
    } else {
      hi = mid;
    }
  }

  // 3. Collect, sort, write.
  const bool take_ties = c <= CAP;
  if (lid == 0) num = 0;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int b = lid; b < num_blocks; b += LOCAL) {
    const uint16 key = ukey16(vload16(b, xr));
    if (!any(key >= (uint16)lo)) continue;
    uint kk[16];
    vstore16(key, 0, kk);
    for (int j = 0; j < 16; ++j) offer(buf, &num, kk[j], (uint)(b * 16 + j), lo, take_ties);
  }
  if (tail_owner) {
    for (int i = num_blocks * 16; i < vocab; ++i) offer(buf, &num, ukey(xr[i]), (uint)i, lo, take_ties);
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  if (!take_ties && lid == 0) {  // ties at the k-th key overflow CAP: the lowest indices, in order
    for (int i = 0; i < vocab && num < (uint)k; ++i) {
      if (ukey(xr[i]) == lo) buf[num++] = pack_key(lo, (uint)i);
    }
  }
  barrier(CLK_LOCAL_MEM_FENCE);
  const int n = (int)num;
  int size = 1;
  while (size < n) size <<= 1;
  for (int t = n + lid; t < size; t += LOCAL) buf[t] = 0;
  barrier(CLK_LOCAL_MEM_FENCE);
  bitonic_desc(buf, size);
  for (int t = lid; t < k; t += LOCAL) {
    const uint idx = ~(uint)(buf[t] & 0xffffffffUL);
    values[v_off + row * k + t] = xr[idx];
    ids[i_off + row * k + t] = (int)idx;
  }
}
