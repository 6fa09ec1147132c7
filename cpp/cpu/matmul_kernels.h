// Internal to cpp/cpu/matmul*.cpp: the interface between the matmul driver and the per-path
// kernels. Per-ISA translation units include only this header (and cpu/act_rec.h), <cstdint>, <cstring> and
// <immintrin.h>: a standard-library inline function compiled there with AVX-512 flags could be
// the copy the linker keeps for the whole program (then a plain x86-64 CPU faults in it).
#pragma once

#include <cstdint>

#include "cpu/act_rec.h"

namespace specdec::cpu::kernels {

inline constexpr int kLanes = 16;    // weight rows per group (quant::kRowsPerGroup)
inline constexpr int kMaxRows = 16;  // activation rows per kernel call

// ggml type ids of the formats with SIMD kernels (common/ggml_type.h).
inline constexpr int kTypeF32 = 0, kTypeF16 = 1, kTypeBF16 = 30;
inline constexpr int kTypeQ4_0 = 2, kTypeQ4_1 = 3, kTypeQ5_0 = 6, kTypeQ5_1 = 7, kTypeQ8_0 = 8;
inline constexpr int kTypeQ2_K = 10, kTypeQ3_K = 11, kTypeQ4_K = 12, kTypeQ5_K = 13;
inline constexpr int kTypeQ6_K = 14, kTypeIQ4_NL = 20, kTypeIQ4_XS = 23;

// ggml's kvalues_iq4nl (quant/dequantize.h's kIq4Values, repeated here for the ISA files).
inline constexpr int8_t kIq4Table[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                         1,    13,   25,  38,  53,  69,  89,  113};

// One kernel call: one group of 16 weight rows x n (1..kMaxRows) activation rows.
struct Args {
  const uint8_t* plane[4] = {};  // the layout's planes, in its order (record 0 of each)
  int64_t blocks_per_row = 0;    // records of a plane per group
  int64_t cols = 0;
  int64_t rows = 0;              // weight rows (the last group may be partial)
  int n = 0;                     // activation rows of this call
  const int8_t* xq = nullptr;    // [n, cols] int8 activations (block formats)
  const ActRec* xr = nullptr;    // [n, cols / 32] scales and sums of q (cpu/act_rec.h)
  const float* x = nullptr;      // [n, cols] f32 activations (float formats)
  float* y = nullptr;            // [n, ldy]: y[i * ldy + r] for weight row r
  int64_t ldy = 0;
};

using GroupKernel = void (*)(const Args& a, int64_t group);

// The kernel of a path for a ggml type id, or nullptr where the path has none (the driver then
// takes the next lower path). Each lives in its own translation unit with its own ISA flags;
// the x86 ones return nullptr on builds without them.
GroupKernel portable_kernel(int type);
GroupKernel avx2_kernel(int type);
GroupKernel avx_vnni_kernel(int type);
GroupKernel avx512bw_kernel(int type);
GroupKernel avx512_vnni_kernel(int type);

// The lanes of a group that hold real weight rows. Internal linkage, as everything the ISA files
// share: an unoptimised build keeps inline functions out of line, and the linker could otherwise
// keep the copy compiled with AVX-512 flags for every caller.
namespace {
inline int lanes_in_group(int64_t rows, int64_t group) {
  const int64_t left = rows - group * kLanes;
  return left < kLanes ? static_cast<int>(left) : kLanes;
}

// Software prefetch of the main weight plane: the record kPrefetchBytes ahead (at least one
// record) of the one at `rec` (AVX2: in the first half's pass). Prefetches past the end of a
// buffer do not fault. Measured on the project's 2-vCPU Xeon VM, one thread, avx512_vnni: n = 1
// Q4_K 8960 x 1536 1.07-1.12 -> 0.80-0.90 ms, Q6_K 1536 x 8960 1.46-1.66 -> 1.22-1.39 ms, Q8_0
// 576 x 1536 0.15 -> 0.10-0.12 ms; n = 2..8 also faster or within noise (AVX2: within noise).
inline constexpr int kPrefetchBytes = 2048;
template <int kRecordBytes>
inline void prefetch_ahead(const uint8_t* rec) {
  constexpr int ahead = (kPrefetchBytes + kRecordBytes - 1) / kRecordBytes * kRecordBytes;
  for (int l = 0; l < kRecordBytes; l += 64) __builtin_prefetch(rec + ahead + l);
}
}  // namespace

}  // namespace specdec::cpu::kernels
