// Native CPU quantized matmul benchmark (cpp/cpu/matmul.h), one thread, JSON on stdout and a
// table on stderr.
//
// For Qwen2.5-1.5B's q4_K / q6_K FFN shapes and SmolLM2-135M's q8_0 / q4_0 ones, a random matrix
// is packed once and copied until the copies exceed --working-set-mb (default 640 MiB, above the
// 260 MiB L3 of the project's VMs), so every call reads its weights from memory. Calls cycle over
// the copies; per (path, n) the time per call is the best of --reps windows of at least --min-s
// seconds each. For n = 1, 2, 4, 8, 16 activation rows on every path this CPU runs: us per call,
// GB/s of packed weight bytes read (n = 1), and t(n) / t(1) (`vs_n1`). The single-thread streaming
// read rate over the same copies is measured in the same run (`read_GBps`) to hold GB/s against.
// --working-set-mb 1 keeps two copies, which stay in cache: the kernels' compute alone.
// Usage: cpu_matmul_bench [--quick] [--working-set-mb N] [--reps N] [--min-s S] [--filter SUBSTR]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cpu/isa.h"
#include "cpu/matmul.h"
#include "quant/dequantize.h"
#include "quant/formats.h"
#include "quant/layout.h"
#include "quant/reference.h"

using namespace specdec;
using namespace specdec::cpu;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  bool quick = false;
  int64_t working_set_bytes = int64_t{640} << 20;
  int reps = 3;
  double min_s = 0.25;
  std::string filter;  // only cases whose name contains it
};

struct Case {
  std::string name;
  GgmlType type;
  int64_t rows, cols;
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

// The copies of one packed matrix that together exceed the working set.
struct Copies {
  quant::DeviceLayout layout;
  std::vector<std::vector<uint8_t>> bytes;
};

Copies make_copies(const Case& c, int64_t working_set_bytes) {
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(c.rows * c.cols));
  for (float& v : w) v = dist(rng);
  const std::vector<uint8_t> blocks = quant::quantize(c.type, w.data(), c.rows, c.cols);
  Copies out;
  out.layout = quant::device_layout(c.type, c.rows, c.cols);
  const std::vector<uint8_t> packed = quant::repack(out.layout, blocks.data());
  const int64_t count = std::max<int64_t>(2, working_set_bytes / out.layout.total_bytes + 1);
  out.bytes.assign(static_cast<size_t>(count), packed);
  return out;
}

// Single-thread streaming read of every copy (GB/s, best of 3).
double read_GBps(const Copies& copies) {
  double best = 0.0;
  uint64_t sink = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const auto t0 = Clock::now();
    size_t bytes = 0;
    for (const auto& b : copies.bytes) {
      const auto* p = reinterpret_cast<const uint64_t*>(b.data());
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      const size_t words = b.size() / 8 / 4 * 4;
      for (size_t i = 0; i < words; i += 4) {
        s0 += p[i];
        s1 += p[i + 1];
        s2 += p[i + 2];
        s3 += p[i + 3];
      }
      sink += s0 + s1 + s2 + s3;
      bytes += words * 8;
    }
    best = std::max(best, static_cast<double>(bytes) / seconds_since(t0) / 1e9);
  }
  if (sink == 42) std::fprintf(stderr, " ");
  return best;
}

// Seconds per call for n rows on `isa`: best of reps windows of at least min_s each.
double time_per_call(const Copies& copies, const specdec::cpu::Activations& xq,
                     const std::vector<float>& x, int64_t n, Isa isa, const Options& opt,
                     size_t& next_copy) {
  const bool is_float = quant::weight_format(copies.layout.type).block_size == 1;
  MatmulInput in;
  in.n = n;
  if (is_float)
    in.x = x.data();
  else
    in.xq = &xq;
  std::vector<float> y(static_cast<size_t>(n * copies.layout.rows));
  double best = 1e30;
  for (int rep = 0; rep < opt.reps; ++rep) {
    int64_t calls = 0;
    const auto t0 = Clock::now();
    double dt = 0.0;
    do {
      const PackedWeight w{&copies.layout, copies.bytes[next_copy].data()};
      next_copy = (next_copy + 1) % copies.bytes.size();
      matmul(w, in, y.data(), isa);
      ++calls;
      dt = seconds_since(t0);
    } while (dt < opt.min_s);
    best = std::min(best, dt / static_cast<double>(calls));
  }
  return best;
}

nlohmann::json bench_case(const Case& c, const Options& opt) {
  const Copies copies = make_copies(c, opt.working_set_bytes);
  const double read = read_GBps(copies);
  const int64_t max_n = 16;
  std::mt19937 rng(2);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(max_n * c.cols));
  for (float& v : x) v = dist(rng);
  const bool is_float = quant::weight_format(c.type).block_size == 1;
  specdec::cpu::OwnedActivations xq;
  if (!is_float) xq = specdec::cpu::quantize_activations(x.data(), max_n, c.cols, quant::activation_scale_block(c.type));
  const double bytes = static_cast<double>(copies.layout.total_bytes);
  nlohmann::json results = nlohmann::json::array();
  size_t next_copy = 0;
  std::fprintf(stderr, "%-34s read %5.1f GB/s (1 thread), %zu copies of %.1f MB\n", c.name.c_str(),
               read, copies.bytes.size(), bytes / 1e6);
  for (Isa isa : cpu_isas()) {
    const Isa runs = matmul_isa_for(c.type, isa);
    if (runs != isa) continue;  // a lower path's kernel: measured under its own name
    const std::vector<int64_t> ns =
        opt.quick ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{1, 2, 4, 8, 16};
    nlohmann::json per_n = nlohmann::json::array();
    double t1 = 0.0;
    std::string line;
    for (int64_t n : ns) {
      const double t = time_per_call(copies, xq.view(), x, n, isa, opt, next_copy);
      if (n == 1) t1 = t;
      nlohmann::json r = {{"n", n}, {"us_per_call", t * 1e6}, {"vs_n1", t / t1}};
      if (n == 1) r["GBps"] = bytes / t / 1e9;
      per_n.push_back(r);
      char cell[64];
      std::snprintf(cell, sizeof(cell), n == 1 ? " %8.0f us (%5.1f GB/s)" : " %5.2f",
                    n == 1 ? t * 1e6 : t / t1, bytes / t / 1e9);
      line += cell;
    }
    std::fprintf(stderr, "  %-12s%s\n", isa_name(isa), line.c_str());
    results.push_back({{"isa", isa_name(isa)}, {"by_n", per_n}});
  }
  return {{"name", c.name},
          {"type", quant::weight_type_name(c.type)},
          {"rows", c.rows},
          {"cols", c.cols},
          {"packed_bytes", copies.layout.total_bytes},
          {"copies", copies.bytes.size()},
          {"read_GBps", read},
          {"paths", results}};
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      o.quick = true;
    } else if (a == "--working-set-mb" && i + 1 < argc) {
      o.working_set_bytes = std::atoll(argv[++i]) << 20;
    } else if (a == "--reps" && i + 1 < argc) {
      o.reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--min-s" && i + 1 < argc) {
      o.min_s = std::atof(argv[++i]);
    } else if (a == "--filter" && i + 1 < argc) {
      o.filter = argv[++i];
    } else {
      std::fprintf(stderr,
                   "usage: cpu_matmul_bench [--quick] [--working-set-mb N] [--reps N] "
                   "[--min-s S] [--filter SUBSTR]\n");
      std::exit(2);
    }
  }
  if (o.quick) {
    o.working_set_bytes = int64_t{1} << 20;
    o.reps = 1;
    o.min_s = 0.0;
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  std::vector<Case> cases = {
      {"qwen2.5-1.5b ffn_up q4_K 8960x1536", GgmlType::kQ4_K, 8960, 1536},
      {"qwen2.5-1.5b ffn_down q4_K 1536x8960", GgmlType::kQ4_K, 1536, 8960},
      {"qwen2.5-1.5b ffn_down q6_K 1536x8960", GgmlType::kQ6_K, 1536, 8960},
      {"smollm2-135m ffn_up q8_0 1536x576", GgmlType::kQ8_0, 1536, 576},
      {"smollm2-135m ffn_down q8_0 576x1536", GgmlType::kQ8_0, 576, 1536},
      {"smollm2-135m ffn_up q4_0 1536x576", GgmlType::kQ4_0, 1536, 576},
      {"gemma-3-270m ffn_up q5_0 2048x640", GgmlType::kQ5_0, 2048, 640},
      {"smollm2-135m ffn_up q4_1 1536x576", GgmlType::kQ4_1, 1536, 576},
  };
  if (opt.quick) {
    for (Case& c : cases) c.rows = std::min<int64_t>(c.rows, 64);
  }
  const CpuFeatures& f = cpu_features();
  nlohmann::json out = {{"cpu", cpu_model()},
                        {"features",
                         {{"avx2", f.avx2},
                          {"avx_vnni", f.avx_vnni},
                          {"avx512bw", f.avx512bw},
                          {"avx512_vnni", f.avx512_vnni},
                          {"amx_int8", f.amx_int8},
                          {"amx_permitted", f.amx_permitted}}},
                        {"threads", 1},
                        {"working_set_bytes", opt.working_set_bytes},
                        {"chosen_isa", isa_name(cpu_isa())},
                        {"cases", nlohmann::json::array()}};
  std::fprintf(stderr, "%s; paths:", cpu_model().c_str());
  for (Isa isa : cpu_isas()) std::fprintf(stderr, " %s", isa_name(isa));
  std::fprintf(stderr, "\n  columns: n=1 time (GB/s), then t(n)/t(1) for n = 2, 4, 8, 16\n");
  for (const Case& c : cases) {
    if (c.name.find(opt.filter) != std::string::npos) out["cases"].push_back(bench_case(c, opt));
  }
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
