// AVX-512 kernels (16 lanes = the 16 weight rows of a group, one zmm accumulator per activation
// row, no horizontal sums), shared by matmul_avx512bw.cpp (kVnni = false: vpmaddubsw with 16-bit
// pair sums, bounded below 2^15 by grouping, widened by vpmaddwd) and matmul_avx512_vnni.cpp
// (kVnni = true: vpdpbusd, exact in int32). Included only by those two translation units, each
// compiled with its own flags; everything here has internal linkage (the anonymous namespace),
// so the two copies never meet in the linker. Numerics: docs/quant.md; the integers are exact on
// both, and the float operations are the reference's, in its order.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu/matmul_avx512_common.h"
#include "cpu/matmul_avx512_k.h"
#include "cpu/matmul_kernels.h"

namespace specdec::cpu::kernels {
namespace {
// Q4_0 / Q4_1 / Q5_0 / Q5_1: 4 vectors per block, low nibbles elements 4t.., high nibbles
// 16 + 4t..; Q5's fifth bits from the transposed qh word of each lane (byte s, bit c = element
// 4c + s; bit 4 + c = element 16 + 4c + s). Values <= 15: 8 pair sums fit in 16 bits; <= 31: 4.
// Offsets (Q4_0 8, Q5_0 16) come off as off * sum(xq); Q4_1 / Q5_1 add m * (d_x * sum(xq)).
template <bool kVnni, int kType, int kN>
void q32(const Args& a, int64_t g) {
  constexpr bool q5 = kType == kTypeQ5_0 || kType == kTypeQ5_1;
  constexpr bool has_m = kType == kTypeQ4_1 || kType == kTypeQ5_1;
  constexpr int off = kType == kTypeQ4_0 ? 8 : kType == kTypeQ5_0 ? 16 : 0;
  constexpr int group = q5 ? 4 : 8;
  const int n = kN > 0 ? kN : a.n;
  const int64_t nb = a.blocks_per_row;
  const __m512i m4 = _mm512_set1_epi8(0x0F), m5 = _mm512_set1_epi8(0x10);
  __m512 acc[kMaxRows];
  for (int i = 0; i < n; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t rec = g * nb + b;
    const uint8_t* qs = a.plane[0] + rec * 256;
    prefetch_ahead<256>(qs);
    const uint8_t* dp = a.plane[q5 ? 2 : 1] + rec * (has_m ? 64 : 32);
    const __m512 d = f16_to_ps(dp);
    __m512i w[8];
    for (int t = 0; t < 4; ++t) {
      const __m512i p = load64(qs + 64 * t);
      w[t] = _mm512_and_si512(p, m4);
      w[4 + t] = _mm512_and_si512(_mm512_srli_epi16(p, 4), m4);
    }
    if constexpr (q5) {
      const __m512i h = load64(a.plane[1] + rec * 64);
      w[0] = _mm512_or_si512(w[0], _mm512_and_si512(_mm512_slli_epi16(h, 4), m5));
      w[1] = _mm512_or_si512(w[1], _mm512_and_si512(_mm512_slli_epi16(h, 3), m5));
      w[2] = _mm512_or_si512(w[2], _mm512_and_si512(_mm512_slli_epi16(h, 2), m5));
      w[3] = _mm512_or_si512(w[3], _mm512_and_si512(_mm512_slli_epi16(h, 1), m5));
      w[4] = _mm512_or_si512(w[4], _mm512_and_si512(h, m5));
      w[5] = _mm512_or_si512(w[5], _mm512_and_si512(_mm512_srli_epi16(h, 1), m5));
      w[6] = _mm512_or_si512(w[6], _mm512_and_si512(_mm512_srli_epi16(h, 2), m5));
      w[7] = _mm512_or_si512(w[7], _mm512_and_si512(_mm512_srli_epi16(h, 3), m5));
    }
    for (int i = 0; i < n; ++i) {
      const int64_t at = i * nb + b;
      [[maybe_unused]] const int32_t sum = a.xr[at].s0 + a.xr[at].s1;
      __m512i s = dot_u8<kVnni, 8, group>(w, a.xq + i * a.cols + 32 * b);
      if constexpr (off != 0) s = _mm512_sub_epi32(s, _mm512_set1_epi32(off * sum));
      const float dx = a.xr[at].d;
      acc[i] = step(acc[i], s, d, dx);
      if constexpr (has_m) {
        // m * (d_x * sum(q)): the record's dsum is that float
        acc[i] = _mm512_fmadd_ps(f16_to_ps(dp + 32), _mm512_set1_ps(a.xr[at].dsum), acc[i]);
      }
    }
  }
  store_group(a, g, acc, n);
}

// Q8_0, VNNI: vectors 2k, 2k + 1 (2 bytes per lane each) joined by vpermw into 4 bytes per lane
// (elements 4k .. 4k + 3), made unsigned by + 128 (xor 0x80); the 128 * sum(xq) comes off after.
template <int kN>
void q8_0_vnni(const Args& a, int64_t g) {
  const int n = kN > 0 ? kN : a.n;
  const int64_t nb = a.blocks_per_row;
  alignas(64) int16_t idx[32];
  for (int l = 0; l < 16; ++l) {
    idx[2 * l] = static_cast<int16_t>(l);
    idx[2 * l + 1] = static_cast<int16_t>(16 + l);
  }
  const __m512i join = _mm512_load_si512(idx);
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[kMaxRows];
  for (int i = 0; i < n; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t rec = g * nb + b;
    const uint8_t* qs = a.plane[0] + rec * 512;
    prefetch_ahead<512>(qs);
    const __m512 d = f16_to_ps(a.plane[1] + rec * 32);
    __m512i w[8];
    for (int k = 0; k < 8; ++k)
      w[k] = _mm512_xor_si512(_mm512_permutexvar_epi16(join, load64(qs + 64 * k)), bias);
    for (int i = 0; i < n; ++i) {
      const int64_t at = i * nb + b;
      const __m512i s = _mm512_sub_epi32(dot_u8<true, 8, 1>(w, a.xq + i * a.cols + 32 * b),
                                         _mm512_set1_epi32(128 * (a.xr[at].s0 + a.xr[at].s1)));
      acc[i] = step(acc[i], s, d, a.xr[at].d);
    }
  }
  store_group(a, g, acc, n);
}

// Q8_0, BW: vector p (elements 2p, 2p + 1 per lane) sign-extended to 16-bit pairs and dotted
// with the activation pair by vpmaddwd (exact in int32).
template <int kN>
void q8_0_bw(const Args& a, int64_t g) {
  const int n = kN > 0 ? kN : a.n;
  const int64_t nb = a.blocks_per_row;
  __m512 acc[kMaxRows];
  for (int i = 0; i < n; ++i) acc[i] = _mm512_setzero_ps();
  alignas(64) int32_t pairs[16];
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t rec = g * nb + b;
    const uint8_t* qs = a.plane[0] + rec * 512;
    prefetch_ahead<512>(qs);
    const __m512 d = f16_to_ps(a.plane[1] + rec * 32);
    __m512i w[16];
    for (int p = 0; p < 16; ++p)
      w[p] =
          _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * p)));
    for (int i = 0; i < n; ++i) {
      const int64_t at = i * nb + b;
      const __m256i x8 =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.xq + i * a.cols + 32 * b));
      _mm512_store_si512(pairs, _mm512_cvtepi8_epi16(x8));
      __m512i s0 = _mm512_madd_epi16(w[0], _mm512_set1_epi32(pairs[0]));
      __m512i s1 = _mm512_madd_epi16(w[1], _mm512_set1_epi32(pairs[1]));
      for (int p = 2; p < 16; p += 2) {
        s0 = _mm512_add_epi32(s0, _mm512_madd_epi16(w[p], _mm512_set1_epi32(pairs[p])));
        s1 = _mm512_add_epi32(s1, _mm512_madd_epi16(w[p + 1], _mm512_set1_epi32(pairs[p + 1])));
      }
      acc[i] = step(acc[i], _mm512_add_epi32(s0, s1), d, a.xr[at].d);
    }
  }
  store_group(a, g, acc, n);
}

// IQ4_NL / IQ4_XS (one IQ4_NL-like sub-block per 32 elements, 8 per IQ4_XS record with
// d * (ls - 32)): 4-bit indices to table values by one vpshufb per vector. VNNI: the table holds
// value + 128 (unsigned), vpdpbusd, then 128 * sum(xq) off. BW: |value| as the unsigned operand
// and the value's sign moved onto the activation bytes (a masked negation), so one vpmaddubsw
// pair sum is at most 2 * 127 * 127 < 2^15 (activations are in [-127, 127]).
template <bool kVnni, int kType, int kN>
void iq4(const Args& a, int64_t g) {
  constexpr bool xs = kType == kTypeIQ4_XS;
  constexpr int subs = xs ? 8 : 1;
  const int n = kN > 0 ? kN : a.n;
  const int64_t nrec = a.blocks_per_row, nb = a.cols / 32;
  alignas(64) int8_t table_bytes[64];
  for (int k = 0; k < 64; ++k)
    table_bytes[k] = static_cast<int8_t>(kVnni ? kIq4Table[k % 16] + 128 : kIq4Table[k % 16]);
  const __m512i table = _mm512_load_si512(table_bytes);
  const __m512i m4 = _mm512_set1_epi8(0x0F), ones = _mm512_set1_epi16(1);
  __m512 acc[kMaxRows];
  for (int i = 0; i < n; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t r = 0; r < nrec; ++r) {
    const int64_t rec = g * nrec + r;
    const uint8_t* dp = a.plane[xs ? 2 : 1] + rec * 32;
    for (int ib = 0; ib < subs; ++ib) {
      const uint8_t* qs = a.plane[0] + rec * (256 * subs) + 256 * ib;
      prefetch_ahead<256>(qs);
      __m512 d = f16_to_ps(dp);
      if constexpr (xs) {
        const __m512i ls = _mm512_cvtepu8_epi32(
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(a.plane[1] + rec * 128 + 16 * ib)));
        d = _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_sub_epi32(ls, _mm512_set1_epi32(32))));
      }
      __m512i w[8];
      __mmask64 neg[8];
      for (int t = 0; t < 4; ++t) {
        const __m512i p = load64(qs + 64 * t);
        w[t] = _mm512_shuffle_epi8(table, _mm512_and_si512(p, m4));
        w[4 + t] = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(p, 4), m4));
      }
      if constexpr (!kVnni) {
        for (int k = 0; k < 8; ++k) {
          neg[k] = _mm512_movepi8_mask(w[k]);
          w[k] = _mm512_abs_epi8(w[k]);
        }
      }
      const int64_t b = r * subs + ib;
      for (int i = 0; i < n; ++i) {
        const int64_t at = i * nb + b;
        const int8_t* x = a.xq + i * a.cols + 32 * b;
        __m512i s;
        if constexpr (kVnni) {
          s = _mm512_sub_epi32(dot_u8<true, 8, 1>(w, x),
                               _mm512_set1_epi32(128 * (a.xr[at].s0 + a.xr[at].s1)));
        } else {
          s = _mm512_setzero_si512();
          for (int k = 0; k < 8; ++k) {
            const __m512i xb = bcast4(x + 4 * k);
            const __m512i xsg = _mm512_mask_sub_epi8(xb, neg[k], _mm512_setzero_si512(), xb);
            s = _mm512_add_epi32(s, _mm512_madd_epi16(_mm512_maddubs_epi16(w[k], xsg), ones));
          }
        }
        acc[i] = step(acc[i], s, d, a.xr[at].d);
      }
    }
  }
  store_group(a, g, acc, n);
}

// F32 / F16 / BF16 weights, f32 activations: element k of the 16 rows per record, fma into 4
// partial sums by k % 4, then (s0 + s1) + (s2 + s3) (the reference's order).
template <int kType>
inline __m512 load_w(const uint8_t* rec) {
  if constexpr (kType == kTypeF32) return _mm512_loadu_ps(rec);
  if constexpr (kType == kTypeF16) return f16_to_ps(rec);
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(rec));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bits), 16));
}

template <int kType, int kN>
void float_w(const Args& a, int64_t g) {
  constexpr int64_t rec_bytes = (kType == kTypeF32 ? 4 : 2) * kLanes;
  const int n = kN > 0 ? kN : a.n;
  const uint8_t* w = a.plane[0] + g * a.cols * rec_bytes;
  __m512 acc[kMaxRows][4];
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < 4; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 4 <= a.cols; k += 4) {
    const __m512 w0 = load_w<kType>(w + k * rec_bytes), w1 = load_w<kType>(w + (k + 1) * rec_bytes);
    const __m512 w2 = load_w<kType>(w + (k + 2) * rec_bytes),
                 w3 = load_w<kType>(w + (k + 3) * rec_bytes);
    for (int i = 0; i < n; ++i) {
      const float* x = a.x + i * a.cols + k;
      acc[i][0] = _mm512_fmadd_ps(w0, _mm512_set1_ps(x[0]), acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(w1, _mm512_set1_ps(x[1]), acc[i][1]);
      acc[i][2] = _mm512_fmadd_ps(w2, _mm512_set1_ps(x[2]), acc[i][2]);
      acc[i][3] = _mm512_fmadd_ps(w3, _mm512_set1_ps(x[3]), acc[i][3]);
    }
  }
  for (; k < a.cols; ++k) {
    const __m512 wk = load_w<kType>(w + k * rec_bytes);
    for (int i = 0; i < n; ++i)
      acc[i][k & 3] = _mm512_fmadd_ps(wk, _mm512_set1_ps(a.x[i * a.cols + k]), acc[i][k & 3]);
  }
  __m512 sum[kMaxRows];
  for (int i = 0; i < n; ++i)
    sum[i] =
        _mm512_add_ps(_mm512_add_ps(acc[i][0], acc[i][1]), _mm512_add_ps(acc[i][2], acc[i][3]));
  store_group(a, g, sum, n);
}

// Up to kBlockRows rows (a decode, a verify of up to 7 drafts) by the kernel of that row count,
// known at compile time (the accumulators stay in registers and the row loops unroll): in-cache
// on the 2-vCPU Xeon VM, a Q4_K 8960 x 1536 matmul for 4 rows 746 -> 558 us and for 8 rows
// 1191 -> 837 us. More rows by the kernel of any row count (its accumulators in memory; faster
// there than blocks of 8, which unpack each weight block twice). A row's arithmetic is the same
// in either (rows never mix): batch invariant.
inline constexpr int kBlockRows = 8;

template <typename K>  // K::run<kN>(const Args&, int64_t): the kernel for kN rows (0: any)
void by_rows(const Args& a, int64_t g) {
  switch (a.n) {
    case 1: K::template run<1>(a, g); break;
    case 2: K::template run<2>(a, g); break;
    case 3: K::template run<3>(a, g); break;
    case 4: K::template run<4>(a, g); break;
    case 5: K::template run<5>(a, g); break;
    case 6: K::template run<6>(a, g); break;
    case 7: K::template run<7>(a, g); break;
    case kBlockRows: K::template run<kBlockRows>(a, g); break;
    default: K::template run<0>(a, g); break;
  }
}

template <int kType> struct FloatW { template <int kN> static void run(const Args& a, int64_t g) { float_w<kType, kN>(a, g); } };
template <bool kV, int kType> struct Q4K { template <int kN> static void run(const Args& a, int64_t g) { q4_k<kV, kType, kN>(a, g); } };
template <bool kV, int kType> struct Q23K { template <int kN> static void run(const Args& a, int64_t g) { q2_q3_k<kV, kType, kN>(a, g); } };
template <bool kV> struct Q6K { template <int kN> static void run(const Args& a, int64_t g) { q6_k<kV, kN>(a, g); } };
template <bool kV, int kType> struct Q32 { template <int kN> static void run(const Args& a, int64_t g) { q32<kV, kType, kN>(a, g); } };
template <bool kV, int kType> struct Iq4 { template <int kN> static void run(const Args& a, int64_t g) { iq4<kV, kType, kN>(a, g); } };
struct Q80Vnni { template <int kN> static void run(const Args& a, int64_t g) { q8_0_vnni<kN>(a, g); } };
struct Q80Bw { template <int kN> static void run(const Args& a, int64_t g) { q8_0_bw<kN>(a, g); } };

template <bool kVnni>
GroupKernel avx512_kernel(int type) {
  switch (type) {
    case kTypeF32:
      return by_rows<FloatW<kTypeF32>>;
    case kTypeF16:
      return by_rows<FloatW<kTypeF16>>;
    case kTypeBF16:
      return by_rows<FloatW<kTypeBF16>>;
    case kTypeQ4_K:
      return by_rows<Q4K<kVnni, kTypeQ4_K>>;
    case kTypeQ5_K:
      return by_rows<Q4K<kVnni, kTypeQ5_K>>;
    case kTypeQ2_K:
      return by_rows<Q23K<kVnni, kTypeQ2_K>>;
    case kTypeQ3_K:
      return by_rows<Q23K<kVnni, kTypeQ3_K>>;
    case kTypeQ6_K:
      return by_rows<Q6K<kVnni>>;
    case kTypeQ4_0:
      return by_rows<Q32<kVnni, kTypeQ4_0>>;
    case kTypeQ4_1:
      return by_rows<Q32<kVnni, kTypeQ4_1>>;
    case kTypeQ5_0:
      return by_rows<Q32<kVnni, kTypeQ5_0>>;
    case kTypeQ5_1:
      return by_rows<Q32<kVnni, kTypeQ5_1>>;
    case kTypeIQ4_NL:
      return by_rows<Iq4<kVnni, kTypeIQ4_NL>>;
    case kTypeIQ4_XS:
      return by_rows<Iq4<kVnni, kTypeIQ4_XS>>;
    case kTypeQ8_0:
      if constexpr (kVnni) return by_rows<Q80Vnni>;
      return by_rows<Q80Bw>;
    default:
      return nullptr;
  }
}

}  // namespace
}  // namespace specdec::cpu::kernels
