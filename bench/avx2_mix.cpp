// Throughput of the AVX2 instruction mixes the native device's integer dot products are made of,
// on one core, in cycles (issue 35's ninth stop: where the n-row floor on AVX2 without VNNI is).
// Standalone (not part of the CMake build, no project headers):
//
//   g++ -O3 -mavx2 -mfma -o /tmp/avx2_mix bench/avx2_mix.cpp && /tmp/avx2_mix > avx2_mix.json
//
// The clock is taken from a chain of dependent vpaddd (1 cycle each on every x86 core with AVX2).
// Mixes: 12 independent registers per kind, so that latency does not limit them. Row loops: the
// shape of cpu/matmul_avx2_common.h's split_dots (8 weight vectors kept in registers, per row 8
// vpbroadcastd of 4 activation bytes, 8 vpmaddubsw, 7 vpaddw, 1 vpmaddwd), alone and followed by
// Q4_K's float step (convert, multiply, fma, fnmadd), for 16 rows of activations in L1; the cost
// is per row and 8-lane block of 32 weights.
#include <immintrin.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace {

alignas(64) int32_t g_buf[64];

template <class F>
double ns_per(F f, double ops_per_call, long calls) {
  f();
  const auto t0 = std::chrono::steady_clock::now();
  for (long n = 0; n < calls; ++n) f();
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / (static_cast<double>(calls) * ops_per_call);
}

#define R3(ins, d) ins " %%ymm12, %%ymm13, %%ymm" #d "\n"
#define SAME12(ins)                                                                                  \
  __asm__ volatile(R3(ins, 0) R3(ins, 1) R3(ins, 2) R3(ins, 3) R3(ins, 4) R3(ins, 5) R3(ins, 6)        \
                       R3(ins, 7) R3(ins, 8) R3(ins, 9) R3(ins, 10) R3(ins, 11) ::                        \
                           : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",   \
                             "xmm9", "xmm10", "xmm11")
#define MIX12(a, b)                                                                                  \
  __asm__ volatile(R3(a, 0) R3(b, 1) R3(a, 2) R3(b, 3) R3(a, 4) R3(b, 5) R3(a, 6) R3(b, 7) R3(a, 8)    \
                       R3(b, 9) R3(a, 10) R3(b, 11) ::                                                  \
                           : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",   \
                             "xmm9", "xmm10", "xmm11")
// vpbroadcastd from memory, vpmaddubsw of it, vpaddw into one of 4 accumulators
#define TRIPLE(off, t, acc)                                                                          \
  "vpbroadcastd " #off "(%0), %%ymm" #t "\n vpmaddubsw %%ymm" #t ", %%ymm12, %%ymm" #t                 \
  "\n vpaddw %%ymm" #t ", %%ymm" #acc ", %%ymm" #acc "\n"

inline __m256i bcast4(const int8_t* x) {
  int32_t v;
  std::memcpy(&v, x, 4);
  return _mm256_set1_epi32(v);
}

// One row's integer dot over a 32-weight block of 8 lanes, as split_dots does it.
inline __m256i row_dot(const __m256i* wh, const int8_t* xi) {
  __m256i p = _mm256_maddubs_epi16(wh[0], bcast4(xi));
  for (int k = 1; k < 8; ++k) p = _mm256_add_epi16(p, _mm256_maddubs_epi16(wh[k], bcast4(xi + 4 * k)));
  return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

__attribute__((noinline)) void rows_int(const __m256i* w, const int8_t* x, int64_t ldx, int n, __m256i* s) {
  __m256i wh[8];
  for (int t = 0; t < 8; ++t) wh[t] = w[t];
#pragma GCC unroll 1
  for (int i = 0; i < n; ++i) s[i] = row_dot(wh, x + i * ldx);
}

// The same with Q4_K's float step after each row's dot (cpu/matmul_avx2_k.h).
__attribute__((noinline)) void rows_q4k(const __m256i* w, const int8_t* x, int64_t ldx, int n, __m256* acc,
                                        const float* dx, __m256 dsc, __m256 dmn) {
  __m256i wh[8];
  for (int t = 0; t < 8; ++t) wh[t] = w[t];
#pragma GCC unroll 1
  for (int i = 0; i < n; ++i) {
    const __m256i s = row_dot(wh, x + i * ldx);
    const __m256 v = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(s), dsc), _mm256_set1_ps(dx[2 * i]), acc[i]);
    acc[i] = _mm256_fnmadd_ps(dmn, _mm256_set1_ps(dx[2 * i + 1]), v);
  }
}

}  // namespace

int main() {
  const long calls = 20000000;
  const double cycle_ns = ns_per(
      [] {
        __asm__ volatile(
            "vpaddd %%ymm12, %%ymm0, %%ymm0\n vpaddd %%ymm12, %%ymm0, %%ymm0\n"
            "vpaddd %%ymm12, %%ymm0, %%ymm0\n vpaddd %%ymm12, %%ymm0, %%ymm0\n" ::
                : "xmm0");
      },
      4, calls);
  struct Row {
    const char* name;
    double ns;
  };
  const int32_t* p = g_buf;
  Row rows[] = {
      {"vpmaddubsw", ns_per([] { SAME12("vpmaddubsw"); }, 12, calls)},
      {"vpmaddwd", ns_per([] { SAME12("vpmaddwd"); }, 12, calls)},
      {"vpaddw", ns_per([] { SAME12("vpaddw"); }, 12, calls)},
      {"vfmadd231ps", ns_per([] { SAME12("vfmadd231ps"); }, 12, calls)},
      {"vpmaddubsw + vpmaddwd (per instruction)", ns_per([] { MIX12("vpmaddubsw", "vpmaddwd"); }, 12, calls)},
      {"vpmaddubsw + vpaddw (per pair)", ns_per([] { MIX12("vpmaddubsw", "vpaddw"); }, 6, calls)},
      {"vpmaddubsw + vfmadd231ps (per pair)", ns_per([] { MIX12("vpmaddubsw", "vfmadd231ps"); }, 6, calls)},
      {"vpbroadcastd m32 + vpmaddubsw + vpaddw (per triple)",
       ns_per(
           [p] {
             __asm__ volatile(TRIPLE(0, 0, 8) TRIPLE(4, 1, 9) TRIPLE(8, 2, 10) TRIPLE(12, 3, 11) TRIPLE(16, 4, 8)
                                  TRIPLE(20, 5, 9) TRIPLE(24, 6, 10) TRIPLE(28, 7, 11)::"r"(p)
                              : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",
                                "xmm10", "xmm11");
           },
           8, calls)},
  };
  alignas(64) static int8_t x[16 * 2048];
  for (int i = 0; i < 16 * 2048; ++i) x[i] = static_cast<int8_t>((i * 7) % 100 - 50);
  alignas(64) __m256i w[8];
  for (int t = 0; t < 8; ++t) w[t] = _mm256_set1_epi8(static_cast<char>(t + 3));
  alignas(64) __m256i s[16];
  alignas(64) __m256 acc[16];
  float dx[32];
  for (int i = 0; i < 32; ++i) dx[i] = 0.01f * static_cast<float>(i);
  for (auto& a : acc) a = _mm256_setzero_ps();
  const long row_calls = 2000000;
  const double int_ns = ns_per([&] { rows_int(w, x, 2048, 16, s); __asm__ volatile("" ::"r"(s) : "memory"); }, 16, row_calls);
  const double q4k_ns = ns_per(
      [&] {
        rows_q4k(w, x, 2048, 16, acc, dx, _mm256_set1_ps(1.0f), _mm256_set1_ps(0.5f));
        __asm__ volatile("" ::"r"(acc) : "memory");
      },
      16, row_calls);
  std::printf("{\n  \"what\": \"AVX2 instruction mixes, one core, cycles per unit (bench/avx2_mix.cpp)\",\n");
  std::printf("  \"clock_ghz\": %.3f,\n  \"mixes\": [\n", 1.0 / cycle_ns);
  for (const Row& r : rows) std::printf("    {\"mix\": \"%s\", \"cycles\": %.3f},\n", r.name, r.ns / cycle_ns);
  std::printf("    {\"mix\": \"split_dots row loop, per row and 8-lane block\", \"cycles\": %.2f},\n", int_ns / cycle_ns);
  std::printf("    {\"mix\": \"the same with Q4_K's float step\", \"cycles\": %.2f}\n  ]\n}\n", q4k_ns / cycle_ns);
  return 0;
}
