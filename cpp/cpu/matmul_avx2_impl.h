// AVX2 kernels, shared by matmul_avx2.cpp (kVnni = false: vpmaddubsw with 16-bit pair sums,
// bounded below 2^15 by grouping, widened by vpmaddwd) and matmul_avx_vnni.cpp (kVnni = true:
// VEX vpdpbusd, exact in int32). A group's 16 rows are run as two halves of 8 lanes (bytes
// [32h, 32h + 32) of every 64-byte vector of the layout), one ymm accumulator per activation row.
// Included only by those two translation units, each with its own flags; everything here has
// internal linkage. Numerics: docs/quant.md; the integers are exact and the float operations are
// the reference's, in its order.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu/matmul_avx2_common.h"
#include "cpu/matmul_avx2_k.h"
#include "cpu/matmul_kernels.h"

namespace specdec::cpu::kernels {
namespace {
// Q4_0 / Q4_1 / Q5_0 / Q5_1 (see matmul_avx512_impl.h), on half h of the group.
template <bool kVnni, int kType, int kN>
void q32_half(const Args& a, int64_t g, int h) {
  constexpr bool q5 = kType == kTypeQ5_0 || kType == kTypeQ5_1;
  constexpr bool has_m = kType == kTypeQ4_1 || kType == kTypeQ5_1;
  constexpr int off = kType == kTypeQ4_0 ? 8 : kType == kTypeQ5_0 ? 16 : 0;
  constexpr int group = q5 ? 4 : 8;
  const int n = kN > 0 ? kN : a.n;
  const int64_t nb = a.blocks_per_row;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc[kMaxRows];
  for (int i = 0; i < n; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t rec = g * nb + b;
    const uint8_t* qs = a.plane[0] + rec * 256 + 32 * h;
    if (h == 0) prefetch_ahead<256>(qs);
    const uint8_t* dp = a.plane[q5 ? 2 : 1] + rec * (has_m ? 64 : 32) + 16 * h;
    const __m256 d = f16_to_ps(dp);
    __m256i w[8];
    for (int t = 0; t < 4; ++t) {
      const __m256i p = load32(qs + 64 * t);
      w[t] = _mm256_and_si256(p, m4);
      w[4 + t] = _mm256_and_si256(_mm256_srli_epi16(p, 4), m4);
    }
    if constexpr (q5) or_fifth_bits(w, load32(a.plane[1] + rec * 64 + 32 * h));
    for (int i = 0; i < n; ++i) {
      const int64_t at = i * nb + b;
      [[maybe_unused]] const int32_t sum = a.xr[at].s0 + a.xr[at].s1;
      __m256i s = dot_u8<kVnni, 8, group>(w, a.xq + i * a.cols + 32 * b);
      if constexpr (off != 0) s = _mm256_sub_epi32(s, _mm256_set1_epi32(off * sum));
      const float dx = a.xr[at].d;
      acc[i] = step(acc[i], s, d, dx);
      if constexpr (has_m) {
        // m * (d_x * sum(q)): the record's dsum is that float
        acc[i] = _mm256_fmadd_ps(f16_to_ps(dp + 32), _mm256_set1_ps(a.xr[at].dsum), acc[i]);
      }
    }
  }
  store_half(a, g, h, acc, n);
}

// Q4_0 / Q4_1 / Q5_0 / Q5_1 on both halves of a full group in one pass (see q4_k_both); per
// lane the float operations are those of q32_half, in its order.
template <bool kVnni, int kType, int kN>
void q32_both(const Args& a, int64_t g) {
  constexpr bool q5 = kType == kTypeQ5_0 || kType == kTypeQ5_1;
  constexpr bool has_m = kType == kTypeQ4_1 || kType == kTypeQ5_1;
  constexpr int off = kType == kTypeQ4_0 ? 8 : kType == kTypeQ5_0 ? 16 : 0;
  constexpr int group = q5 ? 4 : 8;
  const int n = kN > 0 ? kN : a.n;
  const int64_t nb = a.blocks_per_row;
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256 acc[2][kMaxRows];
  for (int i = 0; i < n; ++i) acc[0][i] = acc[1][i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t rec = g * nb + b;
    const uint8_t* qs = a.plane[0] + rec * 256;
    prefetch_ahead<256>(qs);
    const uint8_t* dp = a.plane[q5 ? 2 : 1] + rec * (has_m ? 64 : 32);
    __m256i w[2][8];
    __m256 d[2], mv[2];
    for (int h = 0; h < 2; ++h) {
      for (int t = 0; t < 4; ++t) {
        const __m256i p = load32(qs + 64 * t + 32 * h);
        w[h][t] = _mm256_and_si256(p, m4);
        w[h][4 + t] = _mm256_and_si256(_mm256_srli_epi16(p, 4), m4);
      }
      if constexpr (q5) or_fifth_bits(w[h], load32(a.plane[1] + rec * 64 + 32 * h));
      d[h] = f16_to_ps(dp + 16 * h);
      if constexpr (has_m) mv[h] = f16_to_ps(dp + 32 + 16 * h);
    }
    for (int i = 0; i < n; ++i) {
      const int64_t at = i * nb + b;
      const int8_t* x = a.xq + i * a.cols + 32 * b;
      __m256i s[2];
      dot_u8_both<kVnni, group>(w[0], w[1], x, s);
      [[maybe_unused]] const int32_t sum = a.xr[at].s0 + a.xr[at].s1;
      const float dx = a.xr[at].d;
      for (int h = 0; h < 2; ++h) {
        __m256i sh = s[h];
        if constexpr (off != 0) sh = _mm256_sub_epi32(sh, _mm256_set1_epi32(off * sum));
        acc[h][i] = step(acc[h][i], sh, d[h], dx);
        // m * (d_x * sum(q)): the record's dsum is that float
        if constexpr (has_m) acc[h][i] = _mm256_fmadd_ps(mv[h], _mm256_set1_ps(a.xr[at].dsum), acc[h][i]);
      }
    }
  }
  store_half(a, g, 0, acc[0], n);
  store_half(a, g, 1, acc[1], n);
}

// Q8_0 on half h. VNNI: vectors 2k, 2k + 1 (2 bytes per lane) interleaved by 16-bit unpacks into
// 4 bytes per lane, + 128 (xor 0x80), vpdpbusd, then 128 * sum(xq) off. Otherwise the same 4-byte
// lanes as |w| with w's signs on the activation bytes (vpsignb), vpmaddubsw and vpmaddwd.
template <bool kVnni, int kN>
void q8_0_half(const Args& a, int64_t g, int h) {
  const int n = kN > 0 ? kN : a.n;
  const int64_t nb = a.blocks_per_row;
  __m256 acc[kMaxRows];
  for (int i = 0; i < n; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const int64_t rec = g * nb + b;
    const uint8_t* qs = a.plane[0] + rec * 512 + 16 * h;
    if (h == 0) prefetch_ahead<512>(qs);
    const __m256 d = f16_to_ps(a.plane[1] + rec * 32 + 16 * h);
    if constexpr (kVnni) {
      const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
      __m256i w[8];
      for (int k = 0; k < 8; ++k) {
        const __m128i p0 = load16(qs + 64 * k), p1 = load16(qs + 64 * k + 32);
        w[k] = _mm256_xor_si256(
            _mm256_set_m128i(_mm_unpackhi_epi16(p0, p1), _mm_unpacklo_epi16(p0, p1)), bias);
      }
      for (int i = 0; i < n; ++i) {
        const int64_t at = i * nb + b;
        const __m256i s = _mm256_sub_epi32(dot_u8<true, 8, 1>(w, a.xq + i * a.cols + 32 * b),
                                           _mm256_set1_epi32(128 * (a.xr[at].s0 + a.xr[at].s1)));
        acc[i] = step(acc[i], s, d, a.xr[at].d);
      }
    } else {
      // |w| (unsigned) and w's signs moved onto the activation bytes (vpsignb, as IQ4 below):
      // |w| * |x| <= 128 * 127, so vpmaddubsw's pair sums stay below 2^15; widened by vpmaddwd
      const __m256i ones = _mm256_set1_epi16(1);
      __m256i w[8], sgn[8];
      for (int k = 0; k < 8; ++k) {
        const __m128i p0 = load16(qs + 64 * k), p1 = load16(qs + 64 * k + 32);
        sgn[k] = _mm256_set_m128i(_mm_unpackhi_epi16(p0, p1), _mm_unpacklo_epi16(p0, p1));
        w[k] = _mm256_abs_epi8(sgn[k]);
      }
      for (int i = 0; i < n; ++i) {
        const int64_t at = i * nb + b;
        const int8_t* x = a.xq + i * a.cols + 32 * b;
        __m256i s = _mm256_setzero_si256();
        for (int k = 0; k < 8; ++k) {
          const __m256i xsg = _mm256_sign_epi8(bcast4(x + 4 * k), sgn[k]);
          s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(w[k], xsg), ones));
        }
        acc[i] = step(acc[i], s, d, a.xr[at].d);
      }
    }
  }
  store_half(a, g, h, acc, n);
}

// IQ4_NL / IQ4_XS (see matmul_avx512_impl.h), on half h of the group; the non-VNNI path moves
// the value's sign onto the activation bytes with vpsignb.
template <bool kVnni, int kType, int kN>
void iq4_half(const Args& a, int64_t g, int h) {
  constexpr bool xs = kType == kTypeIQ4_XS;
  constexpr int subs = xs ? 8 : 1;
  const int n = kN > 0 ? kN : a.n;
  const int64_t nrec = a.blocks_per_row, nb = a.cols / 32;
  alignas(32) int8_t table_bytes[32];
  for (int k = 0; k < 32; ++k)
    table_bytes[k] = static_cast<int8_t>(kVnni ? kIq4Table[k % 16] + 128 : kIq4Table[k % 16]);
  const __m256i table = _mm256_load_si256(reinterpret_cast<const __m256i*>(table_bytes));
  const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  __m256 acc[kMaxRows];
  for (int i = 0; i < n; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t r = 0; r < nrec; ++r) {
    const int64_t rec = g * nrec + r;
    const uint8_t* dp = a.plane[xs ? 2 : 1] + rec * 32 + 16 * h;
    for (int ib = 0; ib < subs; ++ib) {
      const uint8_t* qs = a.plane[0] + rec * (256 * subs) + 256 * ib + 32 * h;
      if (h == 0) prefetch_ahead<256>(qs);
      __m256 d = f16_to_ps(dp);
      if constexpr (xs) {
        const __m256i ls = _mm256_cvtepu8_epi32(_mm_loadl_epi64(
            reinterpret_cast<const __m128i*>(a.plane[1] + rec * 128 + 16 * ib + 8 * h)));
        d = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_sub_epi32(ls, _mm256_set1_epi32(32))));
      }
      __m256i w[8], sgn[8];
      for (int t = 0; t < 4; ++t) {
        const __m256i p = load32(qs + 64 * t);
        w[t] = _mm256_shuffle_epi8(table, _mm256_and_si256(p, m4));
        w[4 + t] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(p, 4), m4));
      }
      if constexpr (!kVnni) {
        for (int k = 0; k < 8; ++k) {
          sgn[k] = w[k];
          w[k] = _mm256_abs_epi8(w[k]);
        }
      }
      const int64_t b = r * subs + ib;
      for (int i = 0; i < n; ++i) {
        const int64_t at = i * nb + b;
        const int8_t* x = a.xq + i * a.cols + 32 * b;
        __m256i s;
        if constexpr (kVnni) {
          s = _mm256_sub_epi32(dot_u8<true, 8, 1>(w, x),
                               _mm256_set1_epi32(128 * (a.xr[at].s0 + a.xr[at].s1)));
        } else {
          s = _mm256_setzero_si256();
          for (int k = 0; k < 8; ++k) {
            const __m256i xsg = _mm256_sign_epi8(bcast4(x + 4 * k), sgn[k]);
            s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(w[k], xsg), ones));
          }
        }
        acc[i] = step(acc[i], s, d, a.xr[at].d);
      }
    }
  }
  store_half(a, g, h, acc, n);
}

// F32 / F16 / BF16 (see matmul_avx512_impl.h), on half h of the group.
template <int kType>
inline __m256 load_w(const uint8_t* rec) {
  if constexpr (kType == kTypeF32) return _mm256_loadu_ps(reinterpret_cast<const float*>(rec));
  if constexpr (kType == kTypeF16) return f16_to_ps(rec);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load16(rec)), 16));
}

template <int kType, int kN>
void float_half(const Args& a, int64_t g, int h) {
  constexpr int64_t es = kType == kTypeF32 ? 4 : 2, rec_bytes = es * kLanes;
  const int n = kN > 0 ? kN : a.n;
  const uint8_t* w = a.plane[0] + g * a.cols * rec_bytes + es * kHalf * h;
  __m256 acc[kMaxRows][4];
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < 4; ++j) acc[i][j] = _mm256_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 4 <= a.cols; k += 4) {
    const __m256 w0 = load_w<kType>(w + k * rec_bytes), w1 = load_w<kType>(w + (k + 1) * rec_bytes);
    const __m256 w2 = load_w<kType>(w + (k + 2) * rec_bytes),
                 w3 = load_w<kType>(w + (k + 3) * rec_bytes);
    for (int i = 0; i < n; ++i) {
      const float* x = a.x + i * a.cols + k;
      acc[i][0] = _mm256_fmadd_ps(w0, _mm256_set1_ps(x[0]), acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(w1, _mm256_set1_ps(x[1]), acc[i][1]);
      acc[i][2] = _mm256_fmadd_ps(w2, _mm256_set1_ps(x[2]), acc[i][2]);
      acc[i][3] = _mm256_fmadd_ps(w3, _mm256_set1_ps(x[3]), acc[i][3]);
    }
  }
  for (; k < a.cols; ++k) {
    const __m256 wk = load_w<kType>(w + k * rec_bytes);
    for (int i = 0; i < n; ++i)
      acc[i][k & 3] = _mm256_fmadd_ps(wk, _mm256_set1_ps(a.x[i * a.cols + k]), acc[i][k & 3]);
  }
  __m256 sum[kMaxRows];
  for (int i = 0; i < n; ++i)
    sum[i] =
        _mm256_add_ps(_mm256_add_ps(acc[i][0], acc[i][1]), _mm256_add_ps(acc[i][2], acc[i][3]));
  store_half(a, g, h, sum, n);
}

// Both halves of a group; up to 8 rows (a decode, a verify of up to 7 drafts) by the kernel of
// that row count, known at compile time (the row loops unroll), more by the kernel of any count.
// A row's arithmetic is the same in either: batch invariant.
template <typename K>  // K::run<kN>(const Args&, int64_t, int half): the kernel for kN rows (0: any)
void halves(const Args& a, int64_t g) {
  const int num_halves = lanes_in_group(a.rows, g) > kHalf ? 2 : 1;
  for (int h = 0; h < num_halves; ++h) {
    switch (a.n) {
      case 1: K::template run<1>(a, g, h); break;
      case 2: K::template run<2>(a, g, h); break;
      case 3: K::template run<3>(a, g, h); break;
      case 4: K::template run<4>(a, g, h); break;
      case 5: K::template run<5>(a, g, h); break;
      case 6: K::template run<6>(a, g, h); break;
      case 7: K::template run<7>(a, g, h); break;
      case 8: K::template run<8>(a, g, h); break;
      default: K::template run<0>(a, g, h); break;
    }
  }
}

// Both halves of a full group in one pass where the kernel has that form (K::both), else as
// halves; rows by count as there.
// K::kBothRows: the most activation rows run so (measured from memory, one thread, Zen 3:
// Q4_K gained at 1 row and from 8 and was even at 2-4 before its split_dots form from 4 rows,
// which gains 8-13 % more there; Q4_0 gains 25 % at 1 row and 13 % at 2, and
// loses 5-10 % from 4 rows, where the separate halves' registers hold more rows' sums).
template <typename K>
void both_halves(const Args& a, int64_t g) {
  if (lanes_in_group(a.rows, g) <= kHalf || a.n > K::kBothRows) return halves<K>(a, g);
  switch (a.n) {
    case 1: K::template both<1>(a, g); break;
    case 2: K::template both<2>(a, g); break;
    case 3: K::template both<3>(a, g); break;
    case 4: K::template both<4>(a, g); break;
    case 5: K::template both<5>(a, g); break;
    case 6: K::template both<6>(a, g); break;
    case 7: K::template both<7>(a, g); break;
    case 8: K::template both<8>(a, g); break;
    default: K::template both<0>(a, g); break;
  }
}

template <int kType> struct FloatH { template <int kN> static void run(const Args& a, int64_t g, int h) { float_half<kType, kN>(a, g, h); } };
template <bool kV, int kType> struct Q4KH {
  static constexpr int kBothRows = kMaxRows;
  template <int kN> static void run(const Args& a, int64_t g, int h) { q4_k_half<kV, kType, kN>(a, g, h); }
  template <int kN> static void both(const Args& a, int64_t g) { q4_k_both<kV, kType, kN>(a, g); }
};
template <bool kV, int kType> struct Q23KH { template <int kN> static void run(const Args& a, int64_t g, int h) { q2_q3_k_half<kV, kType, kN>(a, g, h); } };
template <bool kV> struct Q6KH { template <int kN> static void run(const Args& a, int64_t g, int h) { q6_k_half<kV, kN>(a, g, h); } };
template <bool kV, int kType> struct Q32H {
  static constexpr int kBothRows = 2;
  template <int kN> static void run(const Args& a, int64_t g, int h) { q32_half<kV, kType, kN>(a, g, h); }
  template <int kN> static void both(const Args& a, int64_t g) { q32_both<kV, kType, kN>(a, g); }
};
template <bool kV, int kType> struct Iq4H { template <int kN> static void run(const Args& a, int64_t g, int h) { iq4_half<kV, kType, kN>(a, g, h); } };
template <bool kV> struct Q80H { template <int kN> static void run(const Args& a, int64_t g, int h) { q8_0_half<kV, kN>(a, g, h); } };

template <bool kVnni>
GroupKernel avx2_kernel_of(int type) {
  switch (type) {
    case kTypeF32:
      return halves<FloatH<kTypeF32>>;
    case kTypeF16:
      return halves<FloatH<kTypeF16>>;
    case kTypeBF16:
      return halves<FloatH<kTypeBF16>>;
    case kTypeQ4_K:
      return both_halves<Q4KH<kVnni, kTypeQ4_K>>;
    case kTypeQ5_K:
      return both_halves<Q4KH<kVnni, kTypeQ5_K>>;
    case kTypeQ2_K:
      return halves<Q23KH<kVnni, kTypeQ2_K>>;
    case kTypeQ3_K:
      return halves<Q23KH<kVnni, kTypeQ3_K>>;
    case kTypeQ6_K:
      return halves<Q6KH<kVnni>>;
    case kTypeQ4_0:
      return both_halves<Q32H<kVnni, kTypeQ4_0>>;
    case kTypeQ4_1:
      return both_halves<Q32H<kVnni, kTypeQ4_1>>;
    case kTypeQ5_0:
      return both_halves<Q32H<kVnni, kTypeQ5_0>>;
    case kTypeQ5_1:
      return both_halves<Q32H<kVnni, kTypeQ5_1>>;
    case kTypeIQ4_NL:
      return halves<Iq4H<kVnni, kTypeIQ4_NL>>;
    case kTypeIQ4_XS:
      return halves<Iq4H<kVnni, kTypeIQ4_XS>>;
    case kTypeQ8_0:
      return halves<Q80H<kVnni>>;
    default:
      return nullptr;
  }
}

}  // namespace
}  // namespace specdec::cpu::kernels
