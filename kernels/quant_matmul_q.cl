// y = x . W^T for the 32-element block formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL and for
// IQ4_XS (-DWEIGHT_Q4_0, ...), weights in the 16-row interleaved layout of cpp/quant/layout.cpp,
// activations quantised per 32-block by quant_activation.cl. -DNB: activation rows per work-item
// (the host picks NB >= n, or chunks). One work-item = one group of 16 output rows x up to NB
// activation rows: every weight block is loaded and decoded once, then used for all of them.
// IQ4_XS is read per 32-element sub-block: its planes hold, per sub-block, IQ4_NL's 16 bytes of
// indices and one scale byte, so record b of a row is sub-block b.
//
// Numerics, per output element and block b in increasing order (identical for every n):
//   s = exact integer dot of the block's weight integers with the activation's int8 values
//   Q4_0 / Q5_0 / Q8_0: acc = fma((float)(s - off * sum(xq)) * d_w, d_x, acc)  (off 8 / 16 / 0)
//   Q4_1 / Q5_1:        acc = fma((float)s * d_w, d_x, acc); acc = fma(m_w, d_x * sum(xq), acc)
//   IQ4_NL / IQ4_XS:    acc = fma((float)s * d_w, d_x, acc), the weight integers being the
//                       table values (signed) and IQ4_XS's d_w = d * (ls - 32)
#include "quant_common.clh"


kernel void matmul_q(global const uchar* wbuf, ulong off0, ulong off1, ulong off2,
                     global const char* xq,       // [n, cols]
                     global const short* xq16,    // [n, cols]
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
  const int nb = cols / 32;
  float16 acc[NB];
  for (int i = 0; i < NB; ++i) acc[i] = 0.0f;
  for (int b = 0; b < nb; ++b) {
    const size_t rec = (size_t)g * nb + b;
#if defined(WEIGHT_Q8_0)
    global const ushort16* qs = (global const ushort16*)(wbuf + off0) + rec * 16;
    PREFETCH(qs + AHEAD(512) * 16, 512);
    S8PAIRS_T w[16];
#pragma unroll
    for (int p = 0; p < 16; ++p) w[p] = widen_s8pairs(qs[p]);
    const float16 d = vload_half16(rec, (global const half*)(wbuf + off1));
#else
    global const uint16* qs = (global const uint16*)(wbuf + off0) + rec * 4;
    PREFETCH(qs + AHEAD(256) * 4, 256);
    const uint16 p0 = qs[0], p1 = qs[1], p2 = qs[2], p3 = qs[3];
    uint16 l0 = lo_nibbles(p0), l1 = lo_nibbles(p1), l2 = lo_nibbles(p2), l3 = lo_nibbles(p3);
    uint16 h0 = hi_nibbles(p0), h1 = hi_nibbles(p1), h2 = hi_nibbles(p2), h3 = hi_nibbles(p3);
#if defined(WEIGHT_Q4_0) || defined(WEIGHT_IQ4_NL)
    const float16 d = vload_half16(rec, (global const half*)(wbuf + off1));
#elif defined(WEIGHT_Q4_1)
    const float16 d = vload_half16(2 * rec, (global const half*)(wbuf + off1));
    const float16 m = vload_half16(2 * rec + 1, (global const half*)(wbuf + off1));
#elif defined(WEIGHT_Q5_0) || defined(WEIGHT_Q5_1)
    // H: byte s, bit c = fifth bit of element 4c + s; bit 4 + c = that of element 16 + 4c + s.
    const uint16 hb = ((global const uint16*)(wbuf + off1))[rec];
    const uint16 m5 = (uint16)(0x10101010u);
    l0 |= (hb << 4) & m5;
    l1 |= (hb << 3) & m5;
    l2 |= (hb << 2) & m5;
    l3 |= (hb << 1) & m5;
    h0 |= hb & m5;
    h1 |= (hb >> 1) & m5;
    h2 |= (hb >> 2) & m5;
    h3 |= (hb >> 3) & m5;
#if defined(WEIGHT_Q5_0)
    const float16 d = vload_half16(rec, (global const half*)(wbuf + off2));
#else
    const float16 d = vload_half16(2 * rec, (global const half*)(wbuf + off2));
    const float16 m = vload_half16(2 * rec + 1, (global const half*)(wbuf + off2));
#endif
#elif defined(WEIGHT_IQ4_XS)
    // d * (ls - 32): exact (an f16 times an integer below 2^6)
    const int16 ls = convert_int16(vload16(rec, wbuf + off1));
    const float16 d = vload_half16(rec / 8, (global const half*)(wbuf + off2)) *
                      convert_float16(ls - 32);
#else
#error "define WEIGHT_Q4_0, WEIGHT_Q4_1, WEIGHT_Q5_0, WEIGHT_Q5_1, WEIGHT_Q8_0 or WEIGHT_IQ4_*"
#endif
#if defined(WEIGHT_IQ4_NL) || defined(WEIGHT_IQ4_XS)
    // table values (signed bytes) as Q8_0's pairs: w[p] = elements 2p, 2p + 1
    S8PAIRS_T w[16];
    const uint16 v[8] = {iq4_lookup(l0), iq4_lookup(l1), iq4_lookup(l2), iq4_lookup(l3),
                         iq4_lookup(h0), iq4_lookup(h1), iq4_lookup(h2), iq4_lookup(h3)};
#pragma unroll
    for (int t = 0; t < 8; ++t) {
      w[2 * t] = s8pairs_lo(v[t]);
      w[2 * t + 1] = s8pairs_hi(v[t]);
    }
#endif
#endif
    for (int i = 0; i < nr; ++i) {
      const size_t row = (size_t)(i0 + i);
      const act_rec r = xrec[row * nb + b];
#if defined(WEIGHT_Q8_0) || defined(WEIGHT_IQ4_NL) || defined(WEIGHT_IQ4_XS)
      global const int* xp = (global const int*)(xq16 + row * cols + (size_t)b * 32);
      int16 s = DOT2(w[0], xp[0]);
#pragma unroll
      for (int p = 1; p < 16; ++p) s += DOT2(w[p], xp[p]);
      acc[i] = fma(convert_float16(s) * d, (float16)(r.s0), acc[i]);
#else
      global const int* xp = (global const int*)(xq + row * cols + (size_t)b * 32);
#if defined(WEIGHT_Q5_0) || defined(WEIGHT_Q5_1)
      // values <= 31: 4 pair sums of 2 * 31 * 127 fit in 16 bits
      const int16 s = WIDEN(DOT4(l0, xp[0]) + DOT4(l1, xp[1]) + DOT4(l2, xp[2]) + DOT4(l3, xp[3])) +
                      WIDEN(DOT4(h0, xp[4]) + DOT4(h1, xp[5]) + DOT4(h2, xp[6]) + DOT4(h3, xp[7]))
#if defined(WEIGHT_Q5_0)
                      - 16 * act_sum(r)
#endif
          ;
#else
      // values <= 15: 8 pair sums of 2 * 15 * 127 fit in 16 bits
      const int16 s = WIDEN(DOT4(l0, xp[0]) + DOT4(l1, xp[1]) + DOT4(l2, xp[2]) + DOT4(l3, xp[3]) +
                            DOT4(h0, xp[4]) + DOT4(h1, xp[5]) + DOT4(h2, xp[6]) + DOT4(h3, xp[7]))
#if defined(WEIGHT_Q4_0)
                      - 8 * act_sum(r)
#endif
          ;
#endif
      acc[i] = fma(convert_float16(s) * d, (float16)(r.s0), acc[i]);
#if defined(WEIGHT_Q4_1) || defined(WEIGHT_Q5_1)
      acc[i] = fma(m, (float16)(r.s1), acc[i]);
#endif
#endif
    }
  }
  for (int i = 0; i < nr; ++i) store_rows(y + y_off + (size_t)(i0 + i) * ldy, acc[i], g * 16, rows);
}
