// Internal to cpp/cpu/attention*.cpp: the inner loops of the native attention, one set per ISA
// path (attention_avx2.cpp, attention_avx512.cpp, each with its own flags; the portable set in
// attention.cpp). Per-ISA files include only this header, <cstdint> and <immintrin.h> (see
// matmul_kernels.h on ISA flags and inline functions). Each q row's result depends on that row,
// the key / value rows and the path only: the same alone or among other rows.
#pragma once

#include <cstdint>

namespace specdec::cpu::attn_kernels {

struct Kernels {
  // out[i] = q_i . k for the m rows q_i = q + i * q_stride (d elements each)
  void (*dots)(const float* q, int m, int64_t q_stride, const float* k, int d, float* out) = nullptr;
  // acc_i += w[i] * v for the m rows acc_i = acc + i * acc_stride (dv elements each)
  void (*axpys)(float* acc, int m, int64_t acc_stride, const float* w, const float* v, int dv) = nullptr;
  // n f16 values as f32
  void (*f16_row)(const uint16_t* src, float* dst, int n) = nullptr;
};

// The path's kernels; false (k untouched) on builds without the path.
bool avx2_kernels(Kernels& k);
bool avx512_kernels(Kernels& k);

}  // namespace specdec::cpu::attn_kernels
