// Attention metadata: vLLM's local virtual batches on its worked examples, and per-group block
// tables and slot mappings of a hybrid model built from the block managers.
#include <gtest/gtest.h>

#include <numeric>

#include "attention/metadata.h"
#include "common/errors.h"
#include "kv/blocks.h"
#include "kv/examples.h"
#include "kv/planner.h"

using namespace specdec;
using namespace specdec::attn;

namespace {

// Common metadata with query lengths q, seq lengths s, and an arange block table of `cols`
// columns per request (request r has blocks cols*r .. cols*r + cols - 1).
CommonAttentionMetadata arange_metadata(const std::vector<int>& q, const std::vector<int>& s, int block_size, int cols) {
  CommonAttentionMetadata md;
  md.num_reqs = static_cast<int>(q.size());
  md.block_size = block_size;
  md.max_blocks_per_req = cols;
  md.query_start_loc = {0};
  for (size_t r = 0; r < q.size(); ++r) {
    md.query_start_loc.push_back(md.query_start_loc.back() + q[r]);
    md.seq_lens.push_back(s[r]);
    md.num_computed_tokens.push_back(s[r] - q[r]);
    md.max_query_len = std::max(md.max_query_len, q[r]);
    md.max_seq_len = std::max(md.max_seq_len, s[r]);
    for (int c = 0; c < cols; ++c) md.block_table.push_back(static_cast<int32_t>(cols * r + c));
  }
  md.num_actual_tokens = md.query_start_loc.back();
  md.slot_mapping.assign(static_cast<size_t>(md.num_actual_tokens), -1);
  return md;
}

std::vector<int> query_lens(const CommonAttentionMetadata& md) {
  std::vector<int> out;
  for (int r = 0; r < md.num_reqs; ++r) out.push_back(md.query_len(r));
  return out;
}

std::vector<std::vector<int>> table_rows(const CommonAttentionMetadata& md) {
  std::vector<std::vector<int>> out;
  for (int r = 0; r < md.num_reqs; ++r) {
    out.emplace_back(md.block_table.begin() + r * md.max_blocks_per_req,
                     md.block_table.begin() + (r + 1) * md.max_blocks_per_req);
  }
  return out;
}

}  // namespace

TEST(LocalVirtualBatches, VllmWorkedExample) {
  // C = 4, q = [4, 10, 5], s = [6, 17, 9], block_size 2, 9 columns per request
  const auto common = arange_metadata({4, 10, 5}, {6, 17, 9}, 2, 9);
  const auto v = make_local_attention_virtual_batches(4, common);
  EXPECT_EQ(v.num_reqs, 8);
  EXPECT_EQ(query_lens(v), (std::vector<int>{2, 2, 1, 4, 4, 1, 4, 1}));
  EXPECT_EQ(v.query_start_loc, (std::vector<int32_t>{0, 2, 4, 5, 9, 13, 14, 18, 19}));
  EXPECT_EQ(v.seq_lens, (std::vector<int32_t>{4, 2, 4, 4, 4, 1, 4, 1}));
  EXPECT_EQ(table_rows(v), (std::vector<std::vector<int>>{
                               {0, 1}, {2, 3}, {11, 12}, {13, 14}, {15, 16}, {17, 17}, {20, 21}, {22, 23}}));
  EXPECT_EQ(v.max_query_len, 4);
  EXPECT_EQ(v.max_seq_len, 4);
  EXPECT_EQ(v.num_actual_tokens, 19);
  EXPECT_TRUE(v.causal);
  EXPECT_NO_THROW(v.validate());
}

TEST(LocalVirtualBatches, VllmTestCases) {
  struct Case {
    std::vector<int> q, s;
    int chunk, bs;
    std::vector<int> q_local, k_local;
    std::vector<std::vector<int>> table;
  };
  const std::vector<Case> cases = {
      {{8}, {12}, 4, 2, {4, 4}, {4, 4}, {{2, 3}, {4, 5}}},
      {{7}, {10}, 4, 2, {1, 4, 2}, {4, 4, 2}, {{0, 1}, {2, 3}, {4, 4}}},
      {{4}, {6}, 10, 2, {4}, {6}, {{0, 1, 2, 2, 2}}},
      {{6, 6}, {8, 8}, 4, 4, {2, 4, 2, 4}, {4, 4, 4, 4}, {{0}, {1}, {2}, {3}}},
      {{1}, {5}, 4, 2, {1}, {1}, {{2, 2}}},
  };
  for (const auto& c : cases) {
    int cols = 0;
    for (int s : c.s) cols = std::max(cols, (s + c.bs - 1) / c.bs);
    const auto v = make_local_attention_virtual_batches(c.chunk, arange_metadata(c.q, c.s, c.bs, cols));
    EXPECT_EQ(query_lens(v), c.q_local);
    EXPECT_EQ(std::vector<int>(v.seq_lens.begin(), v.seq_lens.end()), c.k_local);
    EXPECT_EQ(table_rows(v), c.table);
  }
  // 1000 new tokens, chunk 256: 4 virtual requests
  EXPECT_EQ(make_local_attention_virtual_batches(256, arange_metadata({1000}, {1000}, 16, 63)).num_reqs, 4);
  EXPECT_THROW(make_local_attention_virtual_batches(6, arange_metadata({4}, {6}, 4, 2)), ConfigError);
}

TEST(CommonMetadata, PerGroupBlockTablesAndSlotsOfAHybridModel) {
  // Gemma-3-like with window 32 and block 8: group 0 sliding, group 1 global
  std::vector<kv::LayerKvSpec> layers;
  for (int i = 0; i < 6; ++i) {
    layers.push_back({"layers." + std::to_string(i),
                      i == 5 ? kv::KvCacheSpec::full_attention(8, 1, 64, DType::kF16)
                             : kv::KvCacheSpec::sliding(8, 1, 64, DType::kF16, 32), ""});
  }
  const auto config = kv::plan_kv_cache(layers, 0, 512, {2048, 64, ""});
  kv::KvCacheManager m(config);
  // three requests at different lengths: a long one decoding, a prefill, a verify step
  ASSERT_TRUE(m.allocate_slots("a", 0, 100).ok);
  ASSERT_TRUE(m.allocate_slots("b", 0, 5).ok);
  ASSERT_TRUE(m.allocate_slots("c", 0, 40).ok);
  ASSERT_TRUE(m.allocate_slots("a", 100, 1).ok);   // frees blocks of "a" that left the window
  ASSERT_TRUE(m.allocate_slots("b", 5, 20).ok);
  ASSERT_TRUE(m.allocate_slots("c", 40, 5).ok);
  const std::vector<ScheduledRequest> step = {{"a", 100, 1}, {"b", 5, 20}, {"c", 40, 5}};
  for (int g = 0; g < 2; ++g) {
    const auto md = build_common_metadata(m, g, step);
    ASSERT_NO_THROW(md.validate());
    EXPECT_EQ(md.query_start_loc, (std::vector<int32_t>{0, 1, 21, 26}));
    EXPECT_EQ(md.seq_lens, (std::vector<int32_t>{101, 25, 45}));
    EXPECT_EQ(md.num_computed_tokens, (std::vector<int32_t>{100, 5, 40}));
    EXPECT_EQ(md.max_query_len, 20);
    EXPECT_EQ(md.max_seq_len, 101);
    EXPECT_EQ(md.max_blocks_per_req, 13);  // cdiv(101, 8)
    for (int r = 0; r < 3; ++r) {
      const auto& table = m.block_table(step[r].request_id, g);
      for (int i = 0; i < md.query_len(r); ++i) {
        const int pos = md.num_computed_tokens[r] + i;
        EXPECT_EQ(md.slot_mapping[md.query_start_loc[r] + i], table[pos / 8] * 8 + pos % 8);
      }
    }
    const auto row_a = std::vector<int32_t>(md.block_table.begin(), md.block_table.begin() + 13);
    // sliding group: the first query of "a" is at 100, seeing 69..100 -> blocks 0..7 freed (null)
    const int num_null = static_cast<int>(std::count(row_a.begin(), row_a.end(), 0));
    EXPECT_EQ(num_null, g == 0 ? 8 : 0);
  }
  // the two groups draw from their own pools: both tables exist and are consistent
  EXPECT_NE(build_common_metadata(m, 0, step).block_table, build_common_metadata(m, 1, step).block_table);
  // a request whose new tokens were not allocated is refused
  EXPECT_THROW(build_common_metadata(m, 1, {{"b", 25, 100}}), ConfigError);
}

TEST(CommonMetadata, ValidateNamesTheField) {
  auto md = arange_metadata({2, 3}, {5, 3}, 4, 2);
  EXPECT_NO_THROW(md.validate());
  auto bad = md;
  bad.seq_lens[1] = 2;  // shorter than its 3 new tokens
  EXPECT_THROW(bad.validate(), ConfigError);
  bad = md;
  bad.slot_mapping.pop_back();
  EXPECT_THROW(bad.validate(), ConfigError);
  bad = md;
  bad.seq_lens[0] = 9;  // 2 blocks of 4 cover only 8 tokens
  bad.num_computed_tokens[0] = 7;
  bad.max_seq_len = 9;
  try {
    bad.validate();
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.field(), "seq_lens[0]");
  }
}

TEST(LocalVirtualBatches, RequestsWithoutKeysOrQueries) {
  // request 0 has no tokens at all, request 1 no new tokens, request 2 is a decode
  auto md = arange_metadata({0, 0, 1}, {0, 5, 9}, 2, 5);
  const auto v = make_local_attention_virtual_batches(4, md);
  EXPECT_NO_THROW(v.validate());
  EXPECT_EQ(v.seq_lens.front(), 0);
  EXPECT_EQ(v.num_actual_tokens, 1);
  for (int32_t b : v.block_table) {
    EXPECT_GE(b, 0);
    EXPECT_LT(b, 15);
  }
  // the decode at position 8 sees its own chunk [8, 9): one key
  EXPECT_EQ(v.seq_lens.back(), 1);
}
