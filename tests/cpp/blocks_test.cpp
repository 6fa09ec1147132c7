// Block pool and per-group block managers: hand-computed tables, atomic out-of-blocks results,
// speculative rollback, bad input, and a randomized run checked against an independent model.
#include "kv/blocks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/errors.h"
#include "common/math.h"

namespace specdec::kv {
namespace {

using Table = std::vector<int32_t>;

KvCacheSpec full(int block_size) {
  return KvCacheSpec::full_attention(block_size, 2, 64, DType::kF16);
}
KvCacheSpec sliding(int block_size, int window) {
  return KvCacheSpec::sliding(block_size, 2, 64, DType::kF16, window);
}
KvCacheSpec chunked(int block_size, int chunk) {
  return KvCacheSpec::chunked_local(block_size, 2, 64, DType::kF16, chunk);
}
KvCacheSpec mla(int block_size) { return KvCacheSpec::mla(block_size, 512, 64, DType::kF16); }

KvCacheConfig make_config(const std::vector<std::pair<KvCacheSpec, int64_t>>& specs_and_blocks,
                          int64_t max_model_len = 1024, int64_t max_num_batched_tokens = 256) {
  KvCacheConfig config;
  for (size_t i = 0; i < specs_and_blocks.size(); ++i) {
    const auto& [spec, num_blocks] = specs_and_blocks[i];
    const std::string layer = "layers." + std::to_string(i) + ".attn";
    config.groups.push_back(KvCacheGroup{spec, {layer}, {spec}, {}, num_blocks, 0, 0});
  }
  config.max_model_len = max_model_len;
  config.max_num_batched_tokens = max_num_batched_tokens;
  return config;
}

template <typename Fn>
std::string config_error_field(Fn&& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.field();
  }
  return "<no ConfigError>";
}

void make_manager(const KvCacheConfig& config) { KvCacheManager kv(config); }

void expect_short(const AllocationResult& r, int group_id, int64_t needed, int64_t free) {
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.group_id, group_id);
  EXPECT_EQ(r.blocks_needed, needed);
  EXPECT_EQ(r.blocks_free, free);
}

TEST(BlockPoolTest, HandsOutFifoAndNeverTheNullBlock) {
  BlockPool pool(5);
  EXPECT_EQ(pool.num_blocks(), 5);
  EXPECT_EQ(pool.capacity(), 4);
  Table out;
  ASSERT_TRUE(pool.allocate(3, out));
  EXPECT_EQ(out, (Table{1, 2, 3}));
  EXPECT_EQ(pool.num_free_blocks(), 1);
  EXPECT_EQ(pool.num_used_blocks(), 3);
  pool.free({2, kNullBlockId, 1});
  ASSERT_TRUE(pool.allocate(3, out));
  EXPECT_EQ(out, (Table{1, 2, 3, 4, 2, 1}));  // 4 was free longest, then 2, then 1
  EXPECT_EQ(pool.num_free_blocks(), 0);
  pool.free({4});
  EXPECT_FALSE(pool.allocate(2, out));  // a failed allocate changes nothing
  EXPECT_EQ(out.size(), 6u);
  EXPECT_EQ(pool.num_free_blocks(), 1);
  EXPECT_TRUE(pool.allocate(0, out));
}

TEST(BlockPoolTest, DoubleFreeIsLogicErrorAndLeavesPoolUnchanged) {
  BlockPool pool(6);
  Table out;
  ASSERT_TRUE(pool.allocate(3, out));  // 1 2 3
  pool.free({2});
  EXPECT_THROW(pool.free({2}), std::logic_error);
  EXPECT_THROW(pool.free({4}), std::logic_error);  // never handed out
  EXPECT_THROW(pool.free({6}), std::logic_error);  // out of range
  EXPECT_THROW(pool.free({-1}), std::logic_error);
  EXPECT_THROW(pool.free({1, 3, 1}), std::logic_error);  // duplicate inside one call
  EXPECT_TRUE(pool.is_in_use(1));
  EXPECT_TRUE(pool.is_in_use(3));
  EXPECT_EQ(pool.num_free_blocks(), 3);
  try {
    pool.free({2});
    FAIL() << "expected logic_error";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("block 2"), std::string::npos) << e.what();
  }
  pool.free({1, 3});
  EXPECT_EQ(pool.num_free_blocks(), 5);
}

struct Step {
  int64_t num_computed_tokens;
  int64_t num_new_tokens;
  int64_t num_blocks_needed;
  Table table;
  int64_t num_free_blocks;
};

void run_steps(KvCacheManager& kv, const std::vector<Step>& steps) {
  for (const Step& s : steps) {
    SCOPED_TRACE(testing::Message()
                 << "step " << s.num_computed_tokens << " + " << s.num_new_tokens);
    EXPECT_EQ(kv.num_blocks_needed("r", s.num_computed_tokens, s.num_new_tokens, 0),
              s.num_blocks_needed);
    ASSERT_TRUE(kv.allocate_slots("r", s.num_computed_tokens, s.num_new_tokens).ok);
    EXPECT_EQ(kv.block_table("r", 0), s.table);
    EXPECT_EQ(kv.num_free_blocks(0), s.num_free_blocks);
  }
}

void expect_full_attention_steps(const KvCacheSpec& spec) {
  KvCacheManager kv(make_config({{spec, 10}}));
  run_steps(kv, {{0, 17, 2, {1, 2}, 7}, {17, 15, 0, {1, 2}, 7}, {32, 1, 1, {1, 2, 3}, 6}});
  EXPECT_EQ(kv.num_freed_blocks("r", 0), 0);
  kv.free("r");
  EXPECT_EQ(kv.num_free_blocks(0), 9);
  EXPECT_FALSE(kv.has_request("r"));
}

TEST(KvCacheManagerTest, FullAttentionBlockSize16) { expect_full_attention_steps(full(16)); }
TEST(KvCacheManagerTest, MlaBehavesAsFullAttention) { expect_full_attention_steps(mla(16)); }

// Window 8, block 4: a query at c sees [c - 7, c]; block j is freed once 4j + 3 < c - 7.
TEST(KvCacheManagerTest, SlidingWindow8Block4) {
  KvCacheManager kv(make_config({{sliding(4, 8), 10}}));
  run_steps(kv, {{0, 10, 3, {1, 2, 3}, 6},
                 {10, 1, 0, {1, 2, 3}, 6},     // window starts at 3: block 0 still needed
                 {11, 2, 1, {0, 2, 3, 4}, 6},  // window starts at 4: block 0 freed, reused last
                 {13, 3, 0, {0, 2, 3, 4}, 6},
                 {16, 1, 1, {0, 0, 3, 4, 5}, 6},  // window starts at 9
                 {17, 8, 2, {0, 0, 3, 4, 5, 6, 7}, 4},
                 {25, 1, 0, {0, 0, 0, 0, 5, 6, 7}, 6}});  // window starts at 18
  EXPECT_EQ(kv.num_freed_blocks("r", 0), 4);
  ASSERT_TRUE(kv.allocate_slots("r", 26, 7).ok);  // window starts at 19: block 4 stays
  EXPECT_EQ(kv.block_table("r", 0), (Table{0, 0, 0, 0, 5, 6, 7, 8, 9}));
  EXPECT_EQ(kv.num_free_blocks(0), 4);
  kv.free("r");
  EXPECT_EQ(kv.num_free_blocks(0), 9);
}

// What a scheduler counts before a step: the new blocks, and the blocks the request's own
// window gives back first (allocate_slots frees them before taking new ones).
TEST(KvCacheManagerTest, ReclaimableBlocksOfTheWindow) {
  KvCacheManager kv(make_config({{sliding(4, 8), 10}, {full(4), 10}}));
  EXPECT_EQ(kv.num_reclaimable_blocks("new", 0, 0), 0);
  ASSERT_TRUE(kv.allocate_slots("r", 0, 11).ok);  // blocks for tokens 0..10
  EXPECT_EQ(kv.num_reclaimable_blocks("r", 10, 0), 0);  // a query at 10 still sees token 3
  EXPECT_EQ(kv.num_reclaimable_blocks("r", 11, 0), 1);  // at 11 it sees [4, 11]: block 0 goes
  EXPECT_EQ(kv.num_reclaimable_blocks("r", 11, 1), 0);  // full attention never gives back
  EXPECT_EQ(kv.num_blocks_needed("r", 11, 2, 0), 1);
  const int64_t before = kv.num_free_blocks(0);
  ASSERT_TRUE(kv.allocate_slots("r", 11, 2).ok);
  EXPECT_EQ(kv.num_free_blocks(0), before + 1 - 1);  // one back, one taken
}

// Chunk 8, block 4: a query at c sees [8 * floor(c / 8), c].
TEST(KvCacheManagerTest, ChunkedLocalChunk8Block4) {
  KvCacheManager kv(make_config({{chunked(4, 8), 10}}));
  run_steps(kv, {{0, 6, 2, {1, 2}, 7},
                 {6, 3, 1, {1, 2, 3}, 6},
                 {9, 2, 0, {0, 0, 3}, 8},  // chunk [8, 16): blocks 0 and 1 freed
                 {11, 6, 2, {0, 0, 3, 4, 5}, 6},
                 {17, 1, 0, {0, 0, 0, 0, 5}, 8},  // chunk [16, 24)
                 {18, 5, 1, {0, 0, 0, 0, 5, 6}, 7},
                 {23, 1, 0, {0, 0, 0, 0, 5, 6}, 7}});
  EXPECT_EQ(kv.num_freed_blocks("r", 0), 4);
}

// Two groups; only the second (sliding window 4, block 4, 3 usable blocks) runs short.
TEST(KvCacheManagerTest, OutOfBlocksIsAtomicAcrossGroups) {
  KvCacheManager kv(make_config({{full(4), 20}, {sliding(4, 4), 4}}));
  ASSERT_TRUE(kv.allocate_slots("a", 0, 8).ok);
  ASSERT_EQ(kv.num_free_blocks(0), 17);
  ASSERT_EQ(kv.num_free_blocks(1), 1);

  AllocationResult r = kv.allocate_slots("b", 0, 8);  // new request: group 1 needs 2, has 1
  expect_short(r, 1, 2, 1);
  EXPECT_NE(r.to_string().find("group 1"), std::string::npos) << r.to_string();
  EXPECT_FALSE(kv.has_request("b"));
  EXPECT_EQ(kv.num_requests(), 1u);
  EXPECT_FALSE(kv.can_allocate("b", 0, 8));
  EXPECT_TRUE(kv.can_allocate("b", 0, 4));

  // Existing request, 20 tokens: group 1 needs 3 and has 1 free + 1 leaving the window. The
  // window block must not be freed either.
  const Table a0 = kv.block_table("a", 0);
  const Table a1 = kv.block_table("a", 1);
  EXPECT_EQ(kv.num_blocks_needed("a", 8, 12, 0), 3);
  EXPECT_EQ(kv.num_blocks_needed("a", 8, 12, 1), 3);
  expect_short(kv.allocate_slots("a", 8, 12), 1, 3, 2);
  EXPECT_EQ(kv.num_free_blocks(0), 17);
  EXPECT_EQ(kv.num_free_blocks(1), 1);
  EXPECT_EQ(kv.block_table("a", 0), a0);
  EXPECT_EQ(kv.block_table("a", 1), a1);
  EXPECT_EQ(kv.num_freed_blocks("a", 1), 0);
  EXPECT_EQ(kv.num_slot_tokens("a"), 8);

  // 16 tokens fit only by reusing the block that left the window.
  EXPECT_TRUE(kv.can_allocate("a", 8, 8));
  r = kv.allocate_slots("a", 8, 8);
  EXPECT_TRUE(r.ok) << r.to_string();
  EXPECT_EQ(kv.block_table("a", 1), (Table{0, 2, 3, 1}));
  EXPECT_EQ(kv.num_free_blocks(0), 15);
  EXPECT_EQ(kv.num_free_blocks(1), 0);
  EXPECT_DOUBLE_EQ(kv.usage(), 7.0 / 22.0);
}

TEST(KvCacheManagerTest, TruncateRollsBackSpeculativeSlots) {
  KvCacheManager kv(make_config({{full(4), 20}, {sliding(4, 8), 20}}));
  ASSERT_TRUE(kv.allocate_slots("r", 0, 10).ok);
  ASSERT_TRUE(kv.allocate_slots("r", 10, 5).ok);  // verify 1 + 4 drafts: 15 tokens, 4 blocks
  EXPECT_EQ(kv.num_free_blocks(0), 15);
  kv.truncate("r", 12);  // 2 accepted: 3 blocks kept
  EXPECT_EQ(kv.block_table("r", 0), (Table{1, 2, 3}));
  EXPECT_EQ(kv.block_table("r", 1), (Table{1, 2, 3}));
  EXPECT_EQ(kv.num_free_blocks(0), 16);
  EXPECT_EQ(kv.num_slot_tokens("r"), 12);
  ASSERT_TRUE(kv.allocate_slots("r", 12, 5).ok);  // window starts at 5: block 0 freed
  EXPECT_EQ(kv.block_table("r", 1), (Table{0, 2, 3, 5, 6}));
  kv.truncate("r", 13);
  EXPECT_EQ(kv.block_table("r", 0), (Table{1, 2, 3, 5}));
  EXPECT_EQ(kv.block_table("r", 1), (Table{0, 2, 3, 5}));
  kv.truncate("r", 11);  // a query at 11 sees [4, 11]: block 0 is not needed
  EXPECT_EQ(kv.block_table("r", 1), (Table{0, 2, 3}));

  // A query at 10 would see position 3, which is gone.
  EXPECT_EQ(config_error_field([&] { kv.truncate("r", 10); }), "num_tokens");
  EXPECT_EQ(config_error_field([&] { kv.allocate_slots("r", 10, 1); }), "num_computed_tokens");
  EXPECT_EQ(config_error_field([&] { kv.truncate("r", 12); }), "num_tokens");  // no slots
  EXPECT_EQ(kv.block_table("r", 1), (Table{0, 2, 3}));
  EXPECT_EQ(kv.num_free_blocks(1), 17);

  // allocate_slots never shrinks: extra slots stay until truncate.
  ASSERT_TRUE(kv.allocate_slots("r", 11, 8).ok);
  ASSERT_TRUE(kv.allocate_slots("r", 12, 1).ok);
  EXPECT_EQ(kv.block_table("r", 0).size(), 5u);
  EXPECT_EQ(kv.num_slot_tokens("r"), 19);
  kv.free("r");
  EXPECT_EQ(kv.num_free_blocks(0), 19);
  EXPECT_EQ(kv.num_free_blocks(1), 19);
  EXPECT_DOUBLE_EQ(kv.usage(), 0.0);
}

TEST(KvCacheManagerTest, BadInputIsConfigError) {
  EXPECT_EQ(config_error_field([] { BlockPool pool(1); }), "num_blocks");
  EXPECT_EQ(config_error_field([] { BlockPool pool(0); }), "num_blocks");
  EXPECT_EQ(config_error_field([] { BlockPool pool(int64_t{1} << 40); }), "num_blocks");
  EXPECT_EQ(BlockPool(2).capacity(), 1);
  KvCacheManager kv(make_config({{full(16), 8}}, 64));
  EXPECT_EQ(config_error_field([&] { kv.allocate_slots("r", -1, 1); }), "num_computed_tokens");
  EXPECT_EQ(config_error_field([&] { kv.allocate_slots("r", 0, -1); }), "num_new_tokens");
  EXPECT_EQ(config_error_field([&] { kv.allocate_slots("r", 0, 65); }),
            "num_computed_tokens + num_new_tokens");
  EXPECT_EQ(config_error_field([&] { kv.can_allocate("r", 0, INT64_MAX); }),
            "num_computed_tokens + num_new_tokens");
  EXPECT_EQ(config_error_field([&] { kv.allocate_slots("r", 5, 1); }), "num_computed_tokens");
  EXPECT_EQ(kv.num_requests(), 0u);
  EXPECT_TRUE(kv.allocate_slots("r", 0, 64).ok);
  EXPECT_EQ(config_error_field([&] { kv.allocate_slots("r", 64, 1); }),
            "num_computed_tokens + num_new_tokens");
  EXPECT_EQ(config_error_field([&] { kv.truncate("r", -1); }), "num_tokens");
  EXPECT_EQ(config_error_field([&] { kv.free("nope"); }), "request_id");
  EXPECT_EQ(config_error_field([&] { kv.truncate("nope", 0); }), "request_id");
  EXPECT_EQ(config_error_field([&] { kv.block_table("nope", 0); }), "request_id");
  EXPECT_EQ(config_error_field([&] { kv.block_table("r", 1); }), "group_id");
  EXPECT_EQ(config_error_field([&] { kv.num_free_blocks(-1); }), "group_id");
  EXPECT_EQ(config_error_field([] { make_manager(make_config({{full(16), 1}})); }), "num_blocks");
  EXPECT_EQ(config_error_field([] {
              make_manager(make_config({{full(16), 8}}, 0));
            }),
            "max_model_len");
  KvCacheSpec bad = sliding(4, 8);
  bad.sliding_window = 0;
  EXPECT_EQ(config_error_field([&] { make_manager(make_config({{bad, 8}})); }), "sliding_window");
  kv.free("r");
  EXPECT_EQ(config_error_field([&] { kv.free("r"); }), "request_id");
}

// Randomized run against an independent model.
// Leading tokens a query at position c cannot see, computed from the spec fields directly.
int64_t model_skipped_tokens(const KvCacheSpec& spec, int64_t c) {
  if (spec.kind == KvSpecKind::kSlidingWindow)
    return std::max<int64_t>(0, c - spec.sliding_window + 1);
  if (spec.kind == KvSpecKind::kChunkedLocal) return c - c % spec.attention_chunk_size;
  return 0;
}

struct ModelRequest {
  int64_t prompt_tokens = 0;
  int64_t num_computed_tokens = 0;  // position of the next query
  int64_t num_slot_tokens = 0;
  std::vector<int64_t> num_freed;  // [num_groups]
};

class RandomRun {
 public:
  RandomRun(const KvCacheConfig& config, uint64_t seed)
      : config_(config), kv_(config), rng_(seed) {}

  void run(int num_ops) {
    for (int op = 0; op < num_ops; ++op) {
      const int roll = uniform(0, 99);
      if (model_.empty() || (roll < 12 && model_.size() < 12)) {
        start_request();
      } else if (roll < 80) {
        step(pick());
      } else if (roll < 90) {
        bad_rollback(pick());
      } else {
        free_request(pick());
      }
      check_invariants();
      if (testing::Test::HasFailure()) FAIL() << "after op " << op;
    }
    while (!model_.empty()) free_request(model_.begin()->first);
    for (int g = 0; g < kv_.num_groups(); ++g) EXPECT_EQ(kv_.num_free_blocks(g), kv_.capacity(g));
  }

  int num_ok = 0, num_short = 0, num_truncated = 0, num_rejected = 0;

 private:
  int64_t uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  std::string pick() {
    auto it = model_.begin();
    std::advance(it, uniform(0, static_cast<int64_t>(model_.size()) - 1));
    return it->first;
  }
  const KvCacheSpec& spec(size_t g) const { return config_.groups[g].spec; }

  void start_request() {
    const std::string id = "req" + std::to_string(next_id_++);
    ModelRequest r;
    r.prompt_tokens = uniform(1, config_.max_model_len / 2);
    r.num_freed.assign(config_.groups.size(), 0);
    model_[id] = r;
    if (!step(id)) model_.erase(id);  // never admitted: not created
  }

  // The model's prediction of allocate_slots: the first group short, or ok.
  AllocationResult predict(const std::string& id, int64_t c, int64_t num_tokens) const {
    const ModelRequest& r = model_.at(id);
    for (size_t g = 0; g < config_.groups.size(); ++g) {
      const int bs = spec(g).block_size;
      int64_t num_free = config_.groups[g].num_blocks - 1;
      for (const auto& entry : model_) {
        num_free -= cdiv(entry.second.num_slot_tokens, bs) - entry.second.num_freed[g];
      }
      const int64_t needed =
          std::max<int64_t>(0, cdiv(num_tokens, bs) - cdiv(r.num_slot_tokens, bs));
      const int64_t reclaim =
          std::max<int64_t>(0, model_skipped_tokens(spec(g), c) / bs - r.num_freed[g]);
      EXPECT_EQ(kv_.num_blocks_needed(id, c, num_tokens - c, static_cast<int>(g)), needed);
      if (needed > num_free + reclaim) {
        return {false, static_cast<int>(g), needed, num_free + reclaim};
      }
    }
    return {};
  }

  // One engine step: a prefill chunk or a verify of 1..8 tokens, then acceptance and rollback.
  bool step(const std::string& id) {
    ModelRequest& r = model_.at(id);
    const int64_t c = r.num_computed_tokens;
    int64_t n = c < r.prompt_tokens
                    ? std::min(r.prompt_tokens - c, uniform(1, config_.max_num_batched_tokens))
                    : uniform(1, 8);
    n = std::min(n, config_.max_model_len - c);
    if (n == 0) {
      free_request(id);
      return true;
    }
    const AllocationResult want = predict(id, c, c + n);
    EXPECT_EQ(kv_.can_allocate(id, c, n), want.ok);
    const AllocationResult got = kv_.allocate_slots(id, c, n);
    EXPECT_EQ(got.ok, want.ok) << got.to_string() << " vs " << want.to_string();
    if (!want.ok) expect_short(got, want.group_id, want.blocks_needed, want.blocks_free);
    if (!got.ok) {
      ++num_short;  // check_invariants then shows that nothing changed
      if (c > 0 && uniform(0, 1) == 0) free_request(id);  // preempt
      return false;
    }
    ++num_ok;
    for (size_t g = 0; g < r.num_freed.size(); ++g) {
      r.num_freed[g] =
          std::max(r.num_freed[g], model_skipped_tokens(spec(g), c) / spec(g).block_size);
    }
    r.num_slot_tokens = std::max(r.num_slot_tokens, c + n);
    if (c < r.prompt_tokens) {
      r.num_computed_tokens = c + n;
      return true;
    }
    const int64_t accepted = uniform(1, n);
    r.num_computed_tokens = c + accepted;
    if (uniform(0, 3) != 0) {  // usually roll back the rejected drafts (by 0..n - accepted)
      const int64_t keep = c + n - uniform(0, n - accepted);
      kv_.truncate(id, keep);
      r.num_slot_tokens = keep;
      ++num_truncated;
    }
    return true;
  }

  // Rolling back before the first position whose window is intact throws and changes nothing.
  void bad_rollback(const std::string& id) {
    const ModelRequest& r = model_.at(id);
    const auto intact = [&](int64_t t) {
      for (size_t g = 0; g < r.num_freed.size(); ++g) {
        if (r.num_freed[g] > model_skipped_tokens(spec(g), t) / spec(g).block_size) return false;
      }
      return true;
    };
    int64_t min_valid = 0;
    while (!intact(min_valid)) ++min_valid;
    EXPECT_LE(min_valid, r.num_computed_tokens);
    if (min_valid == 0) return;
    EXPECT_EQ(config_error_field([&] { kv_.truncate(id, min_valid - 1); }), "num_tokens");
    EXPECT_EQ(config_error_field([&] { kv_.allocate_slots(id, min_valid - 1, 1); }),
              "num_computed_tokens");
    ++num_rejected;
  }

  void free_request(const std::string& id) {
    kv_.free(id);
    model_.erase(id);
  }

  void check_invariants() {
    ASSERT_EQ(kv_.num_requests(), model_.size());
    int64_t used_all = 0, usable_all = 0;
    for (int g = 0; g < kv_.num_groups(); ++g) {
      const int bs = spec(g).block_size;
      std::vector<int> owners(config_.groups[g].num_blocks, 0);
      int64_t used = 0;
      for (const auto& [id, r] : model_) {
        ASSERT_TRUE(kv_.has_request(id));
        EXPECT_EQ(kv_.num_slot_tokens(id), r.num_slot_tokens) << id;
        const Table& table = kv_.block_table(id, g);
        ASSERT_EQ(static_cast<int64_t>(table.size()), cdiv(r.num_slot_tokens, bs)) << id;
        EXPECT_EQ(kv_.num_freed_blocks(id, g), r.num_freed[g]) << id;
        const int64_t first_visible = model_skipped_tokens(spec(g), r.num_computed_tokens) / bs;
        EXPECT_LE(r.num_freed[g], first_visible) << id;
        for (int64_t j = 0; j < static_cast<int64_t>(table.size()); ++j) {
          const int32_t b = table[j];
          if (j < r.num_freed[g]) {
            EXPECT_EQ(b, kNullBlockId) << id << " group " << g << " entry " << j;
            continue;
          }
          ASSERT_GT(b, 0) << id << " group " << g << " entry " << j
                          << " visible: " << (j >= first_visible);
          ASSERT_LT(b, config_.groups[g].num_blocks);
          ASSERT_EQ(owners[b]++, 0) << "block " << b << " of group " << g << " owned twice";
          ++used;
        }
      }
      EXPECT_EQ(used + kv_.num_free_blocks(g), kv_.capacity(g)) << "group " << g;
      EXPECT_EQ(kv_.group(g).pool().num_used_blocks(), used);
      used_all += used;
      usable_all += kv_.capacity(g);
    }
    EXPECT_DOUBLE_EQ(kv_.usage(), usable_all ? static_cast<double>(used_all) / usable_all : 0.0);
  }

  KvCacheConfig config_;
  KvCacheManager kv_;
  std::mt19937_64 rng_;
  std::map<std::string, ModelRequest> model_;
  int next_id_ = 0;
};

TEST(KvCacheManagerTest, RandomOpsMatchModel) {
  const std::vector<std::pair<std::string, KvCacheConfig>> cases = {
      {"full_only", make_config({{full(16), 30}}, 256, 64)},
      {"full_sliding", make_config({{full(4), 80}, {sliding(4, 10), 30}}, 200, 48)},
      {"chunked_full", make_config({{chunked(4, 16), 25}, {full(8), 60}}, 200, 48)},
      {"mla_sliding_chunked",
       make_config({{mla(8), 40}, {sliding(2, 5), 24}, {chunked(4, 12), 20}}, 160, 32)},
  };
  for (const auto& [name, config] : cases) {
    for (uint64_t seed : {1u, 2u, 3u}) {
      SCOPED_TRACE(testing::Message() << name << " seed " << seed);
      RandomRun run(config, seed);
      run.run(5000);
      if (testing::Test::HasFailure()) return;
      EXPECT_GT(run.num_ok, 1000);
      EXPECT_GT(run.num_short, 10);  // the pools are small enough to run out
      EXPECT_GT(run.num_truncated, 100);
      if (config.groups.size() > 1) {
        EXPECT_GT(run.num_rejected, 10);
      }
    }
  }
}


// ---- automatic prefix caching ----

std::vector<int32_t> seq(int64_t n, int32_t first = 1) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = first + static_cast<int32_t>(i);
  return t;
}

// Runs a request's prompt as one prefill step and records it (as the runner does after a step).
void prefill(KvCacheManager& kv, const std::string& id, const std::vector<int32_t>& tokens, int64_t from = 0) {
  ASSERT_TRUE(kv.allocate_slots(id, from, static_cast<int64_t>(tokens.size()) - from).ok);
  kv.record_tokens(id, from, std::span<const int32_t>(tokens).subspan(static_cast<size_t>(from)), from);
  // the next step (a decode) commits them all
  kv.record_tokens(id, static_cast<int64_t>(tokens.size()), {}, static_cast<int64_t>(tokens.size()));
}

TEST(PrefixCacheTest, SecondRequestSharesFullBlocksAndLastTokenIsRecomputed) {
  KvCacheManager kv(make_config({{full(4), 16}}), true);
  ASSERT_TRUE(kv.prefix_caching());
  const auto a = seq(10);
  EXPECT_EQ(kv.claim_prefix("a", a, 1 << 20), 0);
  prefill(kv, "a", a);
  EXPECT_EQ(kv.num_cached_blocks(0), 2);  // [0,4) and [4,8); [8,10) is not full
  // same 8 first tokens, then different: 8 tokens from the cache
  auto b = seq(12);
  b[9] = 99;
  EXPECT_EQ(kv.claim_prefix("b", b, 1 << 20), 8);
  EXPECT_EQ(kv.block_table("b", 0), (Table{kv.block_table("a", 0)[0], kv.block_table("a", 0)[1]}));
  EXPECT_EQ(kv.num_slot_tokens("b"), 8);
  ASSERT_TRUE(kv.allocate_slots("b", 8, 4).ok);
  EXPECT_NE(kv.block_table("b", 0)[2], kv.block_table("a", 0)[2]);
  // a prompt of exactly 8 tokens: only 4 from the cache (the last token must run for its logits)
  EXPECT_EQ(kv.claim_prefix("c", seq(8), 1 << 20), 4);
  EXPECT_EQ(kv.claim_prefix("d", seq(8), 3), 0);  // max_tokens below a block
  EXPECT_EQ(kv.prefix_cache_queries(), 10 + 12 + 8 + 8);
  EXPECT_EQ(kv.prefix_cache_hits(), 8 + 4);
  // a request that is already known claims nothing
  EXPECT_EQ(kv.claim_prefix("a", a, 1 << 20), 0);
}

TEST(PrefixCacheTest, FreedBlocksStayCachedUntilEvictedLeastRecentlyUsedFirst) {
  KvCacheManager kv(make_config({{full(4), 5}}), true);  // 4 usable blocks
  const auto a = seq(9);                                  // 3 blocks, 2 full
  prefill(kv, "a", a);
  kv.free("a");
  EXPECT_EQ(kv.num_free_blocks(0), 4);   // cached blocks count as free
  EXPECT_EQ(kv.num_cached_blocks(0), 2);
  EXPECT_EQ(kv.claim_prefix("b", a, 1 << 20), 8);
  EXPECT_EQ(kv.num_free_blocks(0), 2);
  kv.free("b");
  // a new unrelated request takes the uncached free blocks first, then evicts the LRU cached one
  // (the chain's last block is evicted first)
  ASSERT_TRUE(kv.allocate_slots("x", 0, 12).ok);
  EXPECT_EQ(kv.num_cached_blocks(0), 1);
  EXPECT_EQ(kv.claim_prefix("c", a, 1 << 20), 4);
  kv.free("c");
  kv.free("x");
  EXPECT_EQ(kv.reset_prefix_cache(), 1);
  EXPECT_EQ(kv.num_cached_blocks(0), 0);
  EXPECT_EQ(kv.claim_prefix("d", a, 1 << 20), 0);
  EXPECT_EQ(kv.num_free_blocks(0), 4);
}

TEST(PrefixCacheTest, UncommittedBlocksAreNeverCachedAndRollbackKeepsCachedOnesIntact) {
  KvCacheManager kv(make_config({{full(4), 16}}), true);
  const auto p = seq(5);
  ASSERT_TRUE(kv.allocate_slots("a", 0, 5).ok);
  kv.record_tokens("a", 0, p, 0);
  // a verify step: last token + 6 draft tokens, committed = 5 (nothing past the prompt)
  const std::vector<int32_t> draft = {6, 7, 8, 50, 51, 52};
  ASSERT_TRUE(kv.allocate_slots("a", 5, 6).ok);
  kv.record_tokens("a", 5, draft, 5);
  EXPECT_EQ(kv.num_cached_blocks(0), 1);   // [0,4) only: [4,8) holds drafts
  kv.truncate("a", 8);                      // 3 accepted
  ASSERT_TRUE(kv.allocate_slots("a", 8, 1).ok);
  kv.record_tokens("a", 8, std::vector<int32_t>{9}, 8);
  EXPECT_EQ(kv.num_cached_blocks(0), 2);    // [4,8) = 5 6 7 8 now final
  auto want = seq(12);
  EXPECT_EQ(kv.claim_prefix("b", want, 1 << 20), 8);
  // rolling "a" back inside a block "b" shares is refused; to the block's start it is fine
  EXPECT_EQ(config_error_field([&] { kv.truncate("a", 6); }), "num_tokens");
  kv.truncate("a", 4);
  EXPECT_EQ(kv.block_table("a", 0).size(), 1u);
  EXPECT_EQ(kv.num_cached_blocks(0), 2);    // b still holds [4,8)
  // rolling back inside a cached block only this request holds takes it out of the cache
  kv.free("b");
  KvCacheManager solo(make_config({{full(4), 16}}), true);
  prefill(solo, "s", seq(9));
  EXPECT_EQ(solo.num_cached_blocks(0), 2);
  solo.truncate("s", 6);
  EXPECT_EQ(solo.num_cached_blocks(0), 1);
  EXPECT_EQ(solo.claim_prefix("t", seq(12), 1 << 20), 4);
}

TEST(PrefixCacheTest, SlidingWindowGroupNeedsOnlyTheBlocksItsNextQuerySees) {
  // group 0 full, group 1 sliding window 4 (block 4): a query at 16 sees [13, 16]
  KvCacheManager kv(make_config({{full(4), 32}, {sliding(4, 4), 32}}), true);
  const auto a = seq(17);
  prefill(kv, "a", a);
  // the sliding group freed its early blocks (null entries) but cached the ones it still had
  EXPECT_EQ(kv.num_cached_blocks(0), 4);
  EXPECT_EQ(kv.claim_prefix("b", a, 1 << 20), 16);
  EXPECT_EQ(kv.num_freed_blocks("b", 1), 3);  // [0,12) not needed by a query at 16
  EXPECT_EQ(kv.block_table("b", 1)[3], kv.block_table("a", 1)[3]);
  EXPECT_EQ(kv.block_table("b", 1)[0], kNullBlockId);
  ASSERT_TRUE(kv.allocate_slots("b", 16, 1).ok);
  // with the window's last block evicted, only a shorter prefix is whole in both groups
  kv.free("a");
  kv.free("b");
}

TEST(PrefixCacheTest, UnclaimGivesBlocksBackAndUncountsTheClaim) {
  KvCacheManager kv(make_config({{full(4), 16}}), true);
  prefill(kv, "a", seq(9));
  kv.free("a");
  const int64_t free_before = kv.num_free_blocks(0);
  const int64_t q = kv.prefix_cache_queries(), h = kv.prefix_cache_hits();
  EXPECT_EQ(kv.claim_prefix("b", seq(9), 1 << 20), 8);
  kv.unclaim_prefix("b");
  EXPECT_FALSE(kv.has_request("b"));
  EXPECT_EQ(kv.num_free_blocks(0), free_before);
  EXPECT_EQ(kv.num_cached_blocks(0), 2);
  EXPECT_EQ(kv.prefix_cache_queries(), q);
  EXPECT_EQ(kv.prefix_cache_hits(), h);
  EXPECT_EQ(config_error_field([&] { kv.unclaim_prefix("nobody"); }), "request_id");
}

TEST(BlockPoolTest, AnIdListedTwiceWithTwoReferencesIsFreedOnce) {
  BlockPool pool(4);
  std::vector<int32_t> got;
  ASSERT_TRUE(pool.allocate(1, got));
  pool.set_cached(got[0], true);
  pool.take_cached(got[0]);  // 2 references
  pool.set_cached(got[0], false);
  pool.free(std::vector<int32_t>{got[0], got[0]});
  EXPECT_EQ(pool.num_free_blocks(), 3);
  std::vector<int32_t> all;
  ASSERT_TRUE(pool.allocate(3, all));
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<int32_t>{1, 2, 3}));
}

TEST(PrefixCacheTest, OffWhenDisabledOrBlockSizesDiffer) {
  KvCacheManager off(make_config({{full(4), 16}}), false);
  EXPECT_FALSE(off.prefix_caching());
  prefill(off, "a", seq(9));
  EXPECT_EQ(off.claim_prefix("b", seq(9), 1 << 20), 0);
  KvCacheManager mixed(make_config({{full(4), 16}, {full(8), 16}}), true);
  EXPECT_FALSE(mixed.prefix_caching());
}

TEST(PrefixCacheTest, RequestWithUnknownTokensRegistersNothing) {
  KvCacheManager kv(make_config({{full(4), 16}}), true);
  ASSERT_TRUE(kv.allocate_slots("a", 0, 8).ok);  // written without record_tokens (a context)
  ASSERT_TRUE(kv.allocate_slots("a", 8, 1).ok);
  kv.record_tokens("a", 8, std::vector<int32_t>{1}, 8);
  EXPECT_EQ(kv.num_cached_blocks(0), 0);
}

// Random requests over a small pool: shared prefixes, drafts, rollbacks, frees. Invariants: no
// block is handed out twice while in use by two requests unless both hold the same cached prefix,
// every block returns, and a claimed block always holds the tokens it was registered with.
TEST(PrefixCacheTest, RandomOpsKeepContentsAndFreeEverything) {
  std::mt19937 rng(7);
  for (int round = 0; round < 20; ++round) {
    KvCacheManager kv(make_config({{full(4), 24}, {sliding(4, 6), 24}}, 64), true);
    // what each physical block of group 0 holds: position -> token (as a device would)
    std::vector<std::vector<int32_t>> content(24, std::vector<int32_t>(4, -1));
    std::map<std::string, std::vector<int32_t>> live;  // request -> its tokens in the cache
    int next = 0;
    for (int op = 0; op < 300; ++op) {
      const int kind = static_cast<int>(rng() % 4);
      if (kind == 0 || live.empty()) {  // a new request from one of 3 prompt families
        const std::string id = "r" + std::to_string(next++);
        const int family = static_cast<int>(rng() % 3);
        std::vector<int32_t> prompt;
        const int len = 2 + static_cast<int>(rng() % 20);
        for (int i = 0; i < len; ++i) prompt.push_back(i < 10 ? family * 100 + i : static_cast<int32_t>(rng() % 5));
        const int64_t hit = kv.claim_prefix(id, prompt, 63);
        ASSERT_EQ(hit % 4, 0);
        ASSERT_LT(hit, len);
        const Table& t = hit ? kv.block_table(id, 0) : Table{};
        for (int64_t pos = 0; pos < hit; ++pos) {  // what the cache hands out is what was written
          ASSERT_EQ(content[t[pos / 4]][pos % 4], prompt[pos]) << "round " << round << " op " << op;
        }
        if (!kv.allocate_slots(id, hit, len - hit).ok) {
          if (kv.has_request(id)) kv.free(id);
          continue;
        }
        const Table& tt = kv.block_table(id, 0);
        for (int64_t pos = hit; pos < len; ++pos) content[tt[pos / 4]][pos % 4] = prompt[pos];
        kv.record_tokens(id, hit, std::span<const int32_t>(prompt).subspan(static_cast<size_t>(hit)), hit);
        live[id] = prompt;
      } else if (kind == 1) {  // a verify step: 1 + k tokens, some accepted
        auto it = live.begin();
        std::advance(it, rng() % live.size());
        auto& toks = it->second;
        const int64_t c = static_cast<int64_t>(toks.size());
        const int64_t k = 1 + rng() % 4;
        if (c + k > 63) continue;
        std::vector<int32_t> step;
        for (int64_t i = 0; i < k; ++i) step.push_back(static_cast<int32_t>(rng() % 5));
        if (!kv.allocate_slots(it->first, c, k).ok) continue;
        const Table& tt = kv.block_table(it->first, 0);
        for (int64_t i = 0; i < k; ++i) {
          const int32_t b = tt[(c + i) / 4];
          ASSERT_TRUE(kv.group(0).pool().ref_count(b) == 1 || !kv.group(0).pool().is_cached(b))
              << "a step writes into a shared cached block";
          content[b][(c + i) % 4] = step[i];
        }
        kv.record_tokens(it->first, c, step, c);
        const int64_t accepted = rng() % (k + 1);
        kv.truncate(it->first, c + accepted);
        toks.insert(toks.end(), step.begin(), step.begin() + accepted);
      } else {  // finish
        auto it = live.begin();
        std::advance(it, rng() % live.size());
        kv.free(it->first);
        live.erase(it);
      }
    }
    EXPECT_GT(kv.prefix_cache_hits(), 0);
    for (const auto& [id, _] : live) kv.free(id);
    EXPECT_EQ(kv.num_free_blocks(0), 23);
    EXPECT_EQ(kv.num_free_blocks(1), 23);
    kv.reset_prefix_cache();
    EXPECT_EQ(kv.num_cached_blocks(0), 0);
  }
}

}  // namespace
}  // namespace specdec::kv
