// y = x . W^T for the 256-element K-quant formats Q2_K .. Q6_K (-DWEIGHT_Q4_K, ...), weights
// in the 16-row interleaved layout of cpp/quant/layout.cpp (6-bit scales unpacked to bytes),
// activations quantised per 32-block by quant_activation.cl. -DNB: activation rows per work-item.
// One work-item = one group of 16 output rows x up to NB activation rows.
//
// Numerics, per output element, super-blocks in increasing order and inside each:
//   Q4_K / Q5_K, sub-blocks j = 0..7 (32 elements, activation block j):
//     acc = fma((float)s_j * (d * sc_j), d_x, acc); acc = fma(dmin * m_j, -(d_x * sum(xq)), acc)
//   Q6_K, 32-element groups (activation block), each two 16-element sub-blocks a, b:
//     acc = fma((float)(s_a - 32 * sum_a(xq)) * (d * sc_a), d_x, acc); then the same for b
//   Q3_K, as Q6_K with offset 4 and d * (ls - 32) per 16-element sub-block
//   Q2_K, 16-element sub-blocks a, b per activation block, each:
//     acc = fma((float)s_a * (d * sc_a), d_x, acc); acc = fma(dmin * m_a, -(d_x * sum_a(xq)), acc)
// where s = the exact integer dot of the stored unsigned weight integers with the int8 activations.
#include "quant_common.clh"


// Bit j of every byte of h, moved to bit 4 (Q5_K's fifth bits); j is a constant after unrolling.
inline uint16 bit_to_4(uint16 h, int j) {
  const uint16 m = (uint16)(0x10101010u);
  return j <= 4 ? (h << (4 - j)) & m : (h >> (j - 4)) & m;
}

// Bit b of every byte of h, moved to bit 2 (Q3_K's third bits); b is a constant after unrolling.
inline uint16 bit_to_2(uint16 h, int b) {
  const uint16 m = (uint16)(0x04040404u);
  return b <= 2 ? (h << (2 - b)) & m : (h >> (b - 2)) & m;
}

// Bits 2m, 2m + 1 of every byte of h, moved to bits 4, 5 (Q6_K's high bits).
inline uint16 bits_to_45(uint16 h, int m) {
  const uint16 mask = (uint16)(0x30303030u);
  return m == 0 ? (h << 4) & mask : m == 1 ? (h << 2) & mask : m == 2 ? h & mask : (h >> 2) & mask;
}

kernel void matmul_k(global const uchar* wbuf, ulong off0, ulong off1, ulong off2, ulong off3,
                     global const char* xq,       // [n, cols]
                     global const act_rec* xrec,  // [n, cols / 32]
                     global float* y,             // [n, ldy] from column y_off
                     int rows, int cols, int n,
                     int y_off, int ldy) {  // y row i at y + y_off + i * ldy
  const int g = get_global_id(0);
  if (g * 16 >= rows) return;  // padding work-items of a rounded-up global size
  const int i0 = get_global_id(1) * NB;
  // NB == 1 (decode): one row, known at compile time, so the decoded weights feed the dot
  // products directly instead of being kept (spilled on AVX2) for a loop over rows.
  const int nr = NB == 1 ? 1 : min(NB, n - i0);
  const int nsb = cols / 256;
  const int nb = cols / 32;
  float16 acc[NB];
  for (int i = 0; i < NB; ++i) acc[i] = 0.0f;
  for (int sb = 0; sb < nsb; ++sb) {
    const size_t rec = (size_t)g * nsb + sb;
#if defined(WEIGHT_Q4_K) || defined(WEIGHT_Q5_K)
    global const uint16* qs = (global const uint16*)(wbuf + off0) + rec * 32;
#if defined(WEIGHT_Q5_K)
    global const uint16* qh = (global const uint16*)(wbuf + off1) + rec * 8;
    global const uchar* scp = wbuf + off2 + rec * 256;
    global const half* dmp = (global const half*)(wbuf + off3);
#else
    global const uchar* scp = wbuf + off1 + rec * 256;
    global const half* dmp = (global const half*)(wbuf + off2);
#endif
    const float16 d = vload_half16(2 * rec, dmp);
    const float16 dmin = vload_half16(2 * rec + 1, dmp);
    PREFETCH(qs + AHEAD(2048) * 32, 2048);
    PREFETCH(scp + AHEAD(2048) * 256, 256);
#if defined(WEIGHT_Q5_K)
    PREFETCH(qh + AHEAD(2048) * 8, 512);
#endif
    for (int c = 0; c < 4; ++c) {
      uint16 lo[8], hi[8];
#pragma unroll
      for (int t = 0; t < 8; ++t) {
        const uint16 p = qs[c * 8 + t];
        lo[t] = lo_nibbles(p);
        hi[t] = hi_nibbles(p);
#if defined(WEIGHT_Q5_K)
        const uint16 h = qh[t];
        lo[t] |= bit_to_4(h, 2 * c);
        hi[t] |= bit_to_4(h, 2 * c + 1);
#endif
      }
      const float16 dsc0 = convert_float16(vload16(2 * c, scp)) * d;
      const float16 dsc1 = convert_float16(vload16(2 * c + 1, scp)) * d;
      const float16 dm0 = convert_float16(vload16(8 + 2 * c, scp)) * dmin;
      const float16 dm1 = convert_float16(vload16(8 + 2 * c + 1, scp)) * dmin;
      for (int i = 0; i < nr; ++i) {
        const size_t row = (size_t)(i0 + i);
        const act_rec r0 = xrec[row * nb + sb * 8 + 2 * c];
        const act_rec r1 = xrec[row * nb + sb * 8 + 2 * c + 1];
        global const int* xp = (global const int*)(xq + row * cols + (size_t)sb * 256 + 64 * c);
#if defined(WEIGHT_Q5_K)
        // values <= 31: 4 pair sums of 2 * 31 * 127 fit in 16 bits
        const int16 s0 = WIDEN(DOT4(lo[0], xp[0]) + DOT4(lo[1], xp[1]) + DOT4(lo[2], xp[2]) + DOT4(lo[3], xp[3])) +
                         WIDEN(DOT4(lo[4], xp[4]) + DOT4(lo[5], xp[5]) + DOT4(lo[6], xp[6]) + DOT4(lo[7], xp[7]));
        const int16 s1 = WIDEN(DOT4(hi[0], xp[8]) + DOT4(hi[1], xp[9]) + DOT4(hi[2], xp[10]) + DOT4(hi[3], xp[11])) +
                         WIDEN(DOT4(hi[4], xp[12]) + DOT4(hi[5], xp[13]) + DOT4(hi[6], xp[14]) + DOT4(hi[7], xp[15]));
#else
        // values <= 15: 8 pair sums of 2 * 15 * 127 fit in 16 bits
        const int16 s0 = WIDEN(DOT4(lo[0], xp[0]) + DOT4(lo[1], xp[1]) + DOT4(lo[2], xp[2]) + DOT4(lo[3], xp[3]) +
                               DOT4(lo[4], xp[4]) + DOT4(lo[5], xp[5]) + DOT4(lo[6], xp[6]) + DOT4(lo[7], xp[7]));
        const int16 s1 = WIDEN(DOT4(hi[0], xp[8]) + DOT4(hi[1], xp[9]) + DOT4(hi[2], xp[10]) + DOT4(hi[3], xp[11]) +
                               DOT4(hi[4], xp[12]) + DOT4(hi[5], xp[13]) + DOT4(hi[6], xp[14]) + DOT4(hi[7], xp[15]));
#endif
        float16 a = acc[i];
        a = fma(convert_float16(s0) * dsc0, (float16)(r0.s0), a);
        a = fma(dm0, (float16)(-r0.s1), a);
        a = fma(convert_float16(s1) * dsc1, (float16)(r1.s0), a);
        a = fma(dm1, (float16)(-r1.s1), a);
        acc[i] = a;
      }
    }
#elif defined(WEIGHT_Q6_K)
// AVX2, NB == 1: ql / qh read through volatile, so each use loads from the (L1-resident) record
// again instead of the compiler keeping every loaded vector of the unrolled super-block and
// spilling them to the stack (16 vector registers; llvm-mca -mcpu=znver3 on PoCL's code: 398 ->
// 366 cycles per super-block). The same loads and integers: results are unchanged. Other paths
// (32 registers, or GPUs where volatile loads bypass caches) keep plain loads.
#if NB == 1 && defined(QUANT_AVX2)
#define Q6_LOAD(p, i) (((global const volatile uint16*)(p))[i])
#else
#define Q6_LOAD(p, i) ((p)[i])
#endif
    global const uint16* ql = (global const uint16*)(wbuf + off0) + rec * 32;
    global const uint16* qh = (global const uint16*)(wbuf + off1) + rec * 16;
    global const char* scp = (global const char*)(wbuf + off2) + rec * 256;
    const float16 d = vload_half16(rec, (global const half*)(wbuf + off3));
    PREFETCH(ql + AHEAD(2048) * 32, 2048);
    PREFETCH(qh + AHEAD(2048) * 16, 1024);
    PREFETCH(scp + AHEAD(2048) * 256, 256);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        uint16 e[8];
#pragma unroll
        for (int t = 0; t < 8; ++t) {
          const uint16 q = Q6_LOAD(ql, 16 * h + 8 * (m & 1) + t);
          e[t] = (m < 2 ? lo_nibbles(q) : hi_nibbles(q)) | bits_to_45(Q6_LOAD(qh, 8 * h + t), m);
        }
        const float16 dsa = convert_float16(vload16(8 * h + 2 * m, scp)) * d;
        const float16 dsb = convert_float16(vload16(8 * h + 2 * m + 1, scp)) * d;
        for (int i = 0; i < nr; ++i) {
          const size_t row = (size_t)(i0 + i);
          const act_rec r = xrec[row * nb + sb * 8 + 4 * h + m];
          global const int* xp =
              (global const int*)(xq + row * cols + (size_t)sb * 256 + 128 * h + 32 * m);
          // values <= 63: 2 pair sums of 2 * 63 * 127 fit in 16 bits
          const int16 sa = WIDEN(DOT4(e[0], xp[0]) + DOT4(e[1], xp[1])) +
                           WIDEN(DOT4(e[2], xp[2]) + DOT4(e[3], xp[3])) - 32 * as_int(r.s2);
          const int16 sb2 = WIDEN(DOT4(e[4], xp[4]) + DOT4(e[5], xp[5])) +
                            WIDEN(DOT4(e[6], xp[6]) + DOT4(e[7], xp[7])) - 32 * as_int(r.s3);
          float16 a = acc[i];
          a = fma(convert_float16(sa) * dsa, (float16)(r.s0), a);
          a = fma(convert_float16(sb2) * dsb, (float16)(r.s0), a);
          acc[i] = a;
        }
      }
    }
#elif defined(WEIGHT_Q3_K)
    global const uint16* qs = (global const uint16*)(wbuf + off0) + rec * 16;
    global const uint16* hm = (global const uint16*)(wbuf + off1) + rec * 8;
    global const uchar* scp = wbuf + off2 + rec * 256;
    const float16 d = vload_half16(rec, (global const half*)(wbuf + off3));
    PREFETCH(qs + AHEAD(1024) * 16, 1024);
    PREFETCH(hm + AHEAD(1024) * 8, 512);
    PREFETCH(scp + AHEAD(1024) * 256, 256);
    // activation block (n, j) = elements 128n + 32j ..: vectors t < 4 hold the 16 elements of
    // sub-block 8n + 2j (qs bytes 32n + l), t >= 4 those of 8n + 2j + 1 (bytes 32n + 16 + l)
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint16 e[8];
#pragma unroll
        for (int t = 0; t < 8; ++t)
          e[t] = ((qs[8 * n + t] >> (2 * j)) & (uint16)(0x03030303u)) | bit_to_2(hm[t], 4 * n + j);
        const int16 lsa = convert_int16(vload16(8 * n + 2 * j, scp));
        const int16 lsb = convert_int16(vload16(8 * n + 2 * j + 1, scp));
        const float16 dsa = convert_float16(lsa - 32) * d, dsb = convert_float16(lsb - 32) * d;
        for (int i = 0; i < nr; ++i) {
          const size_t row = (size_t)(i0 + i);
          const act_rec r = xrec[row * nb + sb * 8 + 4 * n + j];
          global const int* xp =
              (global const int*)(xq + row * cols + (size_t)sb * 256 + 128 * n + 32 * j);
          // values <= 7: 4 pair sums of 2 * 7 * 127 fit in 16 bits
          const int16 sa = WIDEN(DOT4(e[0], xp[0]) + DOT4(e[1], xp[1]) + DOT4(e[2], xp[2]) +
                                 DOT4(e[3], xp[3])) - 4 * as_int(r.s2);
          const int16 sb2 = WIDEN(DOT4(e[4], xp[4]) + DOT4(e[5], xp[5]) + DOT4(e[6], xp[6]) +
                                  DOT4(e[7], xp[7])) - 4 * as_int(r.s3);
          float16 a = acc[i];
          a = fma(convert_float16(sa) * dsa, (float16)(r.s0), a);
          a = fma(convert_float16(sb2) * dsb, (float16)(r.s0), a);
          acc[i] = a;
        }
      }
    }
#elif defined(WEIGHT_Q2_K)
    global const uint16* qs = (global const uint16*)(wbuf + off0) + rec * 16;
    global const uchar* scp = wbuf + off1 + rec * 256;
    const float16 d = vload_half16(2 * rec, (global const half*)(wbuf + off2));
    const float16 dmin = vload_half16(2 * rec + 1, (global const half*)(wbuf + off2));
    PREFETCH(qs + AHEAD(1024) * 16, 1024);
    PREFETCH(scp + AHEAD(1024) * 256, 256);
    // the elements of activation block (n, j) as Q3_K's (low bits only)
#pragma unroll
    for (int n = 0; n < 2; ++n) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint16 e[8];
#pragma unroll
        for (int t = 0; t < 8; ++t) e[t] = (qs[8 * n + t] >> (2 * j)) & (uint16)(0x03030303u);
        const uchar16 sca = vload16(8 * n + 2 * j, scp), scb = vload16(8 * n + 2 * j + 1, scp);
        const float16 dsa = convert_float16(sca & (uchar)0xF) * d;
        const float16 dsb = convert_float16(scb & (uchar)0xF) * d;
        const float16 dma = convert_float16(sca >> (uchar)4) * dmin;
        const float16 dmb = convert_float16(scb >> (uchar)4) * dmin;
        for (int i = 0; i < nr; ++i) {
          const size_t row = (size_t)(i0 + i);
          const act_rec r = xrec[row * nb + sb * 8 + 4 * n + j];
          global const int* xp =
              (global const int*)(xq + row * cols + (size_t)sb * 256 + 128 * n + 32 * j);
          // values <= 3: 4 pair sums of 2 * 3 * 127 fit in 16 bits
          const int16 sa = WIDEN(DOT4(e[0], xp[0]) + DOT4(e[1], xp[1]) + DOT4(e[2], xp[2]) +
                                 DOT4(e[3], xp[3]));
          const int16 sb2 = WIDEN(DOT4(e[4], xp[4]) + DOT4(e[5], xp[5]) + DOT4(e[6], xp[6]) +
                                  DOT4(e[7], xp[7]));
          const float ma = r.s0 * (float)as_int(r.s2), mb = r.s0 * (float)as_int(r.s3);
          float16 a = acc[i];
          a = fma(convert_float16(sa) * dsa, (float16)(r.s0), a);
          a = fma(dma, (float16)(-ma), a);
          a = fma(convert_float16(sb2) * dsb, (float16)(r.s0), a);
          a = fma(dmb, (float16)(-mb), a);
          acc[i] = a;
        }
      }
    }
#else
#error "define WEIGHT_Q2_K, WEIGHT_Q3_K, WEIGHT_Q4_K, WEIGHT_Q5_K or WEIGHT_Q6_K"
#endif
  }
  for (int i = 0; i < nr; ++i) store_rows(y + y_off + (size_t)(i0 + i) * ldy, acc[i], g * 16, rows);
}
