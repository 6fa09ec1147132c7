// RequestTable (runner/request_table.h) over a KvCacheManager, no device: lengths after steps and
// rollbacks, the early-exit state a deeper step is refused over, and a step that does not fit.
#include "runner/request_table.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "common/errors.h"

namespace specdec::runner {
namespace {

// One full-attention group of `num_blocks` blocks of 4 tokens (one of them the null block).
kv::KvCacheConfig config(int64_t num_blocks) {
  const auto spec = kv::KvCacheSpec::full_attention(4, 2, 64, DType::kF16);
  kv::KvCacheConfig c;
  c.groups.push_back(kv::KvCacheGroup{spec, {"layers.0.attn"}, {spec}, {}, num_blocks, 0, 0});
  c.max_model_len = 64;
  c.max_num_batched_tokens = 64;
  return c;
}

StepRequest request(const std::string& id, int64_t computed, int num_tokens) {
  StepRequest r;
  r.request_id = id;
  r.tokens.assign(static_cast<size_t>(num_tokens), 1);
  r.num_computed_tokens = computed;
  return r;
}

// allocate_slots then commit_step, as a step through `exit` of 4 layers does.
void run(RequestTable& table, const std::vector<StepRequest>& step, int exit = 4) {
  table.allocate_slots(step);
  table.commit_step(step, exit, 4);
}

std::string config_error_field(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.field();
  }
  return "<no ConfigError>";
}

TEST(RequestTableTest, LengthsFollowStepsRollbacksAndFrees) {
  kv::KvCacheManager manager(config(8));
  RequestTable table(manager);
  run(table, {request("a", 0, 6), request("b", 0, 3)});
  EXPECT_EQ(table.length("a"), 6);
  EXPECT_EQ(table.length("b"), 3);
  EXPECT_EQ(table.num_free_blocks(), (std::vector<int64_t>{4}));
  table.truncate("a", 2);
  EXPECT_EQ(table.length("a"), 2);
  EXPECT_EQ(table.num_free_blocks(), (std::vector<int64_t>{5}));
  EXPECT_EQ(config_error_field([&] { table.truncate("a", 3); }), "num_tokens");
  table.free("b");
  EXPECT_FALSE(table.contains("b"));
  EXPECT_EQ(table.length("b"), 0);
  EXPECT_EQ(config_error_field([&] { table.free("b"); }), "request_id");
  table.roll_back("a", 0);  // a DFlash drafter's context from position 0: the request ends
  EXPECT_FALSE(table.contains("a"));
  table.drop("a");  // unknown: ignored
  EXPECT_EQ(table.num_free_blocks(), (std::vector<int64_t>{7}));
}

TEST(RequestTableTest, DeeperStepOverEarlyExitPositionsIsRefusedUntilTruncated) {
  kv::KvCacheManager manager(config(8));
  RequestTable table(manager);
  run(table, {request("a", 0, 5)});
  run(table, {request("a", 5, 3)}, 2);  // positions 5..7 hold K/V of layers 0 and 1 only
  run(table, {request("a", 8, 1)}, 1);  // from 5 on: layer 0 only
  EXPECT_NO_THROW(table.check_exit({request("a", 9, 1)}, 1));
  const std::string field = "request a.num_computed_tokens";
  EXPECT_EQ(config_error_field([&] { table.check_exit({request("a", 9, 1)}, 2); }), field);
  table.truncate("a", 6);  // still past 5
  EXPECT_EQ(config_error_field([&] { table.check_exit({request("a", 6, 1)}, 4); }), field);
  table.truncate("a", 5);
  EXPECT_NO_THROW(table.check_exit({request("a", 5, 1)}, 4));
}

TEST(RequestTableTest, StepThatDoesNotFitUndoesItsAllocations) {
  kv::KvCacheManager manager(config(4));
  RequestTable table(manager);
  run(table, {request("a", 0, 4)});
  EXPECT_EQ(config_error_field([&] { table.allocate_slots({request("a", 4, 4), request("b", 0, 9)}); }),
            "kv_cache");
  EXPECT_EQ(table.num_free_blocks(), (std::vector<int64_t>{2}));  // a's new block went back
  EXPECT_FALSE(manager.has_request("b"));
  EXPECT_EQ(table.length("a"), 4);
  EXPECT_EQ(table.num_blocks_needed("b", 0, 9, -1), (std::vector<int64_t>{3}));
}

}  // namespace
}  // namespace specdec::runner
