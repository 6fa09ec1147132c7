// OCL_PAGED and REFERENCE against attention_ref: ragged batches (decode, prefill, mixed with a
// verify step) over head sizes, GQA ratios, block sizes, dtypes, both attention layouts and the
// features (non-causal, sliding window, chunked local, softcap, sinks, head_size_v != head_size);
// plus batch invariance: a request's rows are bitwise the same alone and inside a batch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "attention/backends/backends.h"
#include "attention_test_util.h"
#include "common/errors.h"

using namespace specdec;
using namespace specdec::attn;
using namespace specdec::attn::testing;

namespace {

enum class Batch { kDecode, kPrefill, kMixed };

std::vector<Req> batch_reqs(Batch b) {
  switch (b) {
    case Batch::kDecode:
      return {{37, 1}, {150, 1}, {300, 1}, {5, 1}, {0, 1}};
    case Batch::kPrefill:
      return {{0, 61}, {0, 23}};
    case Batch::kMixed:
      return {{40, 24}, {120, 1}, {250, 1}, {77, 5}, {0, 9}};  // chunk, decodes, 1+4 verify
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
  }
  return "";
}

struct Case {
  Batch batch = Batch::kMixed;
  int head = 128;
  int head_v = -1;  // -1: = head
  int q_heads = 8;
  int kv_heads = 2;
  int block = 16;
  DType dtype = DType::kF16;
  kv::KvLayout layout = kv::KvLayout::kKvMajor;
  bool causal = true;
  int window = 0;  // sliding window (spec kind sliding_window)
  int chunk = 0;   // attention chunk (spec kind chunked_local)
  float softcap = 0.0f;
  bool sinks = false;
  float sharpness = 1.0f;  // multiplies the scale 1/sqrt(head): > 1 gives peaked softmaxes

  int hv() const { return head_v < 0 ? head : head_v; }
  kv::KvCacheSpec spec() const {
    if (window > 0) return kv::KvCacheSpec::sliding(block, kv_heads, head, dtype, window, head_v);
    if (chunk > 0)
      return kv::KvCacheSpec::chunked_local(block, kv_heads, head, dtype, chunk, head_v);
    return kv::KvCacheSpec::full_attention(block, kv_heads, head, dtype, head_v);
  }
  std::string name() const {
    std::string n = batch_name(batch) + "_d" + std::to_string(head);
    if (hv() != head) n += "_dv" + std::to_string(hv());
    n += "_h" + std::to_string(q_heads) + "x" + std::to_string(kv_heads) + "_bs" +
         std::to_string(block) + "_" + dtype_name(dtype) + "_" + kv::layout_name(layout);
    if (!causal) n += "_noncausal";
    if (window > 0) n += "_window" + std::to_string(window);
    if (chunk > 0) n += "_chunk" + std::to_string(chunk);
    if (softcap > 0) n += "_softcap";
    if (sinks) n += "_sinks";
    if (sharpness != 1.0f) n += "_sharp" + std::to_string(static_cast<int>(sharpness));
    return n;
  }
};

// Inputs are exact in every dtype (the cache is stored, then read back by both sides), so the
// only difference is f32 accumulation (kernel) vs f64 (reference): the same bound for all.
constexpr float kTolerance = 2e-5f;  // measured: <= 3.1e-6 (peaked softmax), ~5e-7 typical

int64_t pool_blocks(const std::vector<Req>& reqs, int block) {
  int64_t n = 2;
  for (const Req& r : reqs) n += (r.num_computed + r.num_new + block - 1) / block;
  return n;
}

AttentionLayerParams params_of(const Case& c) {
  AttentionLayerParams p;
  p.num_q_heads = c.q_heads;
  p.num_kv_heads = c.kv_heads;
  p.head_size = c.head;
  p.head_size_v = c.hv();
  p.scale = c.sharpness / std::sqrt(static_cast<float>(c.head));
  p.logit_softcap = c.softcap;
  p.sliding_window = c.window;
  p.attention_chunk_size = c.chunk;
  return p;
}

float run_case(const AttentionBackend& backend, const Case& c, uint32_t seed) {
  std::mt19937 rng(seed);
  const auto reqs = batch_reqs(c.batch);
  const kv::KvCacheSpec spec = c.spec();
  const RandomCache cache = random_cache(spec, c.layout, pool_blocks(reqs, c.block), rng);
  const CommonAttentionMetadata md =
      random_metadata(reqs, c.block, cache.view().num_blocks, c.causal, rng);
  const std::vector<float> sinks =
      c.sinks ? random_floats(static_cast<size_t>(c.q_heads), rng, 2.0f) : std::vector<float>{};
  return max_error_vs_reference(backend, spec, md, params_of(c), cache, sinks, rng);
}

std::vector<Case> paged_cases() {
  std::vector<Case> cases;
  // Head sizes (f16, mixed batch, GQA 4:1).
  for (int d : {32, 64, 72, 80, 96, 256, 512}) cases.push_back({.head = d});  // 128: below
  // Dtypes x batch kinds.
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16})
    for (Batch b : {Batch::kDecode, Batch::kPrefill, Batch::kMixed})
      cases.push_back({.batch = b, .dtype = dt});
  // GQA ratios: MQA, MHA, odd groups.
  cases.push_back({.head = 64, .q_heads = 8, .kv_heads = 1});
  cases.push_back({.head = 64, .q_heads = 8, .kv_heads = 8});
  cases.push_back({.head = 64, .q_heads = 6, .kv_heads = 3});
  cases.push_back({.batch = Batch::kDecode, .head = 64, .q_heads = 8, .kv_heads = 1});
  // Block sizes.
  for (int bs : {1, 7, 32}) cases.push_back({.head = 64, .block = bs});  // 16: above
  // Block-major layout (the kernel reads through the view's strides).
  cases.push_back({.layout = kv::KvLayout::kBlockMajor});
  cases.push_back({.batch = Batch::kDecode,
                   .head = 80,
                   .block = 7,
                   .dtype = DType::kBF16,
                   .layout = kv::KvLayout::kBlockMajor});
  cases.push_back({.head = 96,
                   .head_v = 40,
                   .block = 32,
                   .dtype = DType::kF32,
                   .layout = kv::KvLayout::kBlockMajor});
  // head_size_v != head_size, and sizes that are no multiple of the vector width.
  cases.push_back({.head = 128, .head_v = 64});
  cases.push_back({.head = 64, .head_v = 128});
  cases.push_back({.head = 192, .head_v = 128, .dtype = DType::kBF16});
  cases.push_back({.head = 20, .head_v = 36, .block = 7});
  cases.push_back(
      {.head = 3, .head_v = 5, .q_heads = 4, .kv_heads = 4, .block = 1, .dtype = DType::kF32});
  // Non-causal (DFlash drafters).
  cases.push_back({.causal = false});
  cases.push_back({.batch = Batch::kPrefill, .head = 64, .block = 7, .causal = false});
  cases.push_back(
      {.head = 64, .layout = kv::KvLayout::kBlockMajor, .causal = false, .sinks = true});
  // Sliding window.
  cases.push_back({.window = 32});
  cases.push_back({.batch = Batch::kDecode, .head = 64, .block = 7, .window = 50});
  cases.push_back(
      {.batch = Batch::kPrefill, .head = 64, .block = 1, .dtype = DType::kF32, .window = 5});
  // Chunked local (the builder makes virtual batches; the reference clips by chunk).
  cases.push_back({.chunk = 32});
  cases.push_back({.batch = Batch::kDecode, .head = 64, .block = 32, .chunk = 64});
  cases.push_back(
      {.batch = Batch::kPrefill, .head = 64, .block = 7, .dtype = DType::kBF16, .chunk = 21});
  // Softcap, sinks, and everything together.
  cases.push_back({.softcap = 2.0f});
  cases.push_back({.sharpness = 8.0f});
  cases.push_back(
      {.batch = Batch::kDecode, .dtype = DType::kF32, .softcap = 30.0f, .sharpness = 16.0f});
  cases.push_back({.sinks = true});
  cases.push_back({.batch = Batch::kDecode, .sinks = true});
  cases.push_back({.head = 256,
                   .q_heads = 8,
                   .kv_heads = 1,
                   .block = 32,
                   .dtype = DType::kBF16,
                   .window = 40,
                   .softcap = 1.5f,
                   .sinks = true});
  cases.push_back({.head = 64,
                   .block = 7,
                   .layout = kv::KvLayout::kBlockMajor,
                   .chunk = 14,
                   .softcap = 3.0f,
                   .sinks = true});
  return cases;
}

// The paged backend of the device under test: OCL_PAGED on OpenCL, CPU_PAGED on the native CPU
// device (SPECDEC_DEVICE=native: the same matrix, batch invariance and checks).
std::unique_ptr<AttentionBackend> paged_backend() {
  return native() ? make_cpu_paged_backend() : make_ocl_paged_backend();
}

class PagedAttention : public ::testing::TestWithParam<Case> {};

TEST_P(PagedAttention, MatchesReference) {
  const Case c = GetParam();
  const auto backend = paged_backend();
  auto req =
      AttentionRequirements::from_spec(c.spec(), c.q_heads, !c.causal, c.softcap > 0, c.sinks);
  EXPECT_TRUE(backend->validate(req).empty()) << backend->validate(req)[0];
  const float err = run_case(*backend, c, 1234);
  EXPECT_LE(err, kTolerance) << c.name();
  RecordProperty("max_error", str_cat(err));
}

INSTANTIATE_TEST_SUITE_P(Matrix, PagedAttention, ::testing::ValuesIn(paged_cases()),
                         [](const auto& info) { return info.param.name(); });

// The REFERENCE backend through the same interface (exact up to the f64 -> f32 rounding).
class ReferenceBackend : public ::testing::TestWithParam<Case> {};

TEST_P(ReferenceBackend, MatchesReference) {
  const Case c = GetParam();
  const auto backend = make_reference_backend();
  auto req =
      AttentionRequirements::from_spec(c.spec(), c.q_heads, !c.causal, c.softcap > 0, c.sinks);
  EXPECT_TRUE(backend->validate(req).empty());
  EXPECT_EQ(run_case(*backend, c, 99), 0.0f) << c.name();
}

INSTANTIATE_TEST_SUITE_P(Small, ReferenceBackend,
                         ::testing::Values(Case{.head = 64},
                                           Case{.batch = Batch::kDecode,
                                                .head = 32,
                                                .head_v = 48,
                                                .block = 7,
                                                .dtype = DType::kBF16,
                                                .layout = kv::KvLayout::kBlockMajor},
                                           Case{.batch = Batch::kPrefill,
                                                .head = 32,
                                                .dtype = DType::kF32,
                                                .causal = false,
                                                .sinks = true},
                                           Case{.head = 32, .chunk = 32, .softcap = 2.0f},
                                           Case{.head = 32, .block = 1, .window = 9}),
                         [](const auto& info) { return info.param.name(); });

TEST(ReferenceBackendCaps, ServesMlaAndAttention) {
  const auto backend = make_reference_backend();
  EXPECT_FALSE(backend->capabilities().on_device);
  EXPECT_TRUE(backend
                  ->validate(AttentionRequirements::from_spec(
                      kv::KvCacheSpec::mla(16, 512, 64, DType::kF16), 16))
                  .empty());
  EXPECT_TRUE(
      backend
          ->validate(AttentionRequirements::from_spec(
              kv::KvCacheSpec::full_attention(16, 8, 1024, DType::kBF16, 512), 8, true, true, true))
          .empty());
}

TEST(PagedAttentionCaps, RejectsWhatItCannotServe) {
  const auto backend = make_ocl_paged_backend();
  EXPECT_EQ(backend->name(), "OCL_PAGED");
  EXPECT_FALSE(backend
                   ->validate(AttentionRequirements::from_spec(
                       kv::KvCacheSpec::mla(16, 512, 64, DType::kF16), 16))
                   .empty());
  EXPECT_FALSE(backend
                   ->validate(AttentionRequirements::from_spec(
                       kv::KvCacheSpec::full_attention(16, 2, 576, DType::kF16), 8))
                   .empty());
  EXPECT_FALSE(backend
                   ->validate(AttentionRequirements::from_spec(
                       kv::KvCacheSpec::full_attention(16, 2, 128, DType::kI8), 8))
                   .empty());
}

TEST(PagedAttentionCaps, CpuPagedServesWhatTheReferenceServesOnTheNativeDeviceOnly) {
  const auto backend = make_cpu_paged_backend();
  EXPECT_EQ(backend->name(), "CPU_PAGED");
  EXPECT_TRUE(backend->runs_on(device::Kind::kCpu));
  EXPECT_FALSE(backend->runs_on(device::Kind::kOpenCL));
  EXPECT_TRUE(backend
                  ->validate(AttentionRequirements::from_spec(
                      kv::KvCacheSpec::mla(16, 512, 64, DType::kF16), 16))
                  .empty());
  EXPECT_TRUE(
      backend
          ->validate(AttentionRequirements::from_spec(
              kv::KvCacheSpec::full_attention(16, 2, 576, DType::kBF16, 512), 8, true, true, true))
          .empty());
  EXPECT_FALSE(backend
                   ->validate(AttentionRequirements::from_spec(
                       kv::KvCacheSpec::full_attention(16, 2, 128, DType::kI8), 8))
                   .empty());
  EXPECT_FALSE(backend
                   ->validate(AttentionRequirements::from_spec(
                       kv::KvCacheSpec::full_attention(16, 2, 2048, DType::kF16), 8))
                   .empty());
}

TEST(PagedAttentionCaps, ForwardRejectsMismatchedParams) {
  std::mt19937 rng(5);
  const auto spec = kv::KvCacheSpec::full_attention(16, 2, 64, DType::kF16);
  const RandomCache cache = random_cache(spec, kv::KvLayout::kKvMajor, 8, rng);
  const auto md =
      upload_metadata(dev(), random_metadata({{3, 2}}, 16, cache.view().num_blocks, true, rng));
  device::Buffer q = dev().allocate(2 * 8 * 64 * 4), out = dev().allocate(2 * 8 * 64 * 4);
  AttentionLayerParams p;
  p.num_q_heads = 8;
  p.num_kv_heads = 4;  // the cache has 2
  p.head_size = p.head_size_v = 64;
  EXPECT_THROW(paged_backend()->forward(dev(), md, p, cache.view(), cache.buffer(), q, out),
               ConfigError);
}

// Output rows of request `target` computed alone and inside a batch are bitwise equal.
void expect_batch_invariant(const Case& c) {
  const auto backend = paged_backend();
  std::mt19937 rng(77);
  const std::vector<Req> batch = {{40, 24}, {120, 1}, {250, 1}, {77, 5}, {0, 9}};
  const kv::KvCacheSpec spec = c.spec();
  const RandomCache cache = random_cache(spec, c.layout, pool_blocks(batch, c.block), rng);
  const CommonAttentionMetadata full =
      random_metadata(batch, c.block, cache.view().num_blocks, c.causal, rng);
  const AttentionLayerParams p = params_of(c);
  const int row_q = c.q_heads * c.head, row_o = c.q_heads * c.hv();
  const auto query = random_floats(static_cast<size_t>(full.num_actual_tokens) * row_q, rng);

  auto run = [&](const CommonAttentionMetadata& common, const float* q, int tokens) {
    device::Buffer q_buf = dev().allocate(static_cast<size_t>(tokens) * row_q * 4),
                   o_buf = dev().allocate(static_cast<size_t>(tokens) * row_o * 4);
    dev().write(q_buf, q, static_cast<size_t>(tokens) * row_q * 4);
    const AttentionMetadata md = backend->make_builder(spec)->build(dev(), common);
    backend->forward(dev(), md, p, cache.view(), cache.buffer(), q_buf, o_buf);
    std::vector<float> out(static_cast<size_t>(tokens) * row_o);
    dev().read(o_buf, out.data(), out.size() * 4);
    return out;
  };
  // Tokens [i0, i0 + n) of request r as a batch of their own (causal: the keys after them are
  // not visible anyway, so the request ends at its last token).
  auto alone = [&](int r, int i0, int n) {
    CommonAttentionMetadata one;
    one.num_reqs = 1;
    one.block_size = full.block_size;
    one.causal = full.causal;
    one.max_blocks_per_req = full.max_blocks_per_req;
    one.block_table.assign(
        full.block_table.begin() + static_cast<size_t>(r) * full.max_blocks_per_req,
        full.block_table.begin() + static_cast<size_t>(r + 1) * full.max_blocks_per_req);
    const int first = full.query_start_loc[r] + i0;
    one.query_start_loc = {0, n};
    one.seq_lens = {full.causal ? full.num_computed_tokens[r] + i0 + n : full.seq_lens[r]};
    one.num_computed_tokens = {one.seq_lens[0] - n};
    one.slot_mapping.assign(full.slot_mapping.begin() + first,
                            full.slot_mapping.begin() + first + n);
    one.num_actual_tokens = n;
    one.max_query_len = n;
    one.max_seq_len = one.seq_lens[0];
    return run(one, query.data() + static_cast<size_t>(first) * row_q, n);
  };
  const std::vector<float> batched = run(full, query.data(), full.num_actual_tokens);
  auto expect_rows = [&](const std::vector<float>& got, int first, const char* what, int r) {
    EXPECT_EQ(std::memcmp(got.data(), batched.data() + static_cast<size_t>(first) * row_o,
                          got.size() * 4),
              0)
        << c.name() << ": request " << r << " " << what << " differs from the batch";
  };
  for (int r = 0; r < full.num_reqs; ++r) {
    const int n = full.query_len(r);
    expect_rows(alone(r, 0, n), full.query_start_loc[r], "alone", r);
    if (!full.causal || n == 1 || n > 8) continue;
    // A verify step's tokens one at a time (as decodes) give the same rows too.
    for (int i = 0; i < n; ++i)
      expect_rows(alone(r, i, 1), full.query_start_loc[r] + i, "token by token", r);
  }
}

TEST(PagedAttentionBatchInvariance, RowsAreBitwiseEqualAloneAndInABatch) {
  expect_batch_invariant({});
  expect_batch_invariant({.head = 64,
                          .block = 7,
                          .dtype = DType::kBF16,
                          .window = 30,
                          .softcap = 2.0f,
                          .sinks = true});
  expect_batch_invariant({.head = 96,
                          .head_v = 40,
                          .dtype = DType::kF32,
                          .layout = kv::KvLayout::kBlockMajor,
                          .causal = false});
}

}  // namespace
