// Attention benchmark, JSON on stdout: every backend that applies, for decode (1 token) and a
// speculative verify step (1 + 4 tokens) at contexts 1k/4k/16k, and a 512-token prefill, on a
// Qwen2.5-1.5B-like layer (12 q heads / 2 KV heads / head 128, f16 cache, block 16). GB/s counts
// the K/V bytes the step must read once (latent rows for the MLA case: 16 q heads, 512 + 64);
// the machine's bandwidth is measured in the same run
// (host streaming read, and a device buffer copy).
// Usage: attention_bench [--quick]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "attention/metadata.h"
#include "attention/registry.h"
#include "device/ocl_device.h"
#include "kv/allocator.h"
#include "kv/planner.h"

using namespace specdec;
using namespace specdec::attn;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kQHeads = 12, kKvHeads = 2, kHead = 128, kBlock = 16;

// One core streaming-reading a large array (integer sum: vectorised, not latency bound).
double host_read_GBps(size_t bytes) {
  std::vector<uint64_t> a(bytes / 8, 1);
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    const uint64_t s = std::accumulate(a.begin(), a.end(), uint64_t{0});
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    if (s == 0) std::printf("?");  // keep the sum alive
    best = std::max(best, static_cast<double>(bytes) / dt / 1e9);
  }
  return best;
}

double device_copy_GBps(ocl::Context& ctx, size_t bytes) {
  ocl::Buffer a(ctx, bytes), b(ctx, bytes);
  a.fill_zero(ctx);
  ctx.finish();
  const auto t0 = Clock::now();
  for (int i = 0; i < 5; ++i) {
    SPECDEC_CL_CHECK(clEnqueueCopyBuffer(ctx.queue(), a.get(), b.get(), 0, 0, bytes, 0, nullptr, nullptr));
  }
  ctx.finish();
  return 10.0 * static_cast<double>(bytes) / std::chrono::duration<double>(Clock::now() - t0).count() / 1e9;
}

// One request with `num_new` tokens after `context` cached ones; blocks in shuffled order.
CommonAttentionMetadata one_request(int context, int num_new, int64_t num_blocks, std::mt19937& rng) {
  const int seq = context + num_new, nb = (seq + kBlock - 1) / kBlock;
  std::vector<int32_t> blocks(static_cast<size_t>(num_blocks - 1));
  std::iota(blocks.begin(), blocks.end(), 1);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  CommonAttentionMetadata md;
  md.num_reqs = 1;
  md.block_size = kBlock;
  md.max_blocks_per_req = nb;
  md.block_table.assign(blocks.begin(), blocks.begin() + nb);
  md.query_start_loc = {0, num_new};
  md.seq_lens = {seq};
  md.num_computed_tokens = {context};
  md.max_query_len = num_new;
  md.max_seq_len = seq;
  md.num_actual_tokens = num_new;
  for (int p = context; p < seq; ++p) md.slot_mapping.push_back(md.block_table[p / kBlock] * kBlock + p % kBlock);
  return md;
}

nlohmann::json run_case(device::Device& dev, const AttentionBackend& b, const kv::KvCacheAllocation& cache,
                        const kv::KvCacheSpec& spec, int num_q_heads, const char* what, int context, int num_new,
                        int reps, std::mt19937& rng) {
  ocl::Context& ctx = ocl::context_of(dev);
  const auto common = one_request(context, num_new, cache.views()[0].num_blocks, rng);
  const AttentionMetadata md = b.make_builder(spec, num_q_heads)->build(dev, common);
  const auto p = AttentionLayerParams::from_spec(spec, num_q_heads, 1.0f / std::sqrt(static_cast<float>(spec.head_size)));
  std::vector<float> q(static_cast<size_t>(num_new) * num_q_heads * p.head_size, 0.01f);
  device::Buffer qb = dev.allocate(q.size() * 4),
                 out = dev.allocate(static_cast<size_t>(num_new) * num_q_heads * p.head_size_v * 4);
  dev.write(qb, q.data(), q.size() * 4);
  b.forward(dev, md, p, cache.views()[0], cache.tensor(0), qb, out);  // warm-up (and compile)
  ctx.finish();
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = Clock::now();
    b.forward(dev, md, p, cache.views()[0], cache.tensor(0), qb, out);
    ctx.finish();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(times.begin(), times.end());
  const double t = times[times.size() / 2];
  const double kv_bytes = static_cast<double>(context + num_new) * spec.bytes_per_token();  // K and V (or latent)
  return {{"backend", b.name()}, {"case", what}, {"context", context}, {"num_new_tokens", num_new},
          {"num_q_heads", num_q_heads}, {"spec", spec.to_string()},
          {"median_us", t * 1e6}, {"kv_GBps", kv_bytes / t / 1e9}};
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  auto ctx = ocl::Context::create();
  const auto dev = device::wrap(ctx);
  std::mt19937 rng(1);
  nlohmann::json out;
  out["device"] = ctx->device().name;
  out["shape"] = {{"num_q_heads", kQHeads}, {"num_kv_heads", kKvHeads}, {"head_size", kHead},
                  {"block_size", kBlock}, {"kv_cache_dtype", "f16"}};
  out["host_read_GBps"] = host_read_GBps(quick ? (16u << 20) : (256u << 20));
  out["device_copy_GBps"] = device_copy_GBps(*ctx, quick ? (16u << 20) : (128u << 20));
  const std::vector<int> contexts = quick ? std::vector<int>{256} : std::vector<int>{1024, 4096, 16384};
  const int reps = quick ? 2 : 15;
  const auto spec = kv::KvCacheSpec::full_attention(kBlock, kKvHeads, kHead, DType::kF16);
  const auto r = AttentionRequirements::from_spec(spec, kQHeads);
  nlohmann::json results = nlohmann::json::array();
  for (const AttentionBackend* b : priority_list(dev->info())) {
    if (!b->validate(r).empty() || !b->capabilities().on_device) continue;
    const int64_t blocks = (contexts.back() + 512) / kBlock + 8;
    const auto config = kv::plan_kv_cache({{"l", spec, ""}}, 0, 1 << 20, {2048, blocks, ""});
    kv::KvCacheAllocation cache(device::wrap(ctx), config, {{"l", b->kv_layout()}});
    for (int c : contexts) {
      results.push_back(run_case(*dev, *b, cache, spec, kQHeads, "decode", c, 1, reps, rng));
      results.push_back(run_case(*dev, *b, cache, spec, kQHeads, "verify_1+4", c, 5, reps, rng));
    }
    results.push_back(run_case(*dev, *b, cache, spec, kQHeads, "prefill", 0, quick ? 64 : 512, quick ? 1 : 5, rng));
  }
  // MLA: a DeepSeek-V2-Lite-like layer (16 q heads, latent 512 + rope 64, f16)
  const auto mla = kv::KvCacheSpec::mla(kBlock, 512, 64, DType::kF16);
  for (const AttentionBackend* b : priority_list(dev->info())) {
    if (!b->validate(AttentionRequirements::from_spec(mla, 16)).empty() || !b->capabilities().on_device) continue;
    const auto config = kv::plan_kv_cache({{"m", mla, ""}}, 0, 1 << 20, {2048, (contexts.back() + 512) / kBlock + 8, ""});
    kv::KvCacheAllocation cache(device::wrap(ctx), config);
    for (int c : contexts) {
      results.push_back(run_case(*dev, *b, cache, mla, 16, "decode", c, 1, reps, rng));
      results.push_back(run_case(*dev, *b, cache, mla, 16, "verify_1+4", c, 5, reps, rng));
    }
  }
  out["results"] = results;
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
