// Quantized matmul benchmark, JSON on stdout (bench/run_quant_bench.sh writes bench/out/).
//
// For every model file in the cache (~/.cache/specdec or SPECDEC_CACHE_DIR) and every weight
// format it holds, the format's largest matrix group (same type and shape, e.g. the 28 ffn_down
// of a layer stack) is uploaded, repeated until the working set exceeds --working-set-mb (default
// 512 MiB, several times the L3 cache), and timed as one pass of back-to-back matmuls for
// n = 1, 2, 4, 8, 16 activation rows. GB/s counts the matrices' GGUF bytes per second at n = 1;
// `vs_n1` is the time of a pass relative to n = 1. The machine's streaming bandwidth is measured
// in the same run: host reads (1 and all threads) and a device read kernel. Formats no cached
// model holds run on random blocks; `launch_us` is the fixed cost of one matmul launch.
// --model SUBSTR: only the cached model files whose name contains SUBSTR. --all-shapes: every
// (type, rows, cols) group of each model, not only the largest per type, and a `step` pass: all
// of the model's matrices once, in file order (a decode step's matmuls back to back, n = 1), whose
// GB/s is the one to hold against a peer's decode rate times the bytes it reads (and the same
// pass for n = 4 and 8 rows: a verify step's matmuls). --step-only: the step pass alone.
// Usage: quant_bench [--quick] [--working-set-mb N] [--reps N] [--models DIR] [--model SUBSTR]
//                    [--all-shapes | --step-only]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "device/ocl_device.h"
#include "model/gguf.h"
#include "quant/dequantize.h"
#include "quant/matmul.h"
#include "quant/ocl_matmul.h"
#include "runner/model_weights.h"

using namespace specdec;
using namespace specdec::quant;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

namespace {

struct Options {
  bool quick = false;
  int64_t working_set_bytes = int64_t{512} << 20;
  int reps = 5;
  std::string models;
  std::string model_filter;
  bool all_shapes = false;
  bool step_only = false;
};

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Streaming read of `bytes` split over `threads` threads (best of 5).
double host_read_GBps(size_t bytes, int threads) {
  std::vector<uint64_t> a(bytes / 8, 1);
  double best = 0.0;
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<uint64_t> sums(static_cast<size_t>(threads));
    std::vector<std::thread> pool;
    const size_t per = a.size() / static_cast<size_t>(threads);
    const auto t0 = Clock::now();
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const auto* p = a.data() + per * static_cast<size_t>(t);
        sums[static_cast<size_t>(t)] = std::accumulate(p, p + per, uint64_t{0});
      });
    }
    for (auto& th : pool) th.join();
    const double dt = seconds_since(t0);
    if (std::accumulate(sums.begin(), sums.end(), uint64_t{0}) == 0) std::printf("?");
    best = std::max(best, static_cast<double>(per * threads * 8) / dt / 1e9);
  }
  return best;
}

const char* kReadKernel = R"(
kernel void read_sum(global const float16* a, global float* out, int per_item) {
  const size_t i = get_global_id(0);
  global const float16* p = a + i * per_item;
  float16 s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (int j = 0; j < per_item; j += 4) { s0 += p[j]; s1 += p[j + 1]; s2 += p[j + 2]; s3 += p[j + 3]; }
  const float16 s = (s0 + s1) + (s2 + s3);
  out[i] = s.s0 + s.s1 + s.s2 + s.s3 + s.s4 + s.s5 + s.s6 + s.s7 + s.s8 + s.s9 + s.sa + s.sb + s.sc + s.sd + s.se + s.sf;
}
)";

// A device kernel streaming through a buffer (64 work-items): the bandwidth the device's code
// gets right now. The machine is shared, so it is measured next to every GEMV timing.
class DeviceReader {
 public:
  DeviceReader(ocl::Context& ctx, size_t bytes) : ctx_(ctx) {
    per_item_ = static_cast<int>(bytes / 64 / kItems) / 4 * 4;
    a_ = ocl::Buffer::long_lived(ctx, static_cast<size_t>(per_item_) * 64 * kItems);  // as weights are
    out_ = ocl::Buffer(ctx, kItems * sizeof(float));
    a_.fill_zero(ctx);
    cl_program prog = ctx.build("quant_bench_read", kReadKernel, "");
    cl_int err = CL_SUCCESS;
    kernel_ = clCreateKernel(prog, "read_sum", &err);
    ocl::check(err, "clCreateKernel", "read_sum");
  }
  ~DeviceReader() { clReleaseKernel(kernel_); }
  double GBps(int reps) {
    ocl::Kernel k(kernel_, "read_sum");
    k.arg(0, a_).arg(1, out_).arg(2, cl_int{per_item_});
    const size_t global = kItems, local = 1;
    double best = 0.0;
    for (int rep = 0; rep < reps; ++rep) {
      const auto t0 = Clock::now();
      k.launch(ctx_, 1, &global, &local);
      ctx_.finish();
      best = std::max(best, static_cast<double>(a_.size_bytes()) / seconds_since(t0) / 1e9);
    }
    return best;
  }

 private:
  static constexpr int kItems = 64;
  ocl::Context& ctx_;
  int per_item_ = 0;
  ocl::Buffer a_, out_;
  cl_kernel kernel_ = nullptr;
};

struct Group {
  GgmlType type;
  int64_t rows, cols;
  std::vector<const model::GgufTensor*> tensors;
  int64_t bytes() const {
    return static_cast<int64_t>(tensors.size()) * rows * row_bytes(type, cols);
  }
};

// Per type: the (rows, cols) group with the most bytes (all_shapes: every group); 2-D tensors only.
std::vector<Group> largest_groups(const model::GgufFile& f, bool all_shapes = false) {
  std::map<std::tuple<GgmlType, int64_t, int64_t>, Group> groups;
  for (const auto& t : f.tensors()) {
    if (t.dims.size() != 2 || !is_weight_type_supported(t.type)) continue;
    auto key = std::make_tuple(t.type, t.dims[1], t.dims[0]);
    auto [it, fresh] = groups.try_emplace(key, Group{t.type, t.dims[1], t.dims[0], {}});
    it->second.tensors.push_back(&t);
  }
  if (all_shapes) {
    std::vector<Group> out;
    for (auto& [key, g] : groups) out.push_back(g);
    std::sort(out.begin(), out.end(), [](const Group& a, const Group& b) { return a.bytes() > b.bytes(); });
    return out;
  }
  std::map<GgmlType, Group> best;
  for (auto& [key, g] : groups) {
    auto it = best.find(g.type);
    if (it == best.end() || g.bytes() > it->second.bytes()) best.insert_or_assign(g.type, g);
  }
  std::vector<Group> out;
  for (auto& [type, g] : best) out.push_back(g);
  return out;
}

// Times passes over `weights` for n activation rows; returns the best seconds per pass.
// The device over a context the caller keeps alive (the quant ops take a device::Device&).
std::shared_ptr<device::Device> device_of(ocl::Context& ctx) {
  return device::wrap(std::shared_ptr<ocl::Context>(&ctx, [](ocl::Context*) {}));
}

double time_pass(ocl::Context& ctx, const std::vector<DeviceWeight>& weights, int64_t n, int reps) {
  const int64_t rows = weights[0].rows(), cols = weights[0].cols();
  std::vector<float> x(static_cast<size_t>(n * cols));
  std::mt19937 rng(1);
  std::normal_distribution<float> dist;
  for (float& v : x) v = dist(rng);
  const auto dev = device_of(ctx);
  device::Buffer xb = dev->allocate(x.size() * sizeof(float)),
                 yb = dev->allocate(static_cast<size_t>(n * rows) * sizeof(float));
  dev->write(xb, x.data(), x.size() * sizeof(float));
  QuantizedActivations xq;
  quantize_activations_for(*dev, xb, n, weights[0], xq);  // all of one type
  matmul(*dev, weights[0], xb, xq, n, yb);  // build the program outside the timing
  ctx.finish();
  double best = 1e30;
  for (int rep = 0; rep < reps; ++rep) {
    const auto t0 = Clock::now();
    for (const DeviceWeight& w : weights) matmul(*dev, w, xb, xq, n, yb);
    ctx.finish();
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

nlohmann::json bench_group(ocl::Context& ctx, DeviceReader& reader, const Group& g,
                           const Options& opt) {
  std::vector<DeviceWeight> weights;
  int64_t bytes = 0, device_bytes = 0;
  for (size_t i = 0; bytes < opt.working_set_bytes && weights.size() < 4096; ++i) {
    weights.push_back(upload_weight(*device_of(ctx), runner::weight_bytes(*g.tensors[i % g.tensors.size()])));
    bytes += weights.back().source_bytes();
    device_bytes += weights.back().layout.total_bytes;
  }
  nlohmann::json j = {
      {"type", weight_type_name(g.type)},
      {"rows", g.rows},
      {"cols", g.cols},
      {"example", g.tensors[0]->name},
      {"matrices_in_model", g.tensors.size()},
      {"matrices_timed", weights.size()},
      {"working_set_MB", static_cast<double>(bytes) / 1e6},
      {"device_bytes_ratio", static_cast<double>(device_bytes) / static_cast<double>(bytes)}};
  const double bw_before = reader.GBps(3);
  const double t1 = time_pass(ctx, weights, 1, opt.reps);
  const double bw_after = reader.GBps(3);
  const double gbps = static_cast<double>(bytes) / t1 / 1e9;
  j["gemv_GBps"] = gbps;
  j["device_read_GBps"] = std::max(bw_before, bw_after);
  j["gemv_vs_read"] = gbps / std::max(bw_before, bw_after);
  j["gemv_us_per_matrix"] = t1 / static_cast<double>(weights.size()) * 1e6;
  nlohmann::json scaling = nlohmann::json::object();
  for (int64_t n : {2, 4, 8, 16})
    scaling[std::to_string(n)] = time_pass(ctx, weights, n, opt.reps) / t1;
  j["vs_n1"] = scaling;
  std::fprintf(stderr,
               "  %-5s %6lld x %-6lld %5zu x %7.1f MB  %6.2f GB/s (read %5.2f: %3.0f%%)  n=2 %.2f  "
               "n=4 %.2f  n=8 %.2f  "
               "n=16 %.2f\n",
               weight_type_name(g.type).c_str(), static_cast<long long>(g.rows),
               static_cast<long long>(g.cols), weights.size(), static_cast<double>(bytes) / 1e6,
               gbps, j["device_read_GBps"].get<double>(), 100.0 * j["gemv_vs_read"].get<double>(),
               scaling["2"].get<double>(), scaling["4"].get<double>(), scaling["8"].get<double>(),
               scaling["16"].get<double>());
  return j;
}

// Every matrix of the model once, in file order, n = 1 (token_embd only where it is also the
// output head, i.e. no output.weight): the matmuls of one decode step back to back.
nlohmann::json bench_step(ocl::Context& ctx, DeviceReader& reader, const model::GgufFile& f,
                          const Options& opt) {
  const auto dev = device_of(ctx);
  bool has_output = false;
  for (const auto& t : f.tensors()) has_output = has_output || t.name == "output.weight";
  std::vector<DeviceWeight> weights;
  int64_t bytes = 0;
  for (const auto& t : f.tensors()) {
    if (t.dims.size() != 2 || !is_weight_type_supported(t.type)) continue;
    if (t.name == "token_embd.weight" && has_output) continue;  // a row lookup, not a matmul
    weights.push_back(upload_weight(*dev, runner::weight_bytes(t)));
    bytes += weights.back().source_bytes();
  }
  // matmuls of different widths and scale blocks: per (width, scale block) one activation buffer
  // of n rows, quantised once
  int64_t max_rows = 0;
  for (const DeviceWeight& w : weights) max_rows = std::max(max_rows, w.rows());
  auto pass = [&](int64_t n) {
    std::map<std::pair<int64_t, int>, std::pair<device::Buffer, QuantizedActivations>> acts;
    auto key = [](const DeviceWeight& w) {
      return std::pair{w.cols(), activation_scale_block(w.type())};
    };
    for (const DeviceWeight& w : weights) {
      if (acts.contains(key(w))) continue;
      std::vector<float> v(static_cast<size_t>(n * w.cols()));
      std::mt19937 rng(1);
      std::normal_distribution<float> dist;
      for (float& e : v) e = dist(rng);
      auto& [xb, xq] = acts[key(w)];
      xb = dev->allocate(v.size() * sizeof(float));
      dev->write(xb, v.data(), v.size() * sizeof(float));
      quantize_activations_for(*dev, xb, n, w, xq);
    }
    device::Buffer yb = dev->allocate(static_cast<size_t>(n * max_rows) * sizeof(float));
    double best = 1e30;
    for (int rep = 0; rep < opt.reps + 1; ++rep) {  // the first pass builds the programs
      const auto t0 = Clock::now();
      for (const DeviceWeight& w : weights) {
        auto& [xb, xq] = acts[key(w)];
        matmul(*dev, w, xb, xq, n, yb);
      }
      ctx.finish();
      if (rep > 0) best = std::min(best, seconds_since(t0));
    }
    return best;
  };
  const double bw_before = reader.GBps(3);
  const double t1 = pass(1);
  const double bw = std::max(bw_before, reader.GBps(3));
  const double t4 = pass(4), t8 = pass(8);
  const double gbps = static_cast<double>(bytes) / t1 / 1e9;
  std::fprintf(stderr,
               "  step: %zu matmuls, %.1f MB, %.2f ms, %.2f GB/s (read %.2f: %.0f%%); n=4 %.2f ms "
               "(%.2fx), n=8 %.2f ms (%.2fx)\n",
               weights.size(), static_cast<double>(bytes) / 1e6, t1 * 1e3, gbps, bw, 100.0 * gbps / bw,
               t4 * 1e3, t4 / t1, t8 * 1e3, t8 / t1);
  return {{"matmuls", weights.size()}, {"MB", static_cast<double>(bytes) / 1e6}, {"ms", t1 * 1e3},
          {"GBps", gbps}, {"device_read_GBps", bw}, {"vs_read", gbps / bw},
          {"n4_ms", t4 * 1e3}, {"n8_ms", t8 * 1e3}, {"n4_vs_n1", t4 / t1}, {"n8_vs_n1", t8 / t1}};
}

// Seconds per matmul launch on a tiny in-cache matrix (16 x 256 Q4_0, n = 1), back to back: the
// fixed cost every launch pays on this device.
double launch_seconds(ocl::Context& ctx) {
  std::vector<float> w(16 * 256, 0.01f);
  const std::vector<uint8_t> q = quantize(GgmlType::kQ4_0, w.data(), 16, 256);
  std::vector<DeviceWeight> weights;
  for (int i = 0; i < 200; ++i)
    weights.push_back(upload_weight(*device_of(ctx), GgmlType::kQ4_0, q.data(), q.size(), {256, 16}));
  return time_pass(ctx, weights, 1, 10) / static_cast<double>(weights.size());
}

// Formats that no cached model holds, on random blocks of Qwen2.5-1.5B's ffn_up shape.
struct Synthetic {
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<model::GgufTensor> tensors;
  std::vector<Group> groups;
};

void add_synthetic(Synthetic& syn, const std::vector<GgmlType>& types) {
  const int64_t rows = 8960, cols = 1536;
  std::vector<float> w(static_cast<size_t>(rows * cols));
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  for (float& v : w) v = dist(rng);
  syn.bytes.reserve(types.size());
  syn.tensors.reserve(types.size());
  for (GgmlType t : types) {
    syn.bytes.push_back(quantize(t, w.data(), rows, cols));
    model::GgufTensor tensor;
    tensor.name = "synthetic";
    tensor.type = t;
    tensor.dims = {cols, rows};
    tensor.size_bytes = syn.bytes.back().size();
    tensor.data = syn.bytes.back().data();
    syn.tensors.push_back(tensor);
  }
  for (const model::GgufTensor& t : syn.tensors)
    syn.groups.push_back(Group{t.type, rows, cols, {&t}});
}

// --quick: small synthetic matrices of every format (a smoke run; numbers mean little).
nlohmann::json quick_run(ocl::Context& ctx) {
  nlohmann::json out = nlohmann::json::array();
  for (GgmlType t : supported_weight_types()) {
    const int64_t rows = 64, cols = 512;
    std::vector<float> w(static_cast<size_t>(rows * cols), 0.01f);
    const std::vector<uint8_t> q = quantize(t, w.data(), rows, cols);
    std::vector<DeviceWeight> weights;
    weights.push_back(upload_weight(*device_of(ctx), t, q.data(), q.size(), {cols, rows}, "synthetic"));
    const double t1 = time_pass(ctx, weights, 1, 2), t4 = time_pass(ctx, weights, 4, 2);
    out.push_back({{"type", weight_type_name(t)}, {"us_n1", t1 * 1e6}, {"vs_n1_4", t4 / t1}});
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  if (const char* dir = std::getenv("SPECDEC_CACHE_DIR"))
    o.models = dir;
  else if (const char* home = std::getenv("HOME"))
    o.models = std::string(home) + "/.cache/specdec";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick")
      o.quick = true;
    else if (a == "--working-set-mb" && i + 1 < argc)
      o.working_set_bytes = std::atoll(argv[++i]) << 20;
    else if (a == "--reps" && i + 1 < argc)
      o.reps = std::max(1, std::atoi(argv[++i]));
    else if (a == "--models" && i + 1 < argc)
      o.models = argv[++i];
    else if (a == "--model" && i + 1 < argc)
      o.model_filter = argv[++i];
    else if (a == "--all-shapes")
      o.all_shapes = true;
    else if (a == "--step-only")
      o.all_shapes = o.step_only = true;
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  auto ctx = ocl::Context::create();
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  nlohmann::json out = {{"device", ctx->device().summary()},
                        {"quant_isa", quant_isa_name(device_quant_isa(*ctx))},
                        {"rows_per_item",
                         {{"n1", matmul_config(*ctx, 1).rows_per_item},
                          {"n16", matmul_config(*ctx, 16).rows_per_item}}}};
  if (opt.quick) {
    out["quick"] = quick_run(*ctx);
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  const size_t bw_bytes = size_t{1} << 30;
  out["bandwidth_GBps"] = {{"host_read_1_thread", host_read_GBps(bw_bytes, 1)},
                           {"host_read_all_threads", host_read_GBps(bw_bytes, threads)},
                           {"device_read", 0.0}};
  DeviceReader reader(*ctx, bw_bytes);
  out["bandwidth_GBps"]["device_read"] = reader.GBps(5);
  std::fprintf(stderr, "bandwidth: %s\n", out["bandwidth_GBps"].dump().c_str());
  nlohmann::json models = nlohmann::json::array();
  std::vector<fs::path> files;
  if (fs::is_directory(opt.models)) {
    for (const auto& e : fs::directory_iterator(opt.models)) {
      if (e.path().extension() == ".gguf" &&
          e.path().filename().string().find(opt.model_filter) != std::string::npos)
        files.push_back(e.path());
    }
  }
  std::sort(files.begin(), files.end());
  for (const fs::path& p : files) {
    std::fprintf(stderr, "%s\n", p.filename().c_str());
    const model::GgufFile f = model::GgufFile::open(p.string());
    nlohmann::json groups = nlohmann::json::array();
    if (!opt.step_only) {
      for (const Group& g : largest_groups(f, opt.all_shapes))
        groups.push_back(bench_group(*ctx, reader, g, opt));
    }
    nlohmann::json m = {{"model", p.filename().string()}, {"groups", groups}};
    if (opt.all_shapes) m["step"] = bench_step(*ctx, reader, f, opt);
    models.push_back(m);
  }
  out["models"] = models;
  if (opt.model_filter.empty()) {  // formats no cached model holds, on random blocks
    std::vector<GgmlType> missing;
    for (GgmlType t : supported_weight_types()) {
      bool seen = false;
      for (const auto& m : models) {
        for (const auto& g : m["groups"]) seen = seen || g["type"] == weight_type_name(t);
      }
      if (!seen) missing.push_back(t);
    }
    Synthetic syn;
    add_synthetic(syn, missing);
    std::fprintf(stderr, "synthetic (random blocks, 8960 x 1536)\n");
    nlohmann::json synthetic = nlohmann::json::array();
    for (const Group& g : syn.groups) synthetic.push_back(bench_group(*ctx, reader, g, opt));
    out["synthetic"] = synthetic;
  }
  out["launch_us"] = launch_seconds(*ctx) * 1e6;
  std::fprintf(stderr, "launch: %.1f us per matmul launch\n", out["launch_us"].get<double>());
  out["bandwidth_GBps"]["host_read_all_threads_after"] = host_read_GBps(bw_bytes, threads);
  out["bandwidth_GBps"]["device_read_after"] = reader.GBps(5);
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
