// OCL_MLA against attention_ref (the C++ oracle) on random ragged batches with shuffled block
// tables: decodes (with contexts spanning several key splits), prefills, chunked prefills and
// mixed batches with 1+4-token verify steps, requests with no new tokens and empty batches, over
// latent sizes, q heads, block sizes, dtypes, causal and non-causal, softcap and sinks. The
// metadata comes from the builder that knows num_q_heads (the engine's path: the step's launch
// plan and scratch in backend_data). Plus batch invariance (a token's output is bitwise the same
// alone and inside a batch, with the step's plan or one made per call) and the capabilities that
// validate() checks.
//
// Error bound: the kernel accumulates in f32 (the oracle in f64, reading the same cache
// values), so the error does not depend on the cache dtype. Observed max |got - want| /
// max(1, |want|) over every case below: 9e-7; the bound leaves 10x for other devices' exp.
//
// Sizes are kept small for the sanitizer build, where the oracle dominates (its cost grows with
// keys * heads * latent size): 3-split decodes and a chunk across a split boundary for the
// 512 + 64 latent, fewer keys for its 128-head cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "attention/backends/backends.h"
#include "attention/reference.h"
#include "attention_test_util.h"
#include "common/errors.h"

using namespace specdec;
using namespace specdec::attn;
using namespace specdec::attn::testing;

namespace {

constexpr float kTolerance = 1e-5f;

enum class Batch { kDecode, kPrefill, kMixed, kSmall, kZeroNew };

// Decodes span 1..3 key splits (256 keys each); the prefill has a chunk that crosses a split
// boundary; the mixed and small batches have a 1+4-token verify step, decodes and prefill chunks;
// kZeroNew has requests without new tokens (one without any key) among others.
std::vector<Req> batch_reqs(Batch b) {
  switch (b) {
    case Batch::kDecode:
      return {{512, 1}, {0, 1}, {255, 1}};
    case Batch::kPrefill:
      return {{0, 17}, {255, 2}, {0, 1}, {5, 4}};
    case Batch::kMixed:
      return {{0, 10}, {257, 1}, {60, 5}, {30, 1}, {0, 3}};
    case Batch::kSmall:
      return {{30, 1}, {0, 2}, {10, 5}};  // mixed, cheap for the oracle with 128 heads
    case Batch::kZeroNew:
      return {{100, 0}, {300, 1}, {0, 0}, {40, 5}, {256, 0}};
  }
  return {};
}

std::string batch_name(Batch b) {
  switch (b) {
    case Batch::kDecode:
      return "decode";
    case Batch::kPrefill:
      return "prefill";
    case Batch::kMixed:
      return "mixed";
    case Batch::kSmall:
      return "small";
    case Batch::kZeroNew:
      return "zero_new";
  }
  return "";
}

int64_t blocks_needed(const std::vector<Req>& reqs, int block_size) {
  int64_t n = 2;  // block 0 is never used, plus one spare
  for (const Req& r : reqs) n += (r.num_computed + r.num_new + block_size - 1) / block_size;
  return n;
}

struct MlaCase {
  int lora = 512, rope = 64, heads = 16, block_size = 16;
  DType dtype = DType::kF16;
  Batch batch = Batch::kMixed;
  bool causal = true;
  float softcap = 0.0f;
  bool sinks = false;
};

std::string case_name(const MlaCase& c) {
  std::string n = str_cat(batch_name(c.batch), "_", c.lora, "p", c.rope, "_h", c.heads, "_bs",
                          c.block_size, "_", dtype_name(c.dtype), c.causal ? "" : "_noncausal");
  if (c.softcap > 0) n += "_softcap";
  if (c.sinks) n += "_sinks";
  return n;
}

AttentionLayerParams layer_params(const MlaCase& c) {
  AttentionLayerParams p;
  p.num_q_heads = c.heads;
  p.num_kv_heads = 1;
  p.head_size = c.lora + c.rope;
  p.head_size_v = c.lora;
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.lora + c.rope));
  p.logit_softcap = c.softcap;
  return p;
}

// The backend's output on `common` for `query`, with metadata from make_builder(spec,
// builder_q_heads) (0: a builder that does not know the head count).
std::vector<float> run(const AttentionBackend& backend, const kv::KvCacheSpec& spec,
                       const RandomCache& cache, const CommonAttentionMetadata& common,
                       const AttentionLayerParams& params, const std::vector<float>& query,
                       const std::vector<float>& sinks, int builder_q_heads) {
  const size_t n_out =
      static_cast<size_t>(common.num_actual_tokens) * params.num_q_heads * params.head_size_v;
  device::Buffer q_buf = dev().allocate(std::max<size_t>(query.size(), 1) * 4);
  device::Buffer out_buf = dev().allocate(std::max<size_t>(n_out, 1) * 4);
  if (!query.empty()) dev().write(q_buf, query.data(), query.size() * 4);
  AttentionLayerParams p = params;
  std::unique_ptr<device::Buffer> sink_buf;
  if (!sinks.empty()) {
    sink_buf = std::make_unique<device::Buffer>(dev().allocate(sinks.size() * 4));
    dev().write(*sink_buf, sinks.data(), sinks.size() * 4);
    p.sinks = sink_buf.get();
  }
  const AttentionMetadata md = backend.make_builder(spec, builder_q_heads)->build(dev(), common);
  backend.forward(dev(), md, p, cache.view(), cache.buffer(), q_buf, out_buf);
  std::vector<float> out(n_out);
  if (n_out > 0) dev().read(out_buf, out.data(), n_out * 4);
  return out;
}

// Largest |got - want| / max(1, |want|) against attention_ref, on the engine's path.
float max_error(const AttentionBackend& backend, const kv::KvCacheSpec& spec,
                const RandomCache& cache, const CommonAttentionMetadata& common,
                const AttentionLayerParams& p, const std::vector<float>& sinks, std::mt19937& rng) {
  const auto query = random_floats(
      static_cast<size_t>(common.num_actual_tokens) * p.num_q_heads * p.head_size, rng);
  const auto got = run(backend, spec, cache, common, p, query, sinks, p.num_q_heads);
  const auto want = attention_ref(common, p, sinks, cache.view(), cache.raw, query);
  float err = 0.0f;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    err = std::max(err, std::fabs(got[i] - want[i]) / std::max(1.0f, std::fabs(want[i])));
  }
  return err;
}

class MlaVsReference : public ::testing::TestWithParam<MlaCase> {};

TEST_P(MlaVsReference, MatchesReference) {
  const MlaCase& c = GetParam();
  std::mt19937 rng(1234);
  const auto backend = make_ocl_mla_backend();
  const kv::KvCacheSpec spec = kv::KvCacheSpec::mla(c.block_size, c.lora, c.rope, c.dtype);
  const auto reqs = batch_reqs(c.batch);
  const int64_t num_blocks = blocks_needed(reqs, c.block_size);
  const RandomCache cache = random_cache(spec, kv::KvLayout::kMlaLatent, num_blocks, rng);
  const CommonAttentionMetadata md = random_metadata(reqs, c.block_size, num_blocks, c.causal, rng);
  const std::vector<float> sinks =
      c.sinks ? random_floats(static_cast<size_t>(c.heads), rng, 2.0f) : std::vector<float>{};
  const float err = max_error(*backend, spec, cache, md, layer_params(c), sinks, rng);
  EXPECT_LE(err, kTolerance) << case_name(c);
  std::printf("[ max error ] %-40s %.3g\n", case_name(c).c_str(), err);
}

std::vector<MlaCase> cases() {
  std::vector<MlaCase> out;
  // The DeepSeek-V2-Lite shape (16 heads, 512 + 64) in every batch kind and dtype.
  for (Batch b : {Batch::kDecode, Batch::kPrefill, Batch::kMixed}) {
    for (DType d : {DType::kF32, DType::kF16, DType::kBF16}) out.push_back({512, 64, 16, 16, d, b});
  }
  out.push_back({512, 64, 16, 1, DType::kF16, Batch::kMixed});
  out.push_back({512, 64, 16, 64, DType::kBF16, Batch::kDecode});
  out.push_back({512, 64, 16, 16, DType::kF16, Batch::kMixed, false});
  out.push_back({512, 64, 1, 64, DType::kF32, Batch::kDecode});
  out.push_back({512, 64, 1, 1, DType::kBF16, Batch::kMixed});
  out.push_back({512, 64, 128, 64, DType::kF16, Batch::kSmall});
  out.push_back({512, 64, 128, 16, DType::kBF16, Batch::kSmall, false});
  // Small latent rows, every block size and dtype, non-causal.
  for (int bs : {1, 16, 64}) {
    for (DType d : {DType::kF32, DType::kF16, DType::kBF16})
      out.push_back({32, 16, 16, bs, d, Batch::kMixed});
  }
  out.push_back({32, 16, 1, 16, DType::kF16, Batch::kPrefill});
  out.push_back({32, 16, 128, 1, DType::kF32, Batch::kDecode});
  out.push_back({32, 16, 16, 16, DType::kBF16, Batch::kPrefill, false});
  out.push_back({32, 16, 128, 64, DType::kF16, Batch::kMixed, false});
  // No rope part.
  out.push_back({64, 0, 16, 16, DType::kF16, Batch::kMixed});
  out.push_back({64, 0, 128, 64, DType::kF32, Batch::kDecode});
  out.push_back({64, 0, 1, 1, DType::kBF16, Batch::kPrefill, false});
  // Sizes that are not multiples of 16 (scalar tails), a head count with no divisor <= 16 but 1.
  out.push_back({20, 7, 12, 5, DType::kF32, Batch::kMixed});
  out.push_back({40, 3, 17, 3, DType::kF16, Batch::kDecode});
  // Logit softcap and attention sinks.
  out.push_back({32, 16, 16, 16, DType::kF16, Batch::kMixed, true, 5.0f, false});
  out.push_back({512, 64, 16, 16, DType::kBF16, Batch::kMixed, true, 0.0f, true});
  out.push_back({32, 16, 16, 1, DType::kF32, Batch::kDecode, false, 3.0f, true});
  // Requests without new tokens.
  out.push_back({512, 64, 16, 16, DType::kF16, Batch::kZeroNew});
  out.push_back({32, 16, 16, 1, DType::kBF16, Batch::kZeroNew, false});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Cases, MlaVsReference, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<MlaCase>& info) {
                           return case_name(info.param);
                         });

// Request r's token t (a batch index) as a one-token batch over the same blocks.
CommonAttentionMetadata single_token(const CommonAttentionMetadata& md, int r, int t) {
  CommonAttentionMetadata one;
  const int pos = md.num_computed_tokens[r] + (t - md.query_start_loc[r]);
  one.num_reqs = 1;
  one.num_actual_tokens = 1;
  one.max_query_len = 1;
  one.block_size = md.block_size;
  one.causal = md.causal;
  one.max_blocks_per_req = md.max_blocks_per_req;
  one.query_start_loc = {0, 1};
  one.seq_lens = {md.causal ? pos + 1 : md.seq_lens[r]};
  one.max_seq_len = one.seq_lens[0];
  one.num_computed_tokens = {one.seq_lens[0] - 1};
  one.block_table.assign(
      md.block_table.begin() + static_cast<size_t>(r) * md.max_blocks_per_req,
      md.block_table.begin() + static_cast<size_t>(r + 1) * md.max_blocks_per_req);
  one.slot_mapping = {md.slot_mapping[t]};
  return one;
}

// Every token of a mixed batch (incl. a 1+4 verify step) alone gives bitwise the same output.
void expect_batch_invariant(const MlaCase& c, const std::vector<Req>& reqs) {
  std::mt19937 rng(99);
  const auto backend = make_ocl_mla_backend();
  const kv::KvCacheSpec spec = kv::KvCacheSpec::mla(c.block_size, c.lora, c.rope, c.dtype);
  const int64_t num_blocks = blocks_needed(reqs, c.block_size);
  const RandomCache cache = random_cache(spec, kv::KvLayout::kMlaLatent, num_blocks, rng);
  const CommonAttentionMetadata md = random_metadata(reqs, c.block_size, num_blocks, c.causal, rng);
  const AttentionLayerParams p = layer_params(c);
  const size_t q_row = static_cast<size_t>(p.num_q_heads) * p.head_size,
               o_row = size_t{1} * p.num_q_heads * p.head_size_v;
  const std::vector<float> query = random_floats(md.num_actual_tokens * q_row, rng);
  const std::vector<float> batch = run(*backend, spec, cache, md, p, query, {}, p.num_q_heads);
  for (int r = 0; r < md.num_reqs; ++r) {
    for (int t = md.query_start_loc[r]; t < md.query_start_loc[r + 1]; ++t) {
      const std::vector<float> q(query.begin() + t * q_row, query.begin() + (t + 1) * q_row);
      const std::vector<float> alone =
          run(*backend, spec, cache, single_token(md, r, t), p, q, {}, p.num_q_heads);
      EXPECT_EQ(0, std::memcmp(alone.data(), batch.data() + t * o_row, o_row * 4))
          << case_name(c) << ": token " << t << " of request " << r << " differs alone";
    }
  }
}

const std::vector<Req> kInvariantReqs = {{0, 9}, {600, 1}, {300, 5}, {7, 1}, {255, 3}};

TEST(OclMla, BatchInvariantDeepSeekV2Lite) {
  expect_batch_invariant({512, 64, 16, 16, DType::kF16}, kInvariantReqs);
}
TEST(OclMla, BatchInvariantSmallBf16) {
  expect_batch_invariant({32, 16, 128, 1, DType::kBF16}, kInvariantReqs);
}
TEST(OclMla, BatchInvariantNonCausal) {
  expect_batch_invariant({32, 16, 16, 64, DType::kF32, Batch::kMixed, false}, kInvariantReqs);
}
// A launch reserves its most splits for each of its tokens: after the 3-split decode, 42 tokens
// * 3 splits * 128 heads * 514 floats of partial sums fill the 32 MiB scratch, so the batch runs
// in two launches (3 splits, then 1), each token still bitwise equal to its run alone.
TEST(OclMla, BatchInvariantAcrossLaunches) {
  expect_batch_invariant({512, 64, 128, 16, DType::kBF16}, {{600, 1}, {0, 60}});
}

// The step's plan (backend_data from the builder that knows num_q_heads) serves every layer;
// a builder that does not know the head count, or metadata built for another head count, get a
// plan and scratch for the call: the same bits.
TEST(OclMla, StepPlanAndPerCallPlansAgree) {
  std::mt19937 rng(11);
  const auto backend = make_ocl_mla_backend();
  const MlaCase c{512, 64, 16, 16, DType::kF16};
  const kv::KvCacheSpec spec = kv::KvCacheSpec::mla(c.block_size, c.lora, c.rope, c.dtype);
  const auto reqs = batch_reqs(Batch::kMixed);
  const int64_t num_blocks = blocks_needed(reqs, c.block_size);
  const RandomCache cache = random_cache(spec, kv::KvLayout::kMlaLatent, num_blocks, rng);
  const CommonAttentionMetadata common = random_metadata(reqs, c.block_size, num_blocks, true, rng);
  const AttentionLayerParams p = layer_params(c);
  const size_t n_q = static_cast<size_t>(common.num_actual_tokens) * p.num_q_heads * p.head_size;
  const size_t n_out =
      static_cast<size_t>(common.num_actual_tokens) * p.num_q_heads * p.head_size_v;
  const std::vector<float> query = random_floats(n_q, rng);
  device::Buffer q = dev().allocate(n_q * 4);
  dev().write(q, query.data(), n_q * 4);
  auto forward = [&](const AttentionMetadata& md) {
    device::Buffer out = dev().allocate(n_out * 4);
    backend->forward(dev(), md, p, cache.view(), cache.buffer(), q, out);
    std::vector<float> got(n_out);
    dev().read(out, got.data(), n_out * 4);
    return got;
  };
  const AttentionMetadata step = backend->make_builder(spec, c.heads)->build(dev(), common);
  ASSERT_TRUE(step.backend_data != nullptr);
  const auto first = forward(step);
  EXPECT_EQ(0, std::memcmp(first.data(), forward(step).data(), n_out * 4)) << "second layer";
  for (int heads : {0, 2 * c.heads}) {
    const AttentionMetadata other = backend->make_builder(spec, heads)->build(dev(), common);
    EXPECT_EQ(other.backend_data != nullptr, heads != 0);
    EXPECT_EQ(0, std::memcmp(first.data(), forward(other).data(), n_out * 4))
        << "metadata built for " << heads << " q heads";
  }
}

// A batch without tokens (no requests, or only requests without new tokens) writes nothing.
TEST(OclMla, EmptyBatchWritesNothing) {
  std::mt19937 rng(3);
  const auto backend = make_ocl_mla_backend();
  const MlaCase c{32, 16, 16, 16, DType::kF16};
  const kv::KvCacheSpec spec = kv::KvCacheSpec::mla(c.block_size, c.lora, c.rope, c.dtype);
  const RandomCache cache = random_cache(spec, kv::KvLayout::kMlaLatent, 8, rng);
  const std::vector<float> sentinel(64, 7.0f);
  for (const std::vector<Req>& reqs : {std::vector<Req>{}, std::vector<Req>{{0, 0}, {20, 0}}}) {
    for (bool causal : {true, false}) {
      const CommonAttentionMetadata common = random_metadata(reqs, c.block_size, 8, causal, rng);
      ASSERT_EQ(common.num_actual_tokens, 0);
      for (int builder_q_heads : {c.heads, 0}) {
        const AttentionMetadata md =
            backend->make_builder(spec, builder_q_heads)->build(dev(), common);
        EXPECT_TRUE(md.backend_data == nullptr);  // nothing to plan
        device::Buffer q = dev().allocate(64 * 4), out = dev().allocate(64 * 4);
        dev().write(out, sentinel.data(), 64 * 4);
        EXPECT_NO_THROW(
            backend->forward(dev(), md, layer_params(c), cache.view(), cache.buffer(), q, out));
        std::vector<float> got(64);
        dev().read(out, got.data(), 64 * 4);
        EXPECT_EQ(got, sentinel) << reqs.size() << " requests, builder q heads " << builder_q_heads;
      }
    }
  }
}

TEST(OclMla, Capabilities) {
  const auto backend = make_ocl_mla_backend();
  const BackendCapabilities& c = backend->capabilities();
  EXPECT_EQ(c.name, "OCL_MLA");
  EXPECT_EQ(c.description, "MLA latent attention");
  EXPECT_TRUE(c.is_mla);
  EXPECT_TRUE(c.on_device);
  EXPECT_EQ(c.max_head_size, 1024);
  EXPECT_EQ(c.kv_layout, kv::KvLayout::kMlaLatent);
  const auto mla =
      AttentionRequirements::from_spec(kv::KvCacheSpec::mla(16, 512, 64, DType::kF16), 16);
  EXPECT_TRUE(backend->validate(mla).empty());
  auto non_causal = mla;
  non_causal.use_non_causal = true;
  EXPECT_TRUE(backend->validate(non_causal).empty());
  const auto full = AttentionRequirements::from_spec(
      kv::KvCacheSpec::full_attention(16, 8, 128, DType::kF16), 32);
  EXPECT_EQ(backend->validate(full), std::vector<std::string>{"non-MLA not supported"});
  const auto big =
      AttentionRequirements::from_spec(kv::KvCacheSpec::mla(16, 1024, 64, DType::kF16), 16);
  ASSERT_EQ(backend->validate(big).size(), 1u);
  EXPECT_NE(backend->validate(big)[0].find("head_size 1088"), std::string::npos);
  auto i8 = mla;
  i8.kv_cache_dtype = DType::kI8;
  EXPECT_EQ(backend->validate(i8), std::vector<std::string>{"kv_cache_dtype int8 not supported"});
}

TEST(OclMla, RejectsWindowAndBadHeadSizeV) {
  std::mt19937 rng(5);
  const auto backend = make_ocl_mla_backend();
  const kv::KvCacheSpec spec = kv::KvCacheSpec::mla(16, 32, 16, DType::kF16);
  const RandomCache cache = random_cache(spec, kv::KvLayout::kMlaLatent, 8, rng);
  const CommonAttentionMetadata md = random_metadata({{3, 2}}, 16, 8, true, rng);
  MlaCase c{32, 16, 4, 16};
  AttentionLayerParams p = layer_params(c);
  p.sliding_window = 4;
  EXPECT_THROW(max_error_vs_reference(*backend, spec, md, p, cache, {}, rng), UnsupportedError);
  p = layer_params(c);
  p.head_size_v = 48;
  EXPECT_THROW(max_error_vs_reference(*backend, spec, md, p, cache, {}, rng), ConfigError);
}

// Not a timed assertion: prints one decode timing (16 heads, 512 + 64, f16, 4k context).
// Run with --gtest_also_run_disabled_tests.
TEST(OclMla, DISABLED_DecodeTiming) {
  std::mt19937 rng(7);
  const auto backend = make_ocl_mla_backend();
  const kv::KvCacheSpec spec = kv::KvCacheSpec::mla(16, 512, 64, DType::kF16);
  const std::vector<Req> reqs = {{4095, 1}};
  const RandomCache cache =
      random_cache(spec, kv::KvLayout::kMlaLatent, blocks_needed(reqs, 16), rng);
  const CommonAttentionMetadata common =
      random_metadata(reqs, 16, blocks_needed(reqs, 16), true, rng);
  const AttentionLayerParams p = layer_params({512, 64, 16, 16});
  const auto query = random_floats(16 * 576, rng);
  device::Buffer q_buf = dev().allocate(query.size() * 4), out_buf = dev().allocate(16 * 512 * 4);
  dev().write(q_buf, query.data(), query.size() * 4);
  const AttentionMetadata md = backend->make_builder(spec, 16)->build(dev(), common);  // as a step
  for (int i = 0; i < 3; ++i)
    backend->forward(dev(), md, p, cache.view(), cache.buffer(), q_buf, out_buf);
  dev().sync();
  std::vector<double> ms(50);
  for (double& m : ms) {
    const auto t0 = std::chrono::steady_clock::now();
    backend->forward(dev(), md, p, cache.view(), cache.buffer(), q_buf, out_buf);
    dev().sync();
    m = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  std::sort(ms.begin(), ms.end());
  std::printf(
      "[ timing ] decode 16 heads 512+64 f16 ctx 4096 (forward + finish, 50 runs): best %.3f ms, "
      "median %.3f ms\n",
      ms.front(), ms[ms.size() / 2]);
}

}  // namespace
