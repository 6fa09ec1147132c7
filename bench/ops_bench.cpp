// Forward-op micro-benchmarks (cpp/ops), JSON on stdout:
//  - launch: µs per enqueue of a 1-element kernel, pipelined and with a clFinish after each;
//  - per op and shape: µs per call (pipelined, averaged over reps) and the bytes it moves per
//    second (read + write, f32), next to a device-to-device buffer copy for scale.
// Shapes are those of the real models (Qwen2.5-1.5B: 1536 / 12 x 128 heads / ff 8960 / vocab
// 151936; Gemma 3: vocab 262144) for decode (1 row), verify (5 rows) and 16-64 row batches.
// Usage: ops_bench [--quick] [--only SUBSTRING]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "device/ocl_device.h"
#include "ops/elementwise.h"
#include "ops/norm.h"
#include "ops/ocl_common.h"
#include "ops/rope.h"
#include "ops/rows.h"
#include "ops/sampling.h"

using namespace specdec;
using namespace specdec::ops;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

namespace {

device::Buffer random_buffer(device::Device& dev, size_t n, std::mt19937& rng, float stddev = 1.0f,
                          float mean = 0.0f) {
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  device::Buffer b = dev.allocate(n * sizeof(float));
  dev.write(b, v.data(), n * sizeof(float));
  return b;
}

// µs per call of f: pipelined (one finish per trial), after a warm-up; the best of 5 trials of
// reps / 5 calls (the machine is shared: the minimum is the least disturbed figure).
double time_us(ocl::Context& ctx, int reps, const std::function<void()>& f) {
  for (int i = 0; i < 3; ++i) f();
  ctx.finish();
  const int per_trial = std::max(1, reps / 5);
  double best = 1e30;
  for (int trial = 0; trial < 5; ++trial) {
    const auto t0 = Clock::now();
    for (int i = 0; i < per_trial; ++i) f();
    ctx.finish();
    best = std::min(
        best, std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / per_trial);
  }
  return best;
}

std::string g_only;  // --only SUBSTRING: run the ops whose name contains it

bool wanted(const std::string& op) {
  return g_only.empty() || op.find(g_only) != std::string::npos;
}

json entry(const std::string& op, const std::string& shape, double us, double bytes) {
  return {{"op", op}, {"shape", shape}, {"us_per_call", us}, {"GBps", bytes / (us * 1e3)}};
}

// Times f and appends an entry, when op is wanted.
void add_entry(json& out, ocl::Context& ctx, int reps, const std::string& op,
               const std::string& shape, double bytes, const std::function<void()>& f) {
  if (wanted(op)) out.push_back(entry(op, shape, time_us(ctx, reps, f), bytes));
}

json bench_launch(device::Device& dev, int reps) {
  ocl::Context& ctx = ocl::context_of(dev);
  device::Buffer x = dev.allocate(64);
  const double pipelined = time_us(ctx, reps, [&] { scale(dev, x, 1, 1.0f); });
  const double blocking = time_us(ctx, reps / 4, [&] {
    scale(dev, x, 1, 1.0f);
    ctx.finish();
  });
  return {{"pipelined_us", pipelined}, {"blocking_round_trip_us", blocking}};
}

double copy_gbps(ocl::Context& ctx, int reps) {
  const size_t n = size_t{64} << 20;
  ocl::Buffer a(ctx, n), b(ctx, n);
  const double us = time_us(ctx, reps, [&] {
    ocl::check(clEnqueueCopyBuffer(ctx.queue(), a.get(), b.get(), 0, 0, n, 0, nullptr, nullptr),
               "clEnqueueCopyBuffer", "ops_bench");
  });
  return 2.0 * n / (us * 1e3);
}

json bench_ops(device::Device& dev, int reps, bool quick) {
  ocl::Context& ctx = ocl::context_of(dev);
  std::mt19937 rng(1);
  json out = json::array();
  const int dim = 1536, heads = 12, head = 128, ff = 8960, qkv = dim + 2 * 2 * head;
  for (int rows : {1, 5, 16, 64}) {
    const std::string r = std::to_string(rows) + "x";
    const auto x = random_buffer(dev, size_t(rows) * ff * 2, rng),
               y = random_buffer(dev, size_t(rows) * ff * 2, rng);
    const auto w = random_buffer(dev, dim, rng, 0.1f, 1.0f);
    std::vector<int32_t> pos(rows);
    for (int i = 0; i < rows; ++i) pos[i] = 1000 + i;
    device::Buffer pb = dev.allocate(pos.size() * 4);
    dev.write(pb, pos.data(), pos.size() * 4);
    const RopeTable table(dev, RopeType::kNeox, head, 1e6);
    const double n = double(rows) * dim, nh = double(rows) * heads * head, nf = double(rows) * ff;
    const std::string hs = r + std::to_string(heads) + "x" + std::to_string(head);
    add_entry(out, ctx, reps, "rms_norm", r + std::to_string(dim), 8 * n,
              [&] { rms_norm(dev, x, w, y, rows, dim, 1e-6f); });
    add_entry(out, ctx, reps, "add_rms_norm", r + std::to_string(dim), 16 * n,
              [&] { add_rms_norm(dev, y, x, w, Slice(y, int64_t(n)), rows, dim, 1e-6f); });
    add_entry(out, ctx, reps, "rms_norm_per_head", hs, 8 * nh,
              [&] { rms_norm(dev, x, Slice(w, 0), y, int64_t(rows) * heads, head, 1e-6f); });
    add_entry(out, ctx, reps, "rope_q", hs, 8 * nh,
              [&] { rope(dev, x, pb, rows, heads, head, table); });
    add_entry(out, ctx, reps, "add", r + std::to_string(dim), 12 * n,
              [&] { add(dev, x, y, int64_t(n)); });
    add_entry(out, ctx, reps, "split_columns_qkv", r + std::to_string(qkv), 8.0 * rows * qkv, [&] {
      split_columns(dev, x, y, Slice(y, rows * dim), Slice(y, rows * (dim + 256)), rows, dim, 256,
                    256);
    });
    for (auto act : {Activation::kSilu, Activation::kGeluTanh}) {
      add_entry(out, ctx, reps, std::string("gated_") + activation_name(act),
                r + std::to_string(ff), 12 * nf,
                [&] { gated_activation(dev, x, Slice(x, int64_t(rows) * ff), y, rows, ff, act); });
    }
  }
  for (int vocab : {151936, 262144}) {
    for (int rows : {1, 5, 16}) {
      if (quick && rows > 1) continue;
      const std::string s = std::to_string(rows) + "x" + std::to_string(vocab);
      const auto logits = random_buffer(dev, size_t(rows) * vocab, rng, 3.0f);
      device::Buffer ids = dev.allocate(size_t(rows) * 128 * 4), vals = dev.allocate(size_t(rows) * 128 * 4),
          lse = dev.allocate(size_t(rows) * 4), lp = dev.allocate(size_t(rows) * vocab * 4);
      const double bytes = 4.0 * rows * vocab;
      const int r2 = std::max(2, reps / 10);
      add_entry(out, ctx, r2, "argmax", s, bytes, [&] { argmax(dev, logits, ids, rows, vocab); });
      add_entry(out, ctx, r2, "logsumexp_rows", s, bytes,
                [&] { logsumexp_rows(dev, logits, lse, rows, vocab); });
      add_entry(out, ctx, r2, "log_softmax_rows", s, 2 * bytes,
                [&] { log_softmax_rows(dev, logits, lp, lse, rows, vocab); });
      for (int k : {20, 128}) {
        add_entry(out, ctx, r2, "top_k_" + std::to_string(k), s, bytes,
                  [&] { top_k(dev, logits, vals, ids, rows, vocab, k); });
      }
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) g_only = argv[++i];
  }
  const int reps = quick ? 10 : 400;
  try {
    auto ctx = ocl::Context::create();
    const auto dev = device::wrap(ctx);
    json result = {{"device", ctx->device().summary()},
                   {"reduction_local_size", reduction_local_size(*ctx)},
                   {"top_k_local_size", top_k_local_size(*ctx)},
                   {"launch", bench_launch(*dev, reps * 5)},
                   {"copy_GBps", copy_gbps(*ctx, quick ? 2 : 20)},
                   {"ops", bench_ops(*dev, reps, quick)}};
    std::printf("%s\n", result.dump(2).c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ops_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
