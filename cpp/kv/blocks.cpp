#include "kv/blocks.h"

#include <algorithm>
#include <limits>
#include <span>
#include <unordered_map>
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
  refs_.assign(static_cast<size_t>(num_blocks), 0);
  cached_.assign(static_cast<size_t>(num_blocks), 0);
  lru_prev_.assign(static_cast<size_t>(num_blocks), 0);
  lru_next_.assign(static_cast<size_t>(num_blocks), 0);
}

void BlockPool::lru_push(int32_t id) {  // at the tail (most recently freed)
  const int32_t last = lru_prev_[0];
  lru_prev_[id] = last;
  lru_next_[id] = 0;
  lru_next_[last] = id;
  lru_prev_[0] = id;
  ++num_lru_;
}

void BlockPool::lru_remove(int32_t id) {
  lru_next_[lru_prev_[id]] = lru_next_[id];
  lru_prev_[lru_next_[id]] = lru_prev_[id];
  lru_prev_[id] = lru_next_[id] = 0;
  --num_lru_;
}

bool BlockPool::allocate(int64_t n, std::vector<int32_t>& out) {
  if (n < 0) throw std::logic_error(str_cat("BlockPool::allocate: negative count ", n));
  if (n > num_free_blocks()) return false;
  out.reserve(out.size() + static_cast<size_t>(n));  // the only step that may throw
  const int64_t ring_size = capacity();
  for (int64_t i = 0; i < n; ++i) {
    int32_t id;
    if (num_free_ > 0) {
      id = free_ring_[head_];
      head_ = head_ + 1 == ring_size ? 0 : head_ + 1;
      --num_free_;
    } else {  // evict the least recently freed cached block
      id = lru_next_[0];
      lru_remove(id);
      if (on_evict) on_evict(id);
      cached_[id] = 0;
    }
    refs_[id] = 1;
    out.push_back(id);
  }
  return true;
}

void BlockPool::free(std::span<const int32_t> ids) {
  // Count down first so that a bad id (or one freed more often than it is held) leaves the pool
  // unchanged.
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id == kNullBlockId) continue;
    if (id < 0 || id >= num_blocks_ || refs_[id] == 0) {
      for (size_t j = 0; j < i; ++j) {
        if (ids[j] != kNullBlockId) ++refs_[ids[j]];
      }
      throw std::logic_error(
          str_cat("BlockPool::free: block ", id,
                  id < 0 || id >= num_blocks_ ? " is out of range" : " is not in use",
                  " (double free?); pool of ", num_blocks_, " blocks"));
    }
    --refs_[id];
  }
  const int64_t ring_size = capacity();
  for (const int32_t id : ids) {
    if (id == kNullBlockId || refs_[id] != 0 || cached_[id]) continue;
    int64_t tail = head_ + num_free_;
    if (tail >= ring_size) tail -= ring_size;
    free_ring_[tail] = id;
    ++num_free_;
    refs_[id] = -1;  // pushed: an id listed twice goes in once
  }
  for (const int32_t id : ids) {
    if (id != kNullBlockId && refs_[id] < 0) refs_[id] = 0;
  }
  // cached blocks: a request's last blocks are evicted first (their prefixes are the rarest)
  for (size_t i = ids.size(); i-- > 0;) {
    const int32_t id = ids[i];
    if (id != kNullBlockId && refs_[id] == 0 && cached_[id] && lru_next_[id] == 0 && lru_prev_[0] != id) {
      lru_push(id);
    }
  }
}

void BlockPool::set_cached(int32_t id, bool cached) {
  if (id <= 0 || id >= num_blocks_ || refs_[id] == 0) {
    throw std::logic_error(str_cat("BlockPool::set_cached: block ", id, " is not in use"));
  }
  cached_[id] = cached ? 1 : 0;
}

void BlockPool::take_cached(int32_t id) {
  if (id <= 0 || id >= num_blocks_ || !cached_[id]) {
    throw std::logic_error(str_cat("BlockPool::take_cached: block ", id, " holds no cached prefix"));
  }
  if (refs_[id] == 0) lru_remove(id);
  ++refs_[id];
}

int64_t BlockPool::evict_free_cached() {
  int64_t n = 0;
  const int64_t ring_size = capacity();
  while (num_lru_ > 0) {
    const int32_t id = lru_next_[0];
    lru_remove(id);
    if (on_evict) on_evict(id);
    cached_[id] = 0;
    int64_t tail = head_ + num_free_;
    if (tail >= ring_size) tail -= ring_size;
    free_ring_[tail] = id;
    ++num_free_;
    ++n;
  }
  return n;
}

bool BlockPool::is_in_use(int32_t block_id) const {
  return block_id > 0 && block_id < num_blocks_ && refs_[block_id] != 0;
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

// The prefix chain: node = (parent node, the tokens of one full block), found through a hash of
// both and compared exactly. A node lives while a group holds a block for it or it has children;
// node ids are never reused, so a request's chain that outlived its nodes is seen to have.
struct KvCacheManager::PrefixChain {
  struct Node {
    int64_t parent = 0;             // 0: the root (the empty prefix)
    std::vector<int32_t> tokens;    // [block_size]
    std::vector<int32_t> blocks;    // [num_groups] the cached block per group (0: none)
    int64_t num_children = 0;
    uint64_t hash = 0;
  };
  std::unordered_map<int64_t, Node> nodes;
  std::unordered_multimap<uint64_t, int64_t> children;  // hash(parent, tokens) -> node
  std::vector<std::vector<int64_t>> block_node;         // [group][block id] node (0: none)
  int64_t next_id = 1;

  static uint64_t hash_of(int64_t parent, std::span<const int32_t> tokens) {
    auto mix = [](uint64_t x) {
      x ^= x >> 30;
      x *= 0xbf58476d1ce4e5b9ULL;
      x ^= x >> 27;
      x *= 0x94d049bb133111ebULL;
      return x ^ (x >> 31);
    };
    uint64_t h = mix(static_cast<uint64_t>(parent) + 0x9e3779b97f4a7c15ULL);
    for (const int32_t t : tokens) h = mix(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(t)) + 0x632be59bd9b4e019ULL));
    return h;
  }
  int64_t find(int64_t parent, std::span<const int32_t> tokens) const {
    const uint64_t h = hash_of(parent, tokens);
    const auto [lo, hi] = children.equal_range(h);
    for (auto it = lo; it != hi; ++it) {
      const Node& n = nodes.at(it->second);
      if (n.parent == parent && std::equal(n.tokens.begin(), n.tokens.end(), tokens.begin(), tokens.end())) {
        return it->second;
      }
    }
    return 0;
  }
  int64_t find_or_add(int64_t parent, std::span<const int32_t> tokens, size_t num_groups) {
    if (const int64_t id = find(parent, tokens)) return id;
    if (parent != 0 && !nodes.contains(parent)) return 0;  // the parent was pruned
    const int64_t id = next_id++;
    Node& n = nodes[id];
    n.parent = parent;
    n.tokens.assign(tokens.begin(), tokens.end());
    n.blocks.assign(num_groups, kNullBlockId);
    n.hash = hash_of(parent, tokens);
    children.emplace(n.hash, id);
    if (parent != 0) ++nodes.at(parent).num_children;
    return id;
  }
  // Drops nodes that hold no block and have no children, walking up.
  void prune(int64_t id) {
    while (id != 0) {
      auto it = nodes.find(id);
      if (it == nodes.end()) return;
      Node& n = it->second;
      if (n.num_children > 0) return;
      for (const int32_t b : n.blocks) {
        if (b != kNullBlockId) return;
      }
      const auto [lo, hi] = children.equal_range(n.hash);
      for (auto c = lo; c != hi; ++c) {
        if (c->second == id) {
          children.erase(c);
          break;
        }
      }
      const int64_t parent = n.parent;
      nodes.erase(it);
      if (parent != 0) --nodes.at(parent).num_children;
      id = parent;
    }
  }
};

KvCacheManager::KvCacheManager(const KvCacheConfig& config, bool enable_prefix_caching)
    : max_model_len_(config.max_model_len) {
  SPECDEC_CHECK(config.max_model_len >= 1, "max_model_len", config.max_model_len, "must be >= 1");
  groups_.reserve(config.groups.size());
  for (const KvCacheGroup& group : config.groups) {
    groups_.push_back(make_group_block_manager(group.spec, group.num_blocks));
  }
  empty_state_.groups.resize(groups_.size());
  bool same_block_size = !groups_.empty();
  for (const auto& g : groups_) same_block_size = same_block_size && g->block_size() == groups_[0]->block_size();
  if (enable_prefix_caching && same_block_size) {
    prefix_ = std::make_unique<PrefixChain>();
    prefix_->block_node.resize(groups_.size());
    for (size_t g = 0; g < groups_.size(); ++g) {
      prefix_->block_node[g].assign(static_cast<size_t>(groups_[g]->pool().num_blocks()), 0);
      groups_[g]->pool().on_evict = [this, g](int32_t block) { uncache_block(static_cast<int>(g), block); };
    }
  }
}

KvCacheManager::~KvCacheManager() = default;

void KvCacheManager::uncache_block(int group_id, int32_t block) {
  int64_t& node = prefix_->block_node[static_cast<size_t>(group_id)][static_cast<size_t>(block)];
  const int64_t id = node;
  node = 0;
  auto it = prefix_->nodes.find(id);
  if (it == prefix_->nodes.end()) return;
  it->second.blocks[static_cast<size_t>(group_id)] = kNullBlockId;
  prefix_->prune(id);
}

int64_t KvCacheManager::claim_prefix(const std::string& request_id, std::span<const int32_t> tokens,
                                     int64_t max_tokens) {
  if (!prefix_ || requests_.contains(request_id)) return 0;
  queries_ += static_cast<int64_t>(tokens.size());
  const int64_t bs = groups_[0]->block_size();
  const int64_t limit = std::min<int64_t>({max_tokens, static_cast<int64_t>(tokens.size()) - 1, max_model_len_});
  if (limit < bs) return 0;
  // the chain of the prompt's full blocks, as far as it is cached
  std::vector<int64_t> chain;
  for (int64_t j = 0; (j + 1) * bs <= limit; ++j) {
    const int64_t id = prefix_->find(chain.empty() ? 0 : chain.back(),
                                     tokens.subspan(static_cast<size_t>(j * bs), static_cast<size_t>(bs)));
    if (id == 0) break;
    chain.push_back(id);
  }
  // the longest prefix every group holds what its next query sees of
  int64_t m = static_cast<int64_t>(chain.size());
  for (; m > 0; --m) {
    bool ok = true;
    for (size_t g = 0; g < groups_.size() && ok; ++g) {
      for (int64_t j = groups_[g]->num_skipped_blocks(m * bs); j < m && ok; ++j) {
        ok = prefix_->nodes.at(chain[static_cast<size_t>(j)]).blocks[g] != kNullBlockId;
      }
    }
    if (ok) break;
  }
  if (m == 0) return 0;
  RequestState fresh;  // built whole, then inserted: nothing half-made if an allocation throws
  fresh.groups.resize(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    GroupBlocks& blocks = fresh.groups[g];
    const int64_t skipped = groups_[g]->num_skipped_blocks(m * bs);
    blocks.block_ids.assign(static_cast<size_t>(m), kNullBlockId);
    blocks.num_freed_blocks = skipped;
    for (int64_t j = skipped; j < m; ++j) {
      blocks.block_ids[static_cast<size_t>(j)] = prefix_->nodes.at(chain[static_cast<size_t>(j)]).blocks[g];
    }
  }
  fresh.tokens.assign(tokens.begin(), tokens.begin() + m * bs);
  fresh.chain.assign(chain.begin(), chain.begin() + m);
  RequestState& state = requests_.emplace(request_id, std::move(fresh)).first->second;
  for (size_t g = 0; g < groups_.size(); ++g) {  // no allocation from here on
    const GroupBlocks& blocks = state.groups[g];
    for (int64_t j = blocks.num_freed_blocks; j < m; ++j) {
      groups_[g]->pool().take_cached(blocks.block_ids[static_cast<size_t>(j)]);
    }
  }
  state.num_slot_tokens = m * bs;
  state.claim_queries = static_cast<int64_t>(tokens.size());
  state.claim_hits = m * bs;
  hits_ += m * bs;
  return m * bs;
}

void KvCacheManager::record_tokens(const std::string& request_id, int64_t num_computed_tokens,
                                   std::span<const int32_t> tokens, int64_t num_committed_tokens) {
  if (!prefix_) return;
  RequestState& state = find_state(request_id);
  if (!state.tokens_known) return;
  if (static_cast<int64_t>(state.tokens.size()) < num_computed_tokens) {
    state.tokens_known = false;  // positions written without their ids (a DFlash context)
    state.tokens.clear();
    return;
  }
  state.tokens.resize(static_cast<size_t>(num_computed_tokens));
  state.tokens.insert(state.tokens.end(), tokens.begin(), tokens.end());
  register_blocks(state, std::min<int64_t>(num_committed_tokens, static_cast<int64_t>(state.tokens.size())));
}

void KvCacheManager::register_blocks(RequestState& state, int64_t num_committed_tokens) {
  const int64_t bs = groups_[0]->block_size();
  for (int64_t j = static_cast<int64_t>(state.chain.size()); (j + 1) * bs <= num_committed_tokens; ++j) {
    const int64_t parent = j == 0 ? 0 : state.chain.back();
    const int64_t id = prefix_->find_or_add(
        parent, std::span<const int32_t>(state.tokens).subspan(static_cast<size_t>(j * bs), static_cast<size_t>(bs)),
        groups_.size());
    if (id == 0) return;  // the chain's earlier node was evicted and pruned: nothing more to add
    state.chain.push_back(id);
    PrefixChain::Node& node = prefix_->nodes.at(id);
    for (size_t g = 0; g < groups_.size(); ++g) {
      const GroupBlocks& blocks = state.groups[g];
      if (j >= static_cast<int64_t>(blocks.block_ids.size())) continue;
      const int32_t b = blocks.block_ids[static_cast<size_t>(j)];
      BlockPool& pool = groups_[g]->pool();
      if (b == kNullBlockId || node.blocks[g] != kNullBlockId || pool.is_cached(b)) continue;
      node.blocks[g] = b;
      prefix_->block_node[g][static_cast<size_t>(b)] = id;
      pool.set_cached(b, true);
    }
  }
}

void KvCacheManager::unclaim_prefix(const std::string& request_id) {
  RequestState& state = find_state(request_id);
  queries_ -= state.claim_queries;
  hits_ -= state.claim_hits;
  free(request_id);
}

int64_t KvCacheManager::reset_prefix_cache() {
  int64_t n = 0;
  if (!prefix_) return 0;
  for (auto& g : groups_) n += g->pool().evict_free_cached();
  return n;
}

int64_t KvCacheManager::num_cached_blocks(int group_id) const {
  check_group_id(group_id);
  if (!prefix_) return 0;
  int64_t n = 0;
  for (const int64_t node : prefix_->block_node[static_cast<size_t>(group_id)]) n += node != 0;
  return n;
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
  if (prefix_) {  // the block num_tokens ends inside will be written again: it leaves the cache
    const int64_t bs = groups_[0]->block_size();
    const int64_t j = num_tokens / bs;
    if (num_tokens % bs != 0) {
      for (size_t g = 0; g < groups_.size(); ++g) {
        const auto& ids = request.groups[g].block_ids;
        if (j >= static_cast<int64_t>(ids.size())) continue;
        const int32_t b = ids[static_cast<size_t>(j)];
        if (b == kNullBlockId || !groups_[g]->pool().is_cached(b)) continue;
        if (groups_[g]->pool().ref_count(b) > 1) {
          throw ConfigError("num_tokens", str_cat(num_tokens),
                            str_cat("a block boundary (a multiple of ", bs, ") or past ", (j + 1) * bs,
                                    ": tokens [", j * bs, ", ", (j + 1) * bs,
                                    ") are a cached prefix block shared with another request"));
        }
      }
      for (size_t g = 0; g < groups_.size(); ++g) {
        const auto& ids = request.groups[g].block_ids;
        if (j >= static_cast<int64_t>(ids.size())) continue;
        const int32_t b = ids[static_cast<size_t>(j)];
        if (b == kNullBlockId || !groups_[g]->pool().is_cached(b)) continue;
        uncache_block(static_cast<int>(g), b);
        groups_[g]->pool().set_cached(b, false);
      }
    }
    if (static_cast<int64_t>(request.tokens.size()) > num_tokens) request.tokens.resize(static_cast<size_t>(num_tokens));
    if (static_cast<int64_t>(request.chain.size()) > j) request.chain.resize(static_cast<size_t>(j));
  }
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
