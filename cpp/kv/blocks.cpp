#include "kv/blocks.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "common/errors.h"
#include "common/math.h"

namespace specdec::kv {
namespace {

constexpr int64_t kMaxNumBlocks = std::numeric_limits<int32_t>::max();

[[noreturn]] void throw_unknown_request(const std::string& request_id) {
  throw ConfigError("request_id", request_id,
                    "unknown request: call allocate_slots first (or it was already freed)");
}

class FullAttentionManager final : public GroupBlockManager {
 public:
  using GroupBlockManager::GroupBlockManager;
  int64_t num_skipped_tokens(int64_t /*num_computed_tokens*/) const override { return 0; }
};

// A query at position p sees [p - sliding_window + 1, p].
class SlidingWindowManager final : public GroupBlockManager {
 public:
  using GroupBlockManager::GroupBlockManager;
  int64_t num_skipped_tokens(int64_t num_computed_tokens) const override {
    return std::max<int64_t>(0, num_computed_tokens - spec().sliding_window + 1);
  }
};

// A query at position p sees the start of its chunk up to p.
class ChunkedLocalManager final : public GroupBlockManager {
 public:
  using GroupBlockManager::GroupBlockManager;
  int64_t num_skipped_tokens(int64_t num_computed_tokens) const override {
    const int64_t chunk_tokens = spec().attention_chunk_size;
    return num_computed_tokens / chunk_tokens * chunk_tokens;
  }
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// BlockPool

BlockPool::BlockPool(int64_t num_blocks) : num_blocks_(num_blocks) {
  SPECDEC_CHECK(num_blocks >= 2 && num_blocks <= kMaxNumBlocks, "num_blocks", num_blocks,
               str_cat("must be in [2, ", kMaxNumBlocks,
                       "]: block 0 is the null block, so a pool needs at least one more; "
                       "give the KV cache more memory or use a smaller block_size"));
  free_ring_.resize(static_cast<size_t>(capacity()));
  for (int64_t i = 0; i < capacity(); ++i) free_ring_[i] = static_cast<int32_t>(i + 1);
  num_free_ = capacity();
  in_use_.assign(static_cast<size_t>(num_blocks), 0);
}

bool BlockPool::allocate(int64_t n, std::vector<int32_t>& out) {
  if (n < 0) throw std::logic_error(str_cat("BlockPool::allocate: negative count ", n));
  if (n > num_free_) return false;
  out.reserve(out.size() + static_cast<size_t>(n));  // the only step that may throw
  const int64_t ring_size = capacity();
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = free_ring_[head_];
    head_ = head_ + 1 == ring_size ? 0 : head_ + 1;
    in_use_[id] = 1;
    out.push_back(id);
  }
  num_free_ -= n;
  return true;
}

void BlockPool::free(std::span<const int32_t> ids) {
  // Mark first so that a bad id (or a duplicate within ids) leaves the pool unchanged.
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id == kNullBlockId) continue;
    if (id < 0 || id >= num_blocks_ || !in_use_[id]) {
      for (size_t j = 0; j < i; ++j) {
        if (ids[j] != kNullBlockId) in_use_[ids[j]] = 1;
      }
      throw std::logic_error(
          str_cat("BlockPool::free: block ", id,
                  id < 0 || id >= num_blocks_ ? " is out of range" : " is not in use",
                  " (double free?); pool of ", num_blocks_, " blocks"));
    }
    in_use_[id] = 0;
  }
  const int64_t ring_size = capacity();
  for (const int32_t id : ids) {
    if (id == kNullBlockId) continue;
    int64_t tail = head_ + num_free_;
    if (tail >= ring_size) tail -= ring_size;
    free_ring_[tail] = id;
    ++num_free_;
  }
}

bool BlockPool::is_in_use(int32_t block_id) const {
  return block_id > 0 && block_id < num_blocks_ && in_use_[block_id] != 0;
}

// ---------------------------------------------------------------------------------------------
// GroupBlockManager

GroupBlockManager::GroupBlockManager(const KvCacheSpec& spec, int64_t num_blocks)
    : spec_(spec), pool_(num_blocks) {
  spec_.validate();
}

int64_t GroupBlockManager::num_reclaimable_blocks(const GroupBlocks& blocks,
                                                  int64_t num_computed_tokens) const {
  const int64_t num_entries = static_cast<int64_t>(blocks.block_ids.size());
  const int64_t num_skipped = std::min(num_skipped_blocks(num_computed_tokens), num_entries);
  return std::max<int64_t>(0, num_skipped - blocks.num_freed_blocks);
}

int64_t GroupBlockManager::num_new_blocks(const GroupBlocks& blocks, int64_t num_tokens) const {
  const int64_t num_entries = static_cast<int64_t>(blocks.block_ids.size());
  return std::max<int64_t>(0, cdiv(num_tokens, block_size()) - num_entries);
}

void GroupBlockManager::remove_skipped_blocks(GroupBlocks& blocks, int64_t num_computed_tokens) {
  const int64_t n = num_reclaimable_blocks(blocks, num_computed_tokens);
  if (n == 0) return;
  int32_t* first = blocks.block_ids.data() + blocks.num_freed_blocks;
  pool_.free(std::span<const int32_t>(first, static_cast<size_t>(n)));
  std::fill(first, first + n, kNullBlockId);
  blocks.num_freed_blocks += n;
}

void GroupBlockManager::allocate(GroupBlocks& blocks, int64_t num_tokens) {
  const int64_t n = num_new_blocks(blocks, num_tokens);
  if (n > 0 && !pool_.allocate(n, blocks.block_ids)) {
    throw std::logic_error(str_cat("GroupBlockManager::allocate: ", n, " blocks needed, ",
                                   pool_.num_free_blocks(), " free; check num_new_blocks first"));
  }
}

void GroupBlockManager::truncate(GroupBlocks& blocks, int64_t num_tokens) {
  const int64_t keep = std::max(cdiv(num_tokens, block_size()), blocks.num_freed_blocks);
  const int64_t num_entries = static_cast<int64_t>(blocks.block_ids.size());
  if (keep >= num_entries) return;
  pool_.free(std::span<const int32_t>(blocks.block_ids.data() + keep,
                                      static_cast<size_t>(num_entries - keep)));
  blocks.block_ids.resize(static_cast<size_t>(keep));
}

void GroupBlockManager::free(GroupBlocks& blocks) {
  const int64_t num_entries = static_cast<int64_t>(blocks.block_ids.size());
  const int64_t first = std::min(blocks.num_freed_blocks, num_entries);
  pool_.free(std::span<const int32_t>(blocks.block_ids.data() + first,
                                      static_cast<size_t>(num_entries - first)));
  blocks.block_ids.clear();
  blocks.num_freed_blocks = 0;
}

std::unique_ptr<GroupBlockManager> make_group_block_manager(const KvCacheSpec& spec,
                                                            int64_t num_blocks) {
  switch (spec.kind) {
    case KvSpecKind::kFullAttention:
    case KvSpecKind::kMla:
      return std::make_unique<FullAttentionManager>(spec, num_blocks);
    case KvSpecKind::kSlidingWindow:
      return std::make_unique<SlidingWindowManager>(spec, num_blocks);
    case KvSpecKind::kChunkedLocal:
      return std::make_unique<ChunkedLocalManager>(spec, num_blocks);
  }
  throw ConfigError("kind", str_cat(static_cast<int>(spec.kind)),
                    "must be full_attention, sliding_window, chunked_local or mla");
}

// ---------------------------------------------------------------------------------------------
// AllocationResult

std::string AllocationResult::to_string() const {
  if (ok) return "AllocationResult(ok)";
  return str_cat("AllocationResult(out of blocks: group ", group_id, " needs ", blocks_needed,
                 " new blocks, ", blocks_free, " free)");
}

// ---------------------------------------------------------------------------------------------
// KvCacheManager

KvCacheManager::KvCacheManager(const KvCacheConfig& config) : max_model_len_(config.max_model_len) {
  SPECDEC_CHECK(config.max_model_len >= 1, "max_model_len", config.max_model_len, "must be >= 1");
  groups_.reserve(config.groups.size());
  for (const KvCacheGroup& group : config.groups) {
    groups_.push_back(make_group_block_manager(group.spec, group.num_blocks));
  }
  empty_state_.groups.resize(groups_.size());
}

const KvCacheManager::RequestState& KvCacheManager::state_or_empty(
    const std::string& request_id) const {
  const auto it = requests_.find(request_id);
  return it == requests_.end() ? empty_state_ : it->second;
}

const KvCacheManager::RequestState& KvCacheManager::find_state(
    const std::string& request_id) const {
  const auto it = requests_.find(request_id);
  if (it == requests_.end()) throw_unknown_request(request_id);
  return it->second;
}

KvCacheManager::RequestState& KvCacheManager::find_state(const std::string& request_id) {
  const auto it = requests_.find(request_id);
  if (it == requests_.end()) throw_unknown_request(request_id);
  return it->second;
}

void KvCacheManager::check_group_id(int group_id) const {
  SPECDEC_CHECK(group_id >= 0 && group_id < num_groups(), "group_id", group_id,
               str_cat("must be in [0, ", num_groups(), ")"));
}

// num_tokens becomes the next query position: its window / chunk must not have been freed.
void KvCacheManager::check_window_intact(const RequestState& state, int64_t num_tokens,
                                         const char* field) const {
  for (size_t g = 0; g < groups_.size(); ++g) {
    const GroupBlockManager& group = *groups_[g];
    const int64_t num_freed = state.groups[g].num_freed_blocks;
    if (num_freed > group.num_skipped_blocks(num_tokens)) {
      throw ConfigError(field, str_cat(num_tokens),
                        str_cat("group ", g, " (", kind_name(group.spec().kind),
                                ") already freed the first ", num_freed * group.block_size(),
                                " tokens, which a query at this position still attends to; "
                                "free the request and recompute it instead"));
    }
  }
}

void KvCacheManager::check_allocation_args(const RequestState& state, int64_t num_computed_tokens,
                                           int64_t num_new_tokens) const {
  SPECDEC_CHECK(num_computed_tokens >= 0, "num_computed_tokens", num_computed_tokens,
               "must be >= 0");
  SPECDEC_CHECK(num_new_tokens >= 0, "num_new_tokens", num_new_tokens, "must be >= 0");
  SPECDEC_CHECK(
      num_computed_tokens <= state.num_slot_tokens, "num_computed_tokens", num_computed_tokens,
      str_cat("must be <= the ", state.num_slot_tokens, " tokens of this request that have slots"));
  if (num_new_tokens > max_model_len_ - num_computed_tokens) {
    throw ConfigError("num_computed_tokens + num_new_tokens",
                      str_cat(num_computed_tokens, " + ", num_new_tokens),
                      str_cat("must be <= max_model_len (", max_model_len_, ")"));
  }
  check_window_intact(state, num_computed_tokens, "num_computed_tokens");
}

AllocationResult KvCacheManager::find_shortfall(const RequestState& state,
                                                int64_t num_computed_tokens,
                                                int64_t num_tokens) const {
  for (size_t g = 0; g < groups_.size(); ++g) {
    const GroupBlockManager& group = *groups_[g];
    const GroupBlocks& blocks = state.groups[g];
    const int64_t needed = group.num_new_blocks(blocks, num_tokens);
    const int64_t available =
        group.pool().num_free_blocks() + group.num_reclaimable_blocks(blocks, num_computed_tokens);
    if (needed > available) {
      return AllocationResult{false, static_cast<int>(g), needed, available};
    }
  }
  return AllocationResult{};
}

namespace {
int64_t free_point(int64_t num_computed_tokens, int64_t num_committed_tokens) {
  SPECDEC_CHECK(num_committed_tokens >= -1, "num_committed_tokens", num_committed_tokens,
               "-1 (all computed tokens are committed) or a count >= 0");
  return num_committed_tokens < 0 ? num_computed_tokens
                                  : std::min(num_computed_tokens, num_committed_tokens);
}
}  // namespace

AllocationResult KvCacheManager::allocate_slots(const std::string& request_id,
                                                int64_t num_computed_tokens,
                                                int64_t num_new_tokens,
                                                int64_t num_committed_tokens) {
  auto it = requests_.find(request_id);
  const RequestState& current = it == requests_.end() ? empty_state_ : it->second;
  check_allocation_args(current, num_computed_tokens, num_new_tokens);
  const int64_t num_tokens = num_computed_tokens + num_new_tokens;
  const int64_t committed = free_point(num_computed_tokens, num_committed_tokens);
  const AllocationResult result = find_shortfall(current, committed, num_tokens);
  if (!result.ok) return result;

  if (it == requests_.end()) {
    it = requests_.try_emplace(request_id).first;
    it->second.groups.resize(groups_.size());
  }
  RequestState& request = it->second;
  for (size_t g = 0; g < groups_.size(); ++g) {
    groups_[g]->remove_skipped_blocks(request.groups[g], committed);
    groups_[g]->allocate(request.groups[g], num_tokens);
  }
  request.num_slot_tokens = std::max(request.num_slot_tokens, num_tokens);
  return result;
}

int64_t KvCacheManager::num_blocks_needed(const std::string& request_id,
                                          int64_t num_computed_tokens, int64_t num_new_tokens,
                                          int group_id, int64_t num_committed_tokens) const {
  check_group_id(group_id);
  free_point(num_computed_tokens, num_committed_tokens);  // validates it; frees never add need
  const RequestState& current = state_or_empty(request_id);
  check_allocation_args(current, num_computed_tokens, num_new_tokens);
  return groups_[group_id]->num_new_blocks(current.groups[group_id],
                                           num_computed_tokens + num_new_tokens);
}

int64_t KvCacheManager::num_reclaimable_blocks(const std::string& request_id,
                                              int64_t num_computed_tokens, int group_id) const {
  check_group_id(group_id);
  const RequestState& current = state_or_empty(request_id);
  return groups_[group_id]->num_reclaimable_blocks(current.groups[group_id], num_computed_tokens);
}

bool KvCacheManager::can_allocate(const std::string& request_id, int64_t num_computed_tokens,
                                  int64_t num_new_tokens) const {
  const RequestState& current = state_or_empty(request_id);
  check_allocation_args(current, num_computed_tokens, num_new_tokens);
  return find_shortfall(current, num_computed_tokens, num_computed_tokens + num_new_tokens).ok;
}

void KvCacheManager::truncate(const std::string& request_id, int64_t num_tokens) {
  RequestState& request = find_state(request_id);
  SPECDEC_CHECK(num_tokens >= 0 && num_tokens <= request.num_slot_tokens, "num_tokens", num_tokens,
               str_cat("must be in [0, ", request.num_slot_tokens,
                       "] (the tokens of this request that have slots)"));
  check_window_intact(request, num_tokens, "num_tokens");
  for (size_t g = 0; g < groups_.size(); ++g) groups_[g]->truncate(request.groups[g], num_tokens);
  request.num_slot_tokens = num_tokens;
}

void KvCacheManager::free(const std::string& request_id) {
  const auto it = requests_.find(request_id);
  if (it == requests_.end()) throw_unknown_request(request_id);
  for (size_t g = 0; g < groups_.size(); ++g) groups_[g]->free(it->second.groups[g]);
  requests_.erase(it);
}

const std::vector<int32_t>& KvCacheManager::block_table(const std::string& request_id,
                                                        int group_id) const {
  check_group_id(group_id);
  return find_state(request_id).groups[group_id].block_ids;
}

int64_t KvCacheManager::num_freed_blocks(const std::string& request_id, int group_id) const {
  check_group_id(group_id);
  return find_state(request_id).groups[group_id].num_freed_blocks;
}

int64_t KvCacheManager::num_slot_tokens(const std::string& request_id) const {
  return find_state(request_id).num_slot_tokens;
}

int64_t KvCacheManager::num_free_blocks(int group_id) const {
  check_group_id(group_id);
  return groups_[group_id]->pool().num_free_blocks();
}

int64_t KvCacheManager::capacity(int group_id) const {
  check_group_id(group_id);
  return groups_[group_id]->pool().capacity();
}

double KvCacheManager::usage() const {
  int64_t num_used = 0;
  int64_t num_usable = 0;
  for (const auto& group : groups_) {
    num_used += group->pool().num_used_blocks();
    num_usable += group->pool().capacity();
  }
  return num_usable == 0 ? 0.0 : static_cast<double>(num_used) / static_cast<double>(num_usable);
}

const GroupBlockManager& KvCacheManager::group(int group_id) const {
  check_group_id(group_id);
  return *groups_[group_id];
}

}  // namespace specdec::kv
