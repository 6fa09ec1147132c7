// Embedding lookup: rows `ids` of a weight matrix in the device layout of cpp/quant/layout.cpp,
// dequantised (the same float operations as quant::dequantize_row, so the values are bitwise
// those of the reference) and multiplied by `scale`. -DWEIGHT_<type> selects the format.
// One work-item per (32-element chunk, token). Ids are clamped to [0, rows) (the host checks
// them first), so a bad id never reads outside the weights.
#include "quant_common.clh"

inline float f16_at(global const uchar* base, size_t index) {
  return vload_half(index, (global const half*)base);
}
inline uint u32_at(global const uchar* base, size_t index) {
  return ((global const uint*)base)[index];
}

// Element e (0..31) of chunk j of row `lane` of group g.
inline float element(global const uchar* w, ulong off0, ulong off1, ulong off2, ulong off3,
                     int g, int lane, int j, int e, int cols) {
#if defined(WEIGHT_F32) || defined(WEIGHT_F16) || defined(WEIGHT_BF16)
  const size_t at = ((size_t)g * cols + (size_t)j * 32 + e) * 16 + lane;
#if defined(WEIGHT_F32)
  return ((global const float*)(w + off0))[at];
#elif defined(WEIGHT_F16)
  return f16_at(w + off0, at);
#else
  return as_float((uint)(((global const ushort*)(w + off0))[at]) << 16);
#endif
#elif defined(WEIGHT_Q8_0) || defined(WEIGHT_Q4_0) || defined(WEIGHT_Q4_1) || \
    defined(WEIGHT_Q5_0) || defined(WEIGHT_Q5_1) || defined(WEIGHT_IQ4_NL) || defined(WEIGHT_IQ4_XS)
  const size_t rec = (size_t)g * (cols / 32) + j;  // IQ4_XS: records per 32-element sub-block
#if defined(WEIGHT_Q8_0)
  const char q = ((global const char*)(w + off0))[rec * 512 + ((e / 2) * 16 + lane) * 2 + e % 2];
  return (float)q * f16_at(w + off1, rec * 16 + lane);
#else
  const int e16 = e % 16;
  const uchar byte = w[off0 + rec * 256 + ((e16 / 4) * 16 + lane) * 4 + e16 % 4];
  const int nib = e < 16 ? (byte & 0xF) : (byte >> 4);
#if defined(WEIGHT_Q4_0)
  return (float)(nib - 8) * f16_at(w + off1, rec * 16 + lane);
#elif defined(WEIGHT_Q4_1)
  return (float)nib * f16_at(w + off1, rec * 32 + lane) + f16_at(w + off1, rec * 32 + 16 + lane);
#elif defined(WEIGHT_IQ4_NL)
  return f16_at(w + off1, rec * 16 + lane) * (float)kIq4Table[nib];
#elif defined(WEIGHT_IQ4_XS)
  const int ls = w[off1 + rec * 16 + lane];
  const float dl = f16_at(w + off2, (rec / 8) * 16 + lane) * (float)(ls - 32);
  return dl * (float)kIq4Table[nib];
#else
  const uint h = u32_at(w + off1, rec * 16 + lane);
  const int bit = 8 * (e16 % 4) + (e < 16 ? 0 : 4) + e16 / 4;
  const int q5 = nib | (int)((h >> bit) & 1u) << 4;
#if defined(WEIGHT_Q5_0)
  return (float)(q5 - 16) * f16_at(w + off2, rec * 16 + lane);
#else
  return (float)q5 * f16_at(w + off2, rec * 32 + lane) + f16_at(w + off2, rec * 32 + 16 + lane);
#endif
#endif
#endif
#elif defined(WEIGHT_Q4_K) || defined(WEIGHT_Q5_K)
  const size_t rec = (size_t)g * (cols / 256) + j / 8;
  const int jj = j % 8, c = jj / 2, t = e / 4, s = e % 4;
  const uchar byte = w[off0 + rec * 2048 + ((c * 8 + t) * 16 + lane) * 4 + s];
  int q = jj % 2 == 0 ? (byte & 0xF) : (byte >> 4);
#if defined(WEIGHT_Q5_K)
  q |= ((w[off1 + rec * 512 + (t * 16 + lane) * 4 + s] >> jj) & 1) << 4;
  const ulong sc_off = off2, dm_off = off3;
#else
  const ulong sc_off = off1, dm_off = off2;
#endif
  const float d = f16_at(w + dm_off, rec * 32 + lane), dmin = f16_at(w + dm_off, rec * 32 + 16 + lane);
  const float d1 = d * (float)w[sc_off + rec * 256 + jj * 16 + lane];
  const float m1 = dmin * (float)w[sc_off + rec * 256 + (8 + jj) * 16 + lane];
  return d1 * (float)q - m1;
#elif defined(WEIGHT_Q2_K)
  const size_t rec = (size_t)g * (cols / 256) + j / 8;
  const int jj = j % 8, n = jj / 4, jq = jj % 4, h = e / 16, l = e % 16;
  const int qb = 32 * n + 16 * h + l;  // byte of qs in the block
  const uchar q = w[off0 + rec * 1024 + ((qb / 4) * 16 + lane) * 4 + qb % 4];
  const uchar sc = w[off1 + rec * 256 + (8 * n + 2 * jq + h) * 16 + lane];
  const float d = f16_at(w + off2, rec * 32 + lane), dmin = f16_at(w + off2, rec * 32 + 16 + lane);
  return (d * (float)(sc & 0xF)) * (float)((q >> (2 * jq)) & 3) - dmin * (float)(sc >> 4);
#elif defined(WEIGHT_Q3_K)
  const size_t rec = (size_t)g * (cols / 256) + j / 8;
  const int jj = j % 8, n = jj / 4, jq = jj % 4, h = e / 16, l = e % 16;
  const int qb = 32 * n + 16 * h + l, hb = 16 * h + l;  // bytes of qs and hmask in the block
  const uchar q = w[off0 + rec * 1024 + ((qb / 4) * 16 + lane) * 4 + qb % 4];
  const uchar hm = w[off1 + rec * 512 + ((hb / 4) * 16 + lane) * 4 + hb % 4];
  const int v = (((q >> (2 * jq)) & 3) | (((hm >> (4 * n + jq)) & 1) << 2)) - 4;
  const int ls = w[off2 + rec * 256 + (8 * n + 2 * jq + h) * 16 + lane];
  return (f16_at(w + off3, rec * 16 + lane) * (float)(ls - 32)) * (float)v;
#elif defined(WEIGHT_Q6_K)
  const size_t rec = (size_t)g * (cols / 256) + j / 8;
  const int jg = j % 8, h = jg / 4, m = jg % 4, t = e / 4, s = e % 4;
  const uchar lq = w[off0 + rec * 2048 + ((16 * h + 8 * (m & 1) + t) * 16 + lane) * 4 + s];
  const uchar hq = w[off1 + rec * 1024 + ((8 * h + t) * 16 + lane) * 4 + s];
  const int q = ((m < 2 ? (lq & 0xF) : (lq >> 4)) | (((hq >> (2 * m)) & 3) << 4)) - 32;
  const char sc = ((global const char*)(w + off2))[rec * 256 + (8 * h + 2 * m + e / 16) * 16 + lane];
  return f16_at(w + off3, rec * 16 + lane) * (float)sc * (float)q;
#else
#error "define WEIGHT_<type>"
#endif
}

kernel void embedding_lookup(global const uchar* w, ulong off0, ulong off1, ulong off2, ulong off3,
                             global const int* ids,  // [n]
                             global float* out,      // [n, cols]
                             int rows, int cols, float scale) {
  const int j = get_global_id(0);
  const int i = get_global_id(1);
  const int id = clamp(ids[i], 0, rows - 1);
  const int g = id / 16, lane = id % 16;
  const int count = min(32, cols - j * 32);
  global float* o = out + (size_t)i * cols + (size_t)j * 32;
  for (int e = 0; e < count; ++e) o[e] = element(w, off0, off1, off2, off3, g, lane, j, e, cols) * scale;
}
