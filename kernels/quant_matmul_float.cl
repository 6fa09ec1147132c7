// y = x . W^T for F32 / F16 / BF16 weights (-DWEIGHT_F32, -DWEIGHT_F16, -DWEIGHT_BF16) in the
// 16-row interleaved layout (plane "w": record k of group g = element k of its 16 rows).
// -DNB: activation rows per work-item (any n <= NB; the host picks NB). One work-item = one group
// of 16 output rows x up to NB activation rows; float16 lanes = the 16 output rows.
//
// Numerics (fixed per output element, whatever n or the row's position): element k is
// accumulated with fma into partial sum k % 4 in increasing k; y = (s0 + s1) + (s2 + s3).
#include "quant_common.clh"

#if defined(WEIGHT_F32)
typedef float w_t;
inline float16 load_w(global const w_t* p) { return vload16(0, p); }
#elif defined(WEIGHT_F16)
typedef half w_t;
inline float16 load_w(global const w_t* p) { return vload_half16(0, p); }
#elif defined(WEIGHT_BF16)
typedef ushort w_t;
inline float16 load_w(global const w_t* p) { return as_float16(convert_uint16(vload16(0, p)) << 16); }
#else
#error "define WEIGHT_F32, WEIGHT_F16 or WEIGHT_BF16"
#endif


kernel void matmul_float(global const uchar* wbuf, ulong w_off,
                         global const float* x,  // [n, cols]
                         global float* y,        // [n, ldy] from column y_off
                         int rows, int cols, int n,
                         int y_off, int ldy) {  // y row i at y + y_off + i * ldy
  const int g = get_global_id(0);
  if (g * 16 >= rows) return;  // padding work-items of a rounded-up global size
  const int i0 = get_global_id(1) * NB;
  // NB == 1 (decode): one row, known at compile time, so the decoded weights feed the dot
  // products directly instead of being kept (spilled on AVX2) for a loop over rows.
  const int nr = NB == 1 ? 1 : min(NB, n - i0);
  global const w_t* w = (global const w_t*)(wbuf + w_off) + (size_t)g * cols * 16;
  global const float* xr = x + (size_t)i0 * cols;
  float16 acc[NB][4];
  for (int i = 0; i < NB; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
  int k = 0;
  for (; k + 8 <= cols; k += 8) {
    PREFETCH((global const uchar*)(w + (size_t)k * 16) + QUANT_PREFETCH, 8 * 16 * (int)sizeof(w_t));
    const float16 w0 = load_w(w + (size_t)(k + 0) * 16), w1 = load_w(w + (size_t)(k + 1) * 16);
    const float16 w2 = load_w(w + (size_t)(k + 2) * 16), w3 = load_w(w + (size_t)(k + 3) * 16);
    const float16 w4 = load_w(w + (size_t)(k + 4) * 16), w5 = load_w(w + (size_t)(k + 5) * 16);
    const float16 w6 = load_w(w + (size_t)(k + 6) * 16), w7 = load_w(w + (size_t)(k + 7) * 16);
    for (int i = 0; i < nr; ++i) {
      global const float* xp = xr + (size_t)i * cols + k;
      float16 a0 = acc[i][0], a1 = acc[i][1], a2 = acc[i][2], a3 = acc[i][3];
      a0 = fma(w0, (float16)(xp[0]), a0);
      a1 = fma(w1, (float16)(xp[1]), a1);
      a2 = fma(w2, (float16)(xp[2]), a2);
      a3 = fma(w3, (float16)(xp[3]), a3);
      a0 = fma(w4, (float16)(xp[4]), a0);
      a1 = fma(w5, (float16)(xp[5]), a1);
      a2 = fma(w6, (float16)(xp[6]), a2);
      a3 = fma(w7, (float16)(xp[7]), a3);
      acc[i][0] = a0;
      acc[i][1] = a1;
      acc[i][2] = a2;
      acc[i][3] = a3;
    }
  }
  for (; k < cols; ++k) {
    const float16 wk = load_w(w + (size_t)k * 16);
    for (int i = 0; i < nr; ++i) acc[i][k & 3] = fma(wk, (float16)(xr[(size_t)i * cols + k]), acc[i][k & 3]);
  }
  for (int i = 0; i < nr; ++i) {
    const float16 s = (acc[i][0] + acc[i][1]) + (acc[i][2] + acc[i][3]);
    store_rows(y + y_off + (size_t)(i0 + i) * ldy, s, g * 16, rows);
  }
}
