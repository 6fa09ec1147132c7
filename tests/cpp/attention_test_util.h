// Shared by the attention backend tests: random ragged batches with shuffled block tables,
// random caches, and running a backend against attention_ref.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attention/backend.h"
#include "attention/metadata.h"
#include "attention/reference.h"
#include "device/ocl_device.h"
#include "device_test_util.h"
#include "kv/allocator.h"
#include "kv/cache_ops.h"
#include "kv/planner.h"

namespace specdec::attn::testing {

inline std::shared_ptr<ocl::Context> context() {
  static auto ctx = ocl::Context::create();
  return ctx;
}

// The device the backends run on: the OpenCL context through the seam, or the native CPU device
// when SPECDEC_DEVICE=native (the paged tests then run CPU_PAGED; the OpenCL-only tests keep
// context()).
inline const std::shared_ptr<device::Device>& shared_dev() {
  static const std::shared_ptr<device::Device> d =
      specdec::testing::device_under_test([] { return device::wrap(context()); });
  return d;
}
inline device::Device& dev() { return *shared_dev(); }
inline bool native() { return dev().kind() == device::Kind::kCpu; }

// One request of a batch: tokens already cached, tokens computed now.
struct Req {
  int num_computed = 0;
  int num_new = 1;
};

// Metadata for `reqs` whose blocks are drawn, shuffled, from a pool of num_blocks (block 0 is
// never used). Every request gets cdiv(seq_len, block_size) blocks.
inline CommonAttentionMetadata random_metadata(const std::vector<Req>& reqs, int block_size, int64_t num_blocks,
                                               bool causal, std::mt19937& rng) {
  std::vector<int32_t> free_blocks(static_cast<size_t>(num_blocks - 1));
  std::iota(free_blocks.begin(), free_blocks.end(), 1);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
  CommonAttentionMetadata md;
  md.num_reqs = static_cast<int>(reqs.size());
  md.block_size = block_size;
  md.causal = causal;
  md.query_start_loc.push_back(0);
  for (const Req& r : reqs) {
    md.max_blocks_per_req = std::max(md.max_blocks_per_req, (r.num_computed + r.num_new + block_size - 1) / block_size);
  }
  md.block_table.assign(static_cast<size_t>(md.num_reqs) * md.max_blocks_per_req, 0);
  size_t next = 0;
  for (int i = 0; i < md.num_reqs; ++i) {
    const Req& r = reqs[i];
    const int seq = r.num_computed + r.num_new;
    const int nb = (seq + block_size - 1) / block_size;
    EXPECT_LE(next + nb, free_blocks.size()) << "pool too small for the batch";
    for (int b = 0; b < nb; ++b) md.block_table[static_cast<size_t>(i) * md.max_blocks_per_req + b] = free_blocks[next++];
    for (int pos = r.num_computed; pos < seq; ++pos) {
      md.slot_mapping.push_back(md.block_table[static_cast<size_t>(i) * md.max_blocks_per_req + pos / block_size] *
                                    block_size + pos % block_size);
    }
    md.query_start_loc.push_back(static_cast<int32_t>(md.slot_mapping.size()));
    md.seq_lens.push_back(seq);
    md.num_computed_tokens.push_back(r.num_computed);
    md.max_query_len = std::max(md.max_query_len, r.num_new);
    md.max_seq_len = std::max(md.max_seq_len, seq);
  }
  md.num_actual_tokens = static_cast<int>(md.slot_mapping.size());
  return md;
}

inline std::vector<float> random_floats(size_t n, std::mt19937& rng, float stddev = 1.0f) {
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> out(n);
  for (auto& x : out) x = dist(rng);
  return out;
}

// A one-layer cache of `spec` with num_blocks blocks in `layout`, every element random.
struct RandomCache {
  kv::KvCacheConfig config;
  std::unique_ptr<kv::KvCacheAllocation> alloc;
  std::vector<uint8_t> raw;  // host copy of the tensor

  const kv::LayerKvView& view() const { return alloc->views()[0]; }
  const device::Buffer& buffer() const { return alloc->tensor(0); }
};

inline RandomCache random_cache(const kv::KvCacheSpec& spec, kv::KvLayout layout, int64_t num_blocks,
                                std::mt19937& rng) {
  RandomCache c;
  c.config = kv::plan_kv_cache({{"layer", spec, ""}}, 0, 1 << 20, {2048, num_blocks, ""});
  c.alloc = std::make_unique<kv::KvCacheAllocation>(shared_dev(), c.config, kv::LayoutMap{{"layer", layout}});
  const int64_t num_elems = c.config.tensors[0].size_bytes / static_cast<int64_t>(dtype_size(spec.dtype));
  c.raw.assign(static_cast<size_t>(c.config.tensors[0].size_bytes), 0);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int64_t i = 0; i < num_elems; ++i) kv::store_element(c.raw, spec.dtype, i, dist(rng));
  dev().write(c.alloc->tensor(0), c.raw.data(), c.raw.size());
  return c;
}

// Runs `backend` (with its own builder) and attention_ref on the same inputs; returns the
// largest absolute difference relative to max(1, |reference|).
inline float max_error_vs_reference(const AttentionBackend& backend, const kv::KvCacheSpec& spec,
                                    const CommonAttentionMetadata& common, const AttentionLayerParams& params,
                                    const RandomCache& cache, const std::vector<float>& sinks, std::mt19937& rng) {
  const size_t n_q = static_cast<size_t>(common.num_actual_tokens) * params.num_q_heads * params.head_size;
  const size_t n_out = static_cast<size_t>(common.num_actual_tokens) * params.num_q_heads * params.head_size_v;
  const auto query = random_floats(n_q, rng);
  device::Buffer q_buf = dev().allocate(std::max<size_t>(n_q, 1) * 4),
                 out_buf = dev().allocate(std::max<size_t>(n_out, 1) * 4);
  if (n_q > 0) dev().write(q_buf, query.data(), n_q * 4);
  std::unique_ptr<device::Buffer> sink_buf;
  AttentionLayerParams p = params;
  if (!sinks.empty()) {
    sink_buf = std::make_unique<device::Buffer>(dev().allocate(sinks.size() * 4));
    dev().write(*sink_buf, sinks.data(), sinks.size() * 4);
    p.sinks = sink_buf.get();
  }
  const AttentionMetadata md = backend.make_builder(spec)->build(dev(), common);
  backend.forward(dev(), md, p, cache.view(), cache.buffer(), q_buf, out_buf);
  std::vector<float> got(n_out);
  if (n_out > 0) dev().read(out_buf, got.data(), n_out * 4);
  const auto want = attention_ref(common, p, sinks, cache.view(), cache.raw, query);
  float err = 0.0f;
  for (size_t i = 0; i < n_out; ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    err = std::max(err, std::fabs(got[i] - want[i]) / std::max(1.0f, std::fabs(want[i])));
  }
  return err;
}

}  // namespace specdec::attn::testing
