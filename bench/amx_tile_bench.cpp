// What AMX-INT8 tile operations cost on this CPU, one thread: the facts an AMX matmul kernel for
// specdec's verify rows would be built on (bench/README.md, "AMX tiles for the verify rows").
//
// For M = 1, 2, 4, 8, 16 activation rows (tile rows) and K = 16, 32, 64 bytes per row (the
// K-quants' sub-blocks are 16 or 32 values, so one tile op per sub-block has K = 16 or 32), ns per
//   dp        TDPBSUD alone (4 independent accumulators, operands in registers),
//   load_a    TILELOADD of M rows of K bytes (activations),
//   load_b    TILELOADD of K / 4 rows of 64 bytes (weights for 16 output rows),
//   store_c   TILESTORED of M rows of 16 int32 (the products, to be scaled on the vector units),
//   chain     load A, load B, zero C, dp, store C: one sub-block's dots of M rows x 16 outputs,
//             two such chains on separate registers per iteration (as a kernel would run them),
// and, for comparison, vnni: the AVX-512 VNNI instructions giving the same M x 16 dots over K
// (M * K / 4 vpdpbusd, two accumulators per row). JSON on stdout, a table on stderr.
// A CPU or OS without AMX (or without Linux's grant of tile data) prints why and exits 0.
//
// Usage: amx_tile_bench [--quick]
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cpu/isa.h"

using namespace specdec;
using Clock = std::chrono::steady_clock;

#if defined(__x86_64__) && (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 11))
// Only the measuring functions carry the AMX / AVX-512 target: the rest (main, JSON) runs on any
// x86-64 CPU, which prints that it has no AMX.
#define AMX_TARGET __attribute__((target("avx512f,avx512bw,avx512vnni,amx-tile,amx-int8")))
namespace {

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// activations: 16 rows of 1024 bytes read from offsets up to 15 * 64 + 32 (+ one row's 64 bytes);
// weights: up to 16 rows of 64 bytes from offsets up to 15 * 1024 + 512
alignas(64) int8_t g_a[16 * 1024 + 128];
alignas(64) uint8_t g_b[17 * 1024];
alignas(64) int32_t g_c[16 * 16 * 16 * 2];
volatile int32_t g_sink = 0;

double ns_per(Clock::time_point t0, long ops) {
  return std::chrono::duration<double>(Clock::now() - t0).count() * 1e9 / static_cast<double>(ops);
}

struct Costs {
  double dp = 0, load_a = 0, load_b = 0, store_c = 0, chain = 0, vnni = 0;
};

// Tiles: 0, 1 A (m x k), 2, 3 B (k / 4 x 64), 4..7 C (m x 64). The config in static storage
// (GCC 12's _tile_loadconfig declares a read of 8 bytes only: a local's other fields could be
// dropped as dead stores when this function is compiled on its own).
TileConfig g_config;

AMX_TARGET void configure(int m, int k) {
  TileConfig& c = g_config;
  c = TileConfig{};
  for (int t = 0; t < 2; ++t) {
    c.rows[t] = static_cast<uint8_t>(m);
    c.colsb[t] = static_cast<uint16_t>(k);
    c.rows[2 + t] = static_cast<uint8_t>(k / 4);
    c.colsb[2 + t] = 64;
  }
  for (int t = 4; t < 8; ++t) {
    c.rows[t] = static_cast<uint8_t>(m);
    c.colsb[t] = 64;
  }
  __asm__ volatile("" ::: "memory");
  _tile_loadconfig(&c);
}

AMX_TARGET Costs measure(int m, int k, long iters) {
  configure(m, k);
  Costs r;
  _tile_loadd(0, g_a, 64);
  _tile_loadd(1, g_a, 64);
  _tile_loadd(2, g_b, 64);
  _tile_loadd(3, g_b, 64);
  auto t0 = Clock::now();
  for (long i = 0; i < iters; ++i) {
    _tile_dpbsud(4, 0, 2);
    _tile_dpbsud(5, 1, 3);
    _tile_dpbsud(6, 0, 3);
    _tile_dpbsud(7, 1, 2);
  }
  r.dp = ns_per(t0, 4 * iters);
  t0 = Clock::now();
  for (long i = 0; i < iters; ++i) {
    const int o = static_cast<int>(i & 15);
    _tile_loadd(0, g_a + o * 64, 1024);
    _tile_loadd(1, g_a + o * 64 + 32, 1024);
  }
  r.load_a = ns_per(t0, 2 * iters);
  t0 = Clock::now();
  for (long i = 0; i < iters; ++i) {
    const int o = static_cast<int>(i & 15);
    _tile_loadd(2, g_b + o * 1024, 64);
    _tile_loadd(3, g_b + o * 1024 + 512, 64);
  }
  r.load_b = ns_per(t0, 2 * iters);
  t0 = Clock::now();
  for (long i = 0; i < iters; ++i) {
    const int o = static_cast<int>(i & 15);
    _tile_stored(4, g_c + o * 256, 64);
    _tile_stored(5, g_c + 4096 + o * 256, 64);
  }
  r.store_c = ns_per(t0, 2 * iters);
  t0 = Clock::now();
  for (long i = 0; i < iters; ++i) {
    const int o = static_cast<int>(i & 15);
    _tile_loadd(0, g_a + o * 64, 1024);
    _tile_loadd(2, g_b + o * 1024, 64);
    _tile_zero(4);
    _tile_dpbsud(4, 0, 2);
    _tile_stored(4, g_c + o * 256, 64);
    _tile_loadd(1, g_a + o * 64 + 32, 1024);
    _tile_loadd(3, g_b + o * 1024 + 512, 64);
    _tile_zero(5);
    _tile_dpbsud(5, 1, 3);
    _tile_stored(5, g_c + 4096 + o * 256, 64);
  }
  r.chain = ns_per(t0, 2 * iters);
  // the same dots with vpdpbusd: per row, k / 4 instructions over 16 lanes
  __m512i w[16];
  for (int t = 0; t < 16; ++t) w[t] = _mm512_load_si512(g_b + 64 * t);
  t0 = Clock::now();
  for (long i = 0; i < iters; ++i) {
    const int o = static_cast<int>(i & 15);
    for (int row = 0; row < m; ++row) {
      __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
      const int8_t* x = g_a + o * 64 + row * 1024;
      for (int t = 0; t + 1 < k / 4; t += 2) {
        int32_t v0, v1;
        std::memcpy(&v0, x + 4 * t, 4);
        std::memcpy(&v1, x + 4 * t + 4, 4);
        s0 = _mm512_dpbusd_epi32(s0, w[t], _mm512_set1_epi32(v0));
        s1 = _mm512_dpbusd_epi32(s1, w[t + 1], _mm512_set1_epi32(v1));
      }
      _mm512_store_si512(g_c + row * 16, _mm512_add_epi32(s0, s1));
    }
  }
  r.vnni = ns_per(t0, iters);
  _tile_release();
  g_sink = g_c[0];
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  // the library's rule: AMX counts only with AVX-512 BW / VNNI and their OS state (measure() runs
  // vpdpbusd on zmm registers too)
  const cpu::CpuFeatures& f = cpu::cpu_features();
  const std::vector<cpu::Isa>& runnable = cpu::cpu_isas();
  if (std::find(runnable.begin(), runnable.end(), cpu::Isa::kAmxInt8) == runnable.end()) {
    std::printf("{\"amx\": false}\n");
    std::fprintf(stderr, "amx_tile_bench: no AMX-INT8 here (cpuid %d/%d, OS state %d, Linux grant %d)\n",
                 f.amx_tile, f.amx_int8, f.os_amx, f.amx_permitted);
    return 0;
  }
  for (size_t i = 0; i < sizeof(g_a); ++i) g_a[i] = static_cast<int8_t>(i * 7 % 255 - 127);
  for (size_t i = 0; i < sizeof(g_b); ++i) g_b[i] = static_cast<uint8_t>(i * 13 % 16);
  const long iters = quick ? 2000 : 200000;
  nlohmann::json out = {{"amx", true}, {"cases", nlohmann::json::array()}};
  std::fprintf(stderr, "ns per op, one thread:  M  K   dp  load_a load_b store_c  chain  | vnni (M x 16 dots)\n");
  for (int m : {1, 2, 4, 8, 16}) {
    for (int k : {16, 32, 64}) {
      const Costs r = measure(m, k, iters);
      std::fprintf(stderr, "                       %2d %2d %5.2f %6.2f %6.2f %7.2f %6.2f  | %6.2f\n", m, k,
                   r.dp, r.load_a, r.load_b, r.store_c, r.chain, r.vnni);
      out["cases"].push_back({{"M", m}, {"K", k}, {"dp_ns", r.dp}, {"load_a_ns", r.load_a},
                              {"load_b_ns", r.load_b}, {"store_c_ns", r.store_c},
                              {"chain_ns", r.chain}, {"vnni_ns", r.vnni}});
    }
  }
  std::printf("%s\n", out.dump(1).c_str());
  return 0;
}
#else
int main() {
  std::printf("{\"amx\": false}\n");
  std::fprintf(stderr, "amx_tile_bench: built without a compiler that targets AMX-INT8\n");
  return 0;
}
#endif
