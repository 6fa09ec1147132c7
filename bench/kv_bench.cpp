// KV-cache micro-benchmarks, JSON on stdout:
//  - block manager: cost of one engine step's allocate_slots (+ truncate after a rejection) for
//    a batch of speculative requests on a hybrid (Gemma 3-like) plan;
//  - kv_cache_write on the OpenCL device: GB/s of cache bytes written for a prefill chunk and
//    for a verify step, per dtype and layout, against a device-to-device buffer copy.
// Usage: kv_bench [--quick]
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>

#include "device/ocl_device.h"
#include "kv/allocator.h"
#include "kv/blocks.h"
#include "kv/cache_ops.h"
#include "kv/examples.h"
#include "kv/planner.h"

using namespace specdec;
using namespace specdec::kv;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

nlohmann::json bench_blocks(int num_requests, int num_steps) {
  const auto config = plan_kv_cache(example_model_layers("gemma3-270m"), int64_t{1} << 30, 32768);
  KvCacheManager m(config);
  std::vector<int64_t> len(num_requests, 0);
  for (int r = 0; r < num_requests; ++r) {
    if (!m.allocate_slots("req-" + std::to_string(r), 0, 600).ok) {  // prefill
      throw std::runtime_error("bench_blocks: plan too small for " + std::to_string(num_requests) + " requests");
    }
    len[r] = 600;
  }
  std::mt19937 rng(1);
  const auto t0 = Clock::now();
  int64_t calls = 0;
  for (int s = 0; s < num_steps; ++s) {
    for (int r = 0; r < num_requests; ++r) {
      const std::string id = "req-" + std::to_string(r);
      if (!m.allocate_slots(id, len[r], 5).ok) throw std::runtime_error("bench_blocks: out of blocks");
      const int64_t accepted = 1 + static_cast<int64_t>(rng() % 5);
      m.truncate(id, len[r] + accepted);
      len[r] += accepted;
      calls += 2;
    }
  }
  const double dt = seconds_since(t0);
  return {{"what", "allocate_slots + truncate per request per step"},
          {"plan", "gemma3-270m, 1 GiB, 2 groups"},
          {"num_requests", num_requests},
          {"num_steps", num_steps},
          {"us_per_request_step", dt * 1e6 / (static_cast<double>(calls) / 2)},
          {"final_usage", m.usage()}};
}

nlohmann::json bench_write(ocl::Context& ctx, DType dtype, KvLayout layout, int num_tokens, int reps) {
  const int heads = 8, head = 128;
  std::vector<LayerKvSpec> layers = {{"l", KvCacheSpec::full_attention(16, heads, head, dtype), ""}};
  const auto config = plan_kv_cache(layers, 0, 65536, {2048, 4097, ""});
  KvCacheAllocation cache(device::wrap(std::shared_ptr<ocl::Context>(&ctx, [](ocl::Context*) {})), config, {},
                          layout);
  device::Device& dev = cache.device();
  std::vector<int32_t> slots(num_tokens);
  for (int t = 0; t < num_tokens; ++t) slots[t] = 16 * (1 + (t / 16) * 7 % 4000) + t % 16;
  std::vector<float> src(static_cast<size_t>(num_tokens) * heads * head, 0.5f);
  device::Buffer slot_buf = dev.allocate(slots.size() * 4), src_buf = dev.allocate(src.size() * 4);
  dev.write(slot_buf, slots.data(), slots.size() * 4);
  dev.write(src_buf, src.data(), src.size() * 4);
  const auto& view = cache.view("l");
  for (int i = 0; i < 3; ++i) kv_cache_write(dev, cache.tensor(0), view, KvPart::kK, src_buf, slot_buf, num_tokens);
  ctx.finish();
  const auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) {
    kv_cache_write(dev, cache.tensor(0), view, KvPart::kK, src_buf, slot_buf, num_tokens);
    kv_cache_write(dev, cache.tensor(0), view, KvPart::kV, src_buf, slot_buf, num_tokens);
  }
  ctx.finish();
  const double dt = seconds_since(t0) / reps;
  const double cache_bytes = 2.0 * num_tokens * heads * head * static_cast<double>(dtype_size(dtype));
  const double moved = cache_bytes + 2.0 * src.size() * 4;  // written + f32 source read
  return {{"dtype", dtype_name(dtype)}, {"layout", layout_name(layout)}, {"num_tokens", num_tokens},
          {"heads", heads}, {"head_size", head}, {"us_per_step", dt * 1e6},
          {"cache_GBps", cache_bytes / dt / 1e9}, {"moved_GBps", moved / dt / 1e9}};
}

double copy_bandwidth(ocl::Context& ctx, size_t bytes, int reps) {
  ocl::Buffer a(ctx, bytes), b(ctx, bytes);
  a.fill_zero(ctx);
  b.fill_zero(ctx);
  ctx.finish();
  const auto t0 = Clock::now();
  for (int i = 0; i < reps; ++i) {
    SPECDEC_CL_CHECK(clEnqueueCopyBuffer(ctx.queue(), a.get(), b.get(), 0, 0, bytes, 0, nullptr, nullptr));
  }
  ctx.finish();
  return 2.0 * static_cast<double>(bytes) * reps / seconds_since(t0) / 1e9;  // read + write
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  auto ctx = ocl::Context::create();
  nlohmann::json out;
  out["device"] = ctx->device().name;
  out["platform"] = ctx->device().platform_name;
  out["blocks"] = bench_blocks(quick ? 4 : 16, quick ? 20 : 500);
  out["copy_GBps"] = copy_bandwidth(*ctx, size_t{64} << 20, quick ? 2 : 10);
  nlohmann::json writes = nlohmann::json::array();
  for (int tokens : {5, 512}) {
    for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
      for (KvLayout l : {KvLayout::kKvMajor, KvLayout::kBlockMajor}) {
        writes.push_back(bench_write(*ctx, dt, l, tokens, quick ? 3 : (tokens < 64 ? 500 : 50)));
      }
    }
  }
  out["kv_cache_write"] = writes;
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
