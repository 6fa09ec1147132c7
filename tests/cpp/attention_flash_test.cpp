// OCL_FLASH against the C++ reference: ragged batches of decodes (several splits), prefill
// chunks, verify steps, head sizes 64/128/256, GQA (also groups of 3 and 6, and 64 q heads on one
// kv head, where a tile is one token) / MQA / MHA, block sizes 16/32/48, sliding window (also with
// the blocks that left it freed), chunked local (through the builder's virtual batches), softcap,
// f32/f16/bf16, requests with no new tokens and empty batches. The metadata comes from the
// builder that knows num_q_heads (the engine's path: the step's launch plan in backend_data).
// Then batch invariance (bit for bit: alone, among verify tokens, in a ragged batch, across
// launches, with the step's plan or one made per call), the host's local-memory estimate against
// the built kernel, and the capability checks.
//
// Sizes are kept small for the sanitizer build (the double-precision reference dominates): the
// prefill chunks are short but still cross a split boundary (256 keys).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attention/backends/backends.h"
#include "attention/reference.h"
#include "attention_test_util.h"
#include "common/errors.h"
#include "kv/blocks.h"
#include "quant/matmul.h"

namespace specdec::attn {
// Defined in cpp/attention/backends/ocl_flash.cpp: the host's local-memory estimate of one
// work-group and what the built kernel reports (CL_KERNEL_LOCAL_MEM_SIZE).
int64_t flash_local_mem_estimate(int tile, int group, int head, int block, int split_keys);
int64_t flash_kernel_local_mem(ocl::Context& ctx, DType dtype, int tile, int group, int head,
                               int block, int split_keys);
}  // namespace specdec::attn

using namespace specdec;
using namespace specdec::attn;
using namespace specdec::attn::testing;

namespace {

const std::vector<Req> kDecode = {{0, 1},   {1, 1},   {15, 1},  {16, 1},   {17, 1},
                                  {255, 1}, {256, 1}, {300, 1}, {1023, 1}, {1999, 1}};
// a fresh prompt of several tiles, one shorter than a tile, a chunk across the first split
// boundary, a chunk in mid-context
const std::vector<Req> kPrefill = {{0, 24}, {0, 9}, {250, 10}, {100, 12}};
// a prefill chunk across a split boundary + decodes (one of 4 splits) + 1+4-token verify steps
// (one within a split, one across a split boundary) + a fresh prompt
const std::vector<Req> kMixed = {{0, 1}, {250, 8}, {800, 1}, {40, 5}, {33, 1}, {254, 5}, {0, 16}};
// for 64 q heads: a decode of 2 splits, a verify step across a split boundary, a short prompt
const std::vector<Req> kSmall = {{0, 1}, {300, 1}, {254, 5}, {0, 9}};
// requests with no new tokens (one without any key) among others
const std::vector<Req> kZeroNew = {{100, 0}, {300, 1}, {0, 0}, {40, 5}, {256, 0}, {0, 3}};

struct Case {
  std::string name;
  DType dtype;
  int head, hq, hkv, bs;
  const std::vector<Req>* batch;
  int window = 0;
  int chunk = 0;
  float softcap = 0.0f;
  float scale_mul = 1.0f;  // scale = scale_mul / sqrt(head)
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// Measured errors are at most 1.9e-6 over this matrix (f32 accumulation against a double
// reference that reads the same stored elements, whatever the cache dtype); 1e-5 leaves 5x room.
constexpr float kTolerance = 1e-5f;

kv::KvCacheSpec spec_of(const Case& c) {
  if (c.window > 0) return kv::KvCacheSpec::sliding(c.bs, c.hkv, c.head, c.dtype, c.window);
  if (c.chunk > 0) return kv::KvCacheSpec::chunked_local(c.bs, c.hkv, c.head, c.dtype, c.chunk);
  return kv::KvCacheSpec::full_attention(c.bs, c.hkv, c.head, c.dtype);
}

AttentionLayerParams params_of(const Case& c) {
  AttentionLayerParams p;
  p.num_q_heads = c.hq;
  p.num_kv_heads = c.hkv;
  p.head_size = p.head_size_v = c.head;
  p.scale = c.scale_mul / std::sqrt(static_cast<float>(c.head));
  p.logit_softcap = c.softcap;
  p.sliding_window = c.window;
  p.attention_chunk_size = c.chunk;
  return p;
}

int64_t blocks_needed(const std::vector<Req>& reqs, int bs) {
  int64_t n = 2;
  for (const Req& r : reqs) n += (r.num_computed + r.num_new + bs - 1) / bs;
  return n;
}

// The backend's output on `common` for `query`, with metadata from make_builder(spec,
// builder_q_heads) (0: a builder that does not know the head count).
std::vector<float> run_flash(const AttentionBackend& backend, const kv::KvCacheSpec& spec,
                             const CommonAttentionMetadata& common, const std::vector<float>& query,
                             const AttentionLayerParams& p, const RandomCache& cache,
                             int builder_q_heads) {
  const size_t n = query.size();
  device::Buffer q = dev().allocate(std::max<size_t>(n, 1) * 4),
                 out = dev().allocate(std::max<size_t>(n, 1) * 4);
  if (n > 0) dev().write(q, query.data(), n * 4);
  const AttentionMetadata md = backend.make_builder(spec, builder_q_heads)->build(dev(), common);
  backend.forward(dev(), md, p, cache.view(), cache.buffer(), q, out);
  std::vector<float> got(n);
  if (n > 0) dev().read(out, got.data(), n * 4);
  return got;
}

// Largest |got - want| / max(1, |want|) against attention_ref, on the engine's path.
float max_error(const AttentionBackend& backend, const kv::KvCacheSpec& spec,
                const CommonAttentionMetadata& common, const AttentionLayerParams& p,
                const RandomCache& cache, std::mt19937& rng) {
  const auto query = random_floats(
      static_cast<size_t>(common.num_actual_tokens) * p.num_q_heads * p.head_size, rng);
  const auto got = run_flash(backend, spec, common, query, p, cache, p.num_q_heads);
  const auto want = attention_ref(common, p, {}, cache.view(), cache.raw, query);
  float err = 0.0f;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    err = std::max(err, std::fabs(got[i] - want[i]) / std::max(1.0f, std::fabs(want[i])));
  }
  return err;
}

class FlashVsReference : public ::testing::TestWithParam<Case> {};

TEST_P(FlashVsReference, MatchesReference) {
  const Case& c = GetParam();
  std::mt19937 rng(1234);
  const auto backend = make_ocl_flash_backend();
  const kv::KvCacheSpec spec = spec_of(c);
  const int64_t num_blocks = blocks_needed(*c.batch, c.bs);
  const RandomCache cache = random_cache(spec, kv::KvLayout::kBlockMajor, num_blocks, rng);
  const CommonAttentionMetadata md = random_metadata(*c.batch, c.bs, num_blocks, true, rng);
  float err = 0.0f;
  try {
    err = max_error(*backend, spec, md, params_of(c), cache, rng);
  } catch (const UnsupportedError& e) {
    // a GPU's 48 KiB of local memory holds no work-group of the widest shapes: OCL_FLASH says so
    // (the selector then picks OCL_PAGED); CPU devices run every shape
    const std::string what = e.what();
    ASSERT_NE(what.find("bytes of local memory"), std::string::npos) << what;
    ASSERT_NE(context()->device().type, "cpu") << what;
    GTEST_SKIP() << what;
  }
  RecordProperty("max_error", std::to_string(err));
  std::printf("[ %s ] max error %.3g\n", c.name.c_str(), err);
  EXPECT_LE(err, kTolerance);
}

// Distinct (dtype, head, group, block size) combinations are few: each is one program build.
INSTANTIATE_TEST_SUITE_P(
    Shapes, FlashVsReference,
    ::testing::Values(
        Case{"decode_f16_d128_gqa4_bs16", DType::kF16, 128, 8, 2, 16, &kDecode},
        Case{"prefill_f16_d128_gqa4_bs16", DType::kF16, 128, 8, 2, 16, &kPrefill},
        Case{"mixed_f16_d128_gqa4_bs16", DType::kF16, 128, 8, 2, 16, &kMixed},
        Case{"mixed_softcap_f16_d128_gqa4_bs16", DType::kF16, 128, 8, 2, 16, &kMixed, 0, 0, 5.0f,
             4.0f},
        Case{"decode_window_f16_d128_gqa4_bs16", DType::kF16, 128, 8, 2, 16, &kDecode, 300},
        Case{"mixed_window_bf16_d128_gqa4_bs16", DType::kBF16, 128, 8, 2, 16, &kMixed, 100},
        Case{"mixed_f32_d64_mha_bs16", DType::kF32, 64, 4, 4, 16, &kMixed, 0, 0, 0.0f, 2.0f},
        Case{"decode_f32_d64_mha_bs16", DType::kF32, 64, 4, 4, 16, &kDecode},
        Case{"decode_f16_d64_mqa8_bs32", DType::kF16, 64, 8, 1, 32, &kDecode},
        Case{"mixed_bf16_d256_mqa8_bs32", DType::kBF16, 256, 8, 1, 32, &kMixed},
        Case{"prefill_bf16_d256_mqa8_bs32", DType::kBF16, 256, 8, 1, 32, &kPrefill},
        Case{"mixed_chunked_f32_d128_gqa2_bs32", DType::kF32, 128, 4, 2, 32, &kMixed, 0, 256},
        Case{"prefill_chunked_f32_d128_gqa2_bs32", DType::kF32, 128, 4, 2, 32, &kPrefill, 0, 64},
        Case{"mixed_window_softcap_f16_d256_mha_bs16", DType::kF16, 256, 2, 2, 16, &kMixed, 500, 0,
             30.0f, 3.0f},
        Case{"mixed_f16_d128_gqa4_bs48", DType::kF16, 128, 8, 2, 48, &kMixed},
        // groups that are not powers of two (tiles of 8 and 5 tokens)
        Case{"mixed_f16_d128_gqa3_bs16", DType::kF16, 128, 6, 2, 16, &kMixed},
        Case{"mixed_window_bf16_d64_gqa6_bs32", DType::kBF16, 64, 12, 2, 32, &kMixed, 100},
        // a group of more than 32 q heads: one token a tile
        Case{"small_f16_d64_gqa64_bs16", DType::kF16, 64, 64, 1, 16, &kSmall},
        Case{"zero_new_f16_d128_gqa4_bs16", DType::kF16, 128, 8, 2, 16, &kZeroNew},
        Case{"zero_new_window_f16_d128_gqa4_bs16", DType::kF16, 128, 8, 2, 16, &kZeroNew, 100},
        Case{"zero_new_chunked_f32_d128_gqa2_bs32", DType::kF32, 128, 4, 2, 32, &kZeroNew, 0, 64}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// A batch without tokens (no requests, or only requests without new tokens) writes nothing.
TEST(FlashEdgeCases, EmptyBatchWritesNothing) {
  std::mt19937 rng(3);
  const auto backend = make_ocl_flash_backend();
  const Case c{"empty", DType::kF16, 128, 8, 2, 16, &kDecode};
  const kv::KvCacheSpec spec = spec_of(c);
  const RandomCache cache = random_cache(spec, kv::KvLayout::kBlockMajor, 8, rng);
  const std::vector<float> sentinel(64, 7.0f);
  for (const std::vector<Req>& reqs : {std::vector<Req>{}, std::vector<Req>{{0, 0}, {20, 0}}}) {
    const CommonAttentionMetadata common = random_metadata(reqs, c.bs, 8, true, rng);
    ASSERT_EQ(common.num_actual_tokens, 0);
    for (int builder_q_heads : {c.hq, 0}) {
      const AttentionMetadata md = backend->make_builder(spec, builder_q_heads)->build(dev(), common);
      EXPECT_TRUE(md.backend_data == nullptr);  // nothing to plan
      device::Buffer q = dev().allocate(64 * 4), out = dev().allocate(64 * 4);
      dev().write(out, sentinel.data(), 64 * 4);
      EXPECT_NO_THROW(
          backend->forward(dev(), md, params_of(c), cache.view(), cache.buffer(), q, out));
      std::vector<float> got(64);
      dev().read(out, got.data(), 64 * 4);
      EXPECT_EQ(got, sentinel) << reqs.size() << " requests, builder q heads " << builder_q_heads;
    }
  }
}

// Blocks that left every token's window are freed in a real run: their table entries point to
// the null block. Filled with NaN here, they must never be read.
TEST(FlashWindow, FreedBlocksAreNeverRead) {
  std::mt19937 rng(7);
  const auto backend = make_ocl_flash_backend();
  const Case c{"freed", DType::kF16, 128, 8, 2, 16, &kMixed, 300};
  const kv::KvCacheSpec spec = spec_of(c);
  const std::vector<Req> reqs = {{1999, 1}, {1500, 5}, {700, 16}, {100, 1}};
  const int64_t num_blocks = blocks_needed(reqs, c.bs);
  RandomCache cache = random_cache(spec, kv::KvLayout::kBlockMajor, num_blocks, rng);
  const int64_t page_elems = spec.page_size_bytes() / 2;
  for (int64_t i = 0; i < page_elems; ++i)
    kv::store_element(cache.raw, spec.dtype, i, NAN);  // null block
  dev().write(cache.alloc->tensor(0), cache.raw.data(), cache.raw.size());
  CommonAttentionMetadata md = random_metadata(reqs, c.bs, num_blocks, true, rng);
  int freed = 0;
  for (int r = 0; r < md.num_reqs; ++r) {
    const int lowest =
        std::max(0, md.num_computed_tokens[r] - c.window + 1);  // first token's first key
    for (int b = 0; (b + 1) * c.bs <= lowest; ++b, ++freed)
      md.block_table[r * md.max_blocks_per_req + b] = kv::kNullBlockId;
  }
  ASSERT_GT(freed, 100);
  const float err = max_error(*backend, spec, md, params_of(c), cache, rng);
  EXPECT_LE(err, kTolerance);
}

// --- batch invariance -------------------------------------------------------------------------

struct FlashRun {
  CommonAttentionMetadata md;
  std::vector<float> query;  // [num_tokens, hq, head]
};

std::vector<float> run_flash(const AttentionBackend& backend, const kv::KvCacheSpec& spec,
                             const FlashRun& run, const AttentionLayerParams& p,
                             const RandomCache& cache) {
  return run_flash(backend, spec, run.md, run.query, p, cache, p.num_q_heads);
}

// Request r of `batch` alone, with its tokens [first, first + count) as the query; keys past the
// last of them are not part of the request (as in a decode that came before a verify step).
FlashRun extract(const FlashRun& batch, int r, int first, int count, int row) {
  const CommonAttentionMetadata& b = batch.md;
  FlashRun one;
  CommonAttentionMetadata& md = one.md;
  md.num_reqs = 1;
  md.block_size = b.block_size;
  md.max_blocks_per_req = b.max_blocks_per_req;
  md.block_table.assign(b.block_table.begin() + static_cast<int64_t>(r) * b.max_blocks_per_req,
                        b.block_table.begin() + static_cast<int64_t>(r + 1) * b.max_blocks_per_req);
  const int qs = b.query_start_loc[r];
  md.query_start_loc = {0, count};
  md.seq_lens = {b.num_computed_tokens[r] + first + count};
  md.num_computed_tokens = {b.num_computed_tokens[r] + first};
  md.slot_mapping.assign(b.slot_mapping.begin() + qs + first,
                         b.slot_mapping.begin() + qs + first + count);
  md.num_actual_tokens = md.max_query_len = count;
  md.max_seq_len = md.seq_lens[0];
  one.query.assign(batch.query.begin() + static_cast<int64_t>(qs + first) * row,
                   batch.query.begin() + static_cast<int64_t>(qs + first + count) * row);
  return one;
}

void expect_bitwise(const std::vector<float>& whole, int whole_token,
                    const std::vector<float>& part, int part_token, int row,
                    const std::string& what) {
  EXPECT_EQ(0,
            std::memcmp(whole.data() + static_cast<size_t>(whole_token) * row,
                        part.data() + static_cast<size_t>(part_token) * row, row * sizeof(float)))
      << what;
}

TEST(FlashBatchInvariance, AloneVerifyAndBatchAreBitwiseEqual) {
  std::mt19937 rng(99);
  const auto backend = make_ocl_flash_backend();
  const Case c{"inv", DType::kF16, 128, 8, 2, 16, &kMixed};
  const kv::KvCacheSpec spec = spec_of(c);
  const AttentionLayerParams p = params_of(c);
  const int row = c.hq * c.head;
  // decode at 1500 (6 splits), a verify step at 510..514 (across a split boundary), a prefill
  // chunk, short decodes
  const std::vector<Req> reqs = {{40, 1}, {1500, 1}, {700, 60}, {510, 5}, {3, 1}};
  const int64_t num_blocks = blocks_needed(reqs, c.bs);
  const RandomCache cache = random_cache(spec, kv::KvLayout::kBlockMajor, num_blocks, rng);
  FlashRun batch{random_metadata(reqs, c.bs, num_blocks, true, rng), {}};
  batch.query = random_floats(static_cast<size_t>(batch.md.num_actual_tokens) * row, rng);
  const auto whole = run_flash(*backend, spec, batch, p, cache);

  for (int r : {0, 1, 4}) {  // decodes alone
    const auto one = run_flash(*backend, spec, extract(batch, r, 0, 1, row), p, cache);
    expect_bitwise(whole, batch.md.query_start_loc[r], one, 0, row,
                   "decode of request " + std::to_string(r));
  }
  const int v0 = batch.md.query_start_loc[3];
  const auto verify = run_flash(*backend, spec, extract(batch, 3, 0, 5, row), p, cache);
  for (int t = 0; t < 5; ++t) {  // the verify step alone, and each of its tokens as a decode
    expect_bitwise(whole, v0 + t, verify, t, row, "verify token " + std::to_string(t) + " alone");
    const auto one = run_flash(*backend, spec, extract(batch, 3, t, 1, row), p, cache);
    expect_bitwise(whole, v0 + t, one, 0, row,
                   "verify token " + std::to_string(t) + " as a decode");
  }
  const int c0 = batch.md.query_start_loc[2];
  const auto chunk = run_flash(*backend, spec, extract(batch, 2, 0, 60, row), p, cache);
  for (int t = 0; t < 60; ++t)
    expect_bitwise(whole, c0 + t, chunk, t, row, "prefill token " + std::to_string(t));

  // a scratch buffer small enough to cut the batch into several launches changes nothing
  ::setenv("SPECDEC_FLASH_SCRATCH_BYTES", "40000", 1);
  const auto cut = run_flash(*backend, spec, batch, p, cache);
  ::unsetenv("SPECDEC_FLASH_SCRATCH_BYTES");
  EXPECT_EQ(0, std::memcmp(whole.data(), cut.data(), whole.size() * sizeof(float)))
      << "several launches";
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The step's plan (backend_data from the builder that knows num_q_heads) serves every layer; a
// builder that does not know the head count, metadata built for another head count, or a scratch
// size changed since the step's plan was made get a plan for the call: the same bits.
TEST(FlashPlan, StepPlanAndPerCallPlansAgree) {
  std::mt19937 rng(11);
  const auto backend = make_ocl_flash_backend();
  const Case c{"plan", DType::kF16, 128, 8, 2, 16, &kMixed};
  const kv::KvCacheSpec spec = spec_of(c);
  const AttentionLayerParams p = params_of(c);
  const int64_t num_blocks = blocks_needed(kMixed, c.bs);
  const RandomCache cache = random_cache(spec, kv::KvLayout::kBlockMajor, num_blocks, rng);
  const CommonAttentionMetadata common = random_metadata(kMixed, c.bs, num_blocks, true, rng);
  const size_t n = static_cast<size_t>(common.num_actual_tokens) * c.hq * c.head;
  const std::vector<float> query = random_floats(n, rng);
  device::Buffer q = dev().allocate(n * 4);
  dev().write(q, query.data(), n * 4);
  auto forward = [&](const AttentionMetadata& md) {
    device::Buffer out = dev().allocate(n * 4);
    backend->forward(dev(), md, p, cache.view(), cache.buffer(), q, out);
    std::vector<float> got(n);
    dev().read(out, got.data(), n * 4);
    return got;
  };
  const AttentionMetadata step = backend->make_builder(spec, c.hq)->build(dev(), common);
  ASSERT_TRUE(step.backend_data != nullptr);
  const auto first = forward(step);
  EXPECT_TRUE(same_bits(first, forward(step))) << "second layer on the step's plan";
  for (int heads : {0, 6}) {  // 6: the program of the gqa3 case above, no extra build
    const AttentionMetadata other = backend->make_builder(spec, heads)->build(dev(), common);
    EXPECT_EQ(other.backend_data != nullptr, heads != 0);
    EXPECT_TRUE(same_bits(first, forward(other))) << "metadata built for " << heads << " q heads";
  }
  ::setenv("SPECDEC_FLASH_SCRATCH_BYTES", "40000", 1);
  const auto cut = forward(step);  // the step's plan no longer fits: several launches per call
  ::unsetenv("SPECDEC_FLASH_SCRATCH_BYTES");
  EXPECT_TRUE(same_bits(first, cut)) << "scratch changed after the step's plan";
}

// --- the output quantised as well (quantized_output) ---------------------------------------------

// With quantized_output the kernels write the same output bits, and the int8 activations,
// records and 16-bit copies are bitwise what quant::quantize_activations makes of that output: on
// direct writes (one split) and merges (several), decodes, verify steps and prefill chunks, heads
// 64 / 128 / 256, f16 and f32 caches, the scratch small enough for several launches; one scale per
// 32 values, and per 256 where the head holds whole groups (head 256; others refused).
TEST(FlashQuantizedOutput, SameOutputAndTheActivationsQuantizeWouldWrite) {
  std::mt19937 rng(123);
  const auto backend = make_ocl_flash_backend();
  ASSERT_TRUE(backend->capabilities().quantized_output);
  const std::vector<Req> reqs = {{0, 1}, {250, 8}, {800, 1}, {40, 5}, {1500, 1}, {254, 5}, {0, 16}};
  for (const Case& c : {Case{"q64", DType::kF16, 64, 8, 2, 16, &reqs},
                        Case{"q128", DType::kF32, 128, 4, 4, 32, &reqs},
                        Case{"q256", DType::kF16, 256, 4, 1, 16, &reqs}}) {
   for (int sb : {32, 256}) {
    for (const char* scratch : {"", "40000"}) {
      if (*scratch != '\0') ::setenv("SPECDEC_FLASH_SCRATCH_BYTES", scratch, 1);
      const kv::KvCacheSpec spec = spec_of(c);
      AttentionLayerParams p = params_of(c);
      const int64_t num_blocks = blocks_needed(reqs, c.bs);
      const RandomCache cache = random_cache(spec, kv::KvLayout::kBlockMajor, num_blocks, rng);
      const CommonAttentionMetadata common = random_metadata(reqs, c.bs, num_blocks, true, rng);
      const int64_t t = common.num_actual_tokens, width = int64_t{c.hq} * c.head;
      const size_t n = static_cast<size_t>(t * width);
      const std::vector<float> query = random_floats(n, rng);
      device::Buffer q = dev().allocate(n * 4), plain = dev().allocate(n * 4), fused = dev().allocate(n * 4);
      dev().write(q, query.data(), n * 4);
      const AttentionMetadata md = backend->make_builder(spec, c.hq)->build(dev(), common);
      backend->forward(dev(), md, p, cache.view(), cache.buffer(), q, plain);
      quant::QuantizedActivations mine;
      ASSERT_TRUE(quant::prepare_activations(dev(), t, width, mine, sb));
      const ops::QuantizedOut qo{&mine.q8, &mine.q16, &mine.rec, sb};
      p.quantized_output = &qo;
      if (c.head % sb != 0) {  // a scale group would straddle two heads
        EXPECT_THROW(backend->forward(dev(), md, p, cache.view(), cache.buffer(), q, fused), ConfigError);
        continue;
      }
      backend->forward(dev(), md, p, cache.view(), cache.buffer(), q, fused);
      quant::QuantizedActivations want;
      quant::quantize_activations(dev(), plain, t, width, want, sb);
      auto bytes = [&](const device::Buffer& b, size_t size) {
        std::vector<uint8_t> v(size);
        dev().read(b, v.data(), size);
        return v;
      };
      const std::string what = c.name + " scale block " + std::to_string(sb) +
                               (*scratch != '\0' ? " (several launches)" : "");
      EXPECT_EQ(bytes(plain, n * 4), bytes(fused, n * 4)) << what << ": output";
      EXPECT_EQ(bytes(want.q8, n), bytes(mine.q8, n)) << what << ": int8";
      EXPECT_EQ(bytes(want.q16, n * 2), bytes(mine.q16, n * 2)) << what << ": int16";
      EXPECT_EQ(bytes(want.rec, n / 32 * 16), bytes(mine.rec, n / 32 * 16)) << what << ": records";
      quant::QuantizedActivations small;  // buffers for fewer tokens: refused, naming the field
      ASSERT_TRUE(quant::prepare_activations(dev(), 1, width, small, sb));
      const ops::QuantizedOut too_small{&small.q8, &small.q16, &small.rec, sb};
      p.quantized_output = &too_small;
      EXPECT_THROW(backend->forward(dev(), md, p, cache.view(), cache.buffer(), q, fused), ConfigError);
      ::unsetenv("SPECDEC_FLASH_SCRATCH_BYTES");
    }
   }
  }
  ::unsetenv("SPECDEC_FLASH_SCRATCH_BYTES");
}

// --- local memory -------------------------------------------------------------------------------

// The host sizes tiles by its estimate before it builds the kernel: it must not undercount what
// the kernel declares. Tiles as the backend picks them for the shapes above (same programs).
TEST(FlashLocalMemory, HostEstimateCoversTheKernel) {
  struct Shape {
    DType dtype;
    int tile, group, head, block, split_keys;
  };
  auto& ctx = *context();
  for (const Shape& s :
       {Shape{DType::kF32, 8, 1, 64, 16, 256}, Shape{DType::kF16, 8, 4, 128, 16, 256},
        Shape{DType::kBF16, 4, 8, 256, 32, 256}, Shape{DType::kF16, 8, 3, 128, 16, 256},
        Shape{DType::kBF16, 5, 6, 64, 32, 256}, Shape{DType::kF16, 1, 64, 64, 16, 256},
        Shape{DType::kF16, 8, 4, 128, 48, 288}}) {
    const int64_t estimate =
        flash_local_mem_estimate(s.tile, s.group, s.head, s.block, s.split_keys);
    const int64_t actual =
        flash_kernel_local_mem(ctx, s.dtype, s.tile, s.group, s.head, s.block, s.split_keys);
    const std::string what =
        str_cat("tile ", s.tile, ", group ", s.group, ", head ", s.head, ", block ", s.block,
                ": estimate ", estimate, ", kernel ", actual);
    std::printf("[ local memory ] %s\n", what.c_str());
    EXPECT_GE(estimate, actual) << what;
    EXPECT_GT(actual, 0) << what;
  }
}

// --- capabilities -------------------------------------------------------------------------------

AttentionRequirements good_requirements() {
  return AttentionRequirements::from_spec(kv::KvCacheSpec::full_attention(16, 2, 128, DType::kF16),
                                          8);
}

bool has_reason(const std::vector<std::string>& reasons, const std::string& text) {
  for (const auto& r : reasons) {
    if (r.find(text) != std::string::npos) return true;
  }
  return false;
}

TEST(FlashCapabilities, DeclaresWhatItImplements) {
  const auto backend = make_ocl_flash_backend();
  const BackendCapabilities& c = backend->capabilities();
  EXPECT_EQ(c.name, "OCL_FLASH");
  EXPECT_EQ(c.kv_layout, kv::KvLayout::kBlockMajor);
  EXPECT_FALSE(c.non_causal);
  EXPECT_FALSE(c.sinks);
  EXPECT_FALSE(c.is_mla);
  EXPECT_TRUE(c.sliding_window && c.chunked_local && c.logit_softcap && c.on_device);
  EXPECT_TRUE(backend->validate(good_requirements()).empty());
  auto sliding = AttentionRequirements::from_spec(
      kv::KvCacheSpec::sliding(16, 1, 256, DType::kBF16, 512), 8, false, true);
  EXPECT_TRUE(backend->validate(sliding).empty());
  // max_block_size: the smallest work-group (one token, one q head) at head size 256 fits in
  // 32 KiB of local memory, the next block size would not
  EXPECT_EQ(c.max_block_size, 16);
  EXPECT_LE(flash_local_mem_estimate(1, 1, 256, c.max_block_size, 256), 32 * 1024);
  EXPECT_GT(flash_local_mem_estimate(1, 1, 256, c.max_block_size + 16, 256), 32 * 1024);
}

TEST(FlashCapabilities, RejectsWithReasons) {
  const auto backend = make_ocl_flash_backend();
  auto r = good_requirements();
  r.use_non_causal = true;
  EXPECT_TRUE(has_reason(backend->validate(r), "non-causal attention not supported"));
  r = AttentionRequirements::from_spec(kv::KvCacheSpec::full_attention(16, 2, 80, DType::kF16), 8);
  EXPECT_TRUE(has_reason(backend->validate(r), "head_size 80 not supported (one of 64, 128, 256)"));
  r = AttentionRequirements::from_spec(kv::KvCacheSpec::full_attention(8, 2, 128, DType::kF16), 8);
  EXPECT_TRUE(
      has_reason(backend->validate(r), "block_size 8 not supported (must be a multiple of 16)"));
  r = AttentionRequirements::from_spec(kv::KvCacheSpec::full_attention(32, 2, 128, DType::kF16), 8);
  EXPECT_TRUE(has_reason(backend->validate(r), "block_size 32 not supported (at most 16)"));
  r = good_requirements();
  r.use_sinks = true;
  EXPECT_TRUE(has_reason(backend->validate(r), "attention sinks not supported"));
  r = AttentionRequirements::from_spec(kv::KvCacheSpec::mla(16, 512, 64, DType::kF16), 16);
  EXPECT_FALSE(backend->validate(r).empty());
}

TEST(FlashCapabilities, ForwardRefusesWhatItDoesNotImplement) {
  std::mt19937 rng(5);
  const auto backend = make_ocl_flash_backend();
  const Case c{"refuse", DType::kF16, 128, 8, 2, 16, &kMixed};
  const kv::KvCacheSpec spec = spec_of(c);
  const RandomCache cache = random_cache(spec, kv::KvLayout::kBlockMajor, 8, rng);
  device::Buffer q = dev().allocate(8 * 128 * 4), out = dev().allocate(8 * 128 * 4), sinks = dev().allocate(8 * 4);
  CommonAttentionMetadata common = random_metadata({{3, 1}}, 16, 8, false, rng);
  const AttentionMetadata non_causal = backend->make_builder(spec)->build(dev(), common);
  EXPECT_THROW(
      backend->forward(dev(), non_causal, params_of(c), cache.view(), cache.buffer(), q, out),
      UnsupportedError);
  common.causal = true;
  const AttentionMetadata md = backend->make_builder(spec)->build(dev(), common);
  AttentionLayerParams p = params_of(c);
  p.sinks = &sinks;
  EXPECT_THROW(backend->forward(dev(), md, p, cache.view(), cache.buffer(), q, out),
               UnsupportedError);
  p = params_of(c);
  p.head_size = p.head_size_v = 64;
  EXPECT_THROW(backend->forward(dev(), md, p, cache.view(), cache.buffer(), q, out), ConfigError);
}

}  // namespace
