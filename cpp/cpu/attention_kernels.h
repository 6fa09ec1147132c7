// Internal to cpp/cpu/attention*.cpp: the inner loops of the native attention, one set per ISA
// path (attention_avx2.cpp, attention_avx512.cpp, each with its own flags; the portable set in
// attention.cpp). Per-ISA files include only this header, <cstdint>, <cstring> and <immintrin.h> (see
// matmul_kernels.h on ISA flags and inline functions).
//
// Keys and values go through in tiles of kKeyTile rows, converted to f32 once per tile and read
// by every q row of the item (the q heads of a kv head, for up to 8 tokens). Each q row's numbers
// depend on that row, the key / value rows and the path only, never on the tile boundaries or the
// other rows: a score is its dot product summed over the head's elements in order, and a row's
// output its weights times the values summed over the keys in order. So a token's result is the
// same alone or among other rows.
#pragma once

#include <cstdint>

namespace specdec::cpu::attn_kernels {

inline constexpr int kKeyTile = 16;

struct Kernels {
  // kt[c * kKeyTile + j] = k[j * d + c] for j < nk (c < d); 0 for nk <= j < kKeyTile
  void (*transpose_keys)(const float* k, int nk, int d, float* kt) = nullptr;
  // For rows r < rows (q_r = q + r * q_stride, out_r = out + r * out_stride): out_r[j] = scale *
  // (q_r . key j) for j in [a, b], -inf for the other j < nk (nothing written from nk on); with
  // mx, mx[r] = max(mx[r], out_r[a..b]). 0 <= a <= b < nk <= kKeyTile.
  void (*qk_tile)(const float* q, int rows, int64_t q_stride, const float* kt, int d, float scale, int a, int b,
                  int nk, float* out, int64_t out_stride, float* mx) = nullptr;
  // For rows r < rows: acc_r[e] += w_r[j] * v[j * dv + e] for j = a .. b in order (e < dv;
  // acc_r = acc + r * acc_stride, w_r = w + r * w_stride).
  void (*pv_tile)(float* acc, int rows, int64_t acc_stride, const float* w, int64_t w_stride, const float* v, int a,
                  int b, int dv) = nullptr;
  // n f16 values (2 bytes each, any alignment) as f32
  void (*f16_row)(const uint8_t* src, float* dst, int n) = nullptr;
};

// The path's kernels; false (k untouched) on builds without the path.
bool avx2_kernels(Kernels& k);
bool avx512_kernels(Kernels& k);

}  // namespace specdec::cpu::attn_kernels
