// KV-cache block allocation: one BlockPool per KV-cache group, one GroupBlockManager per group
// (full / MLA keep every block; sliding window and chunked local free blocks the next query can
// no longer see), and KvCacheManager, which keeps every request's block tables across groups.
//
// Block id 0 of every pool is the null block: never handed out; freed window / chunk entries of a
// block table point at it. Entry j of a table covers token positions [j*block_size,
// (j+1)*block_size). The engine calls allocate_slots once per request per step, truncate after
// speculative rejection, and free when the request ends.
//
// Automatic prefix caching (vLLM's, made exact): a full block whose tokens can no longer be
// rolled back is registered under its place in a prefix chain: its parent (the chain entry of
// the block before it) and its own tokens, looked up through a hash of both and compared exactly,
// so no hash collision can hand out a wrong block. A later request whose prompt walks the same
// chain takes those blocks (claim_prefix) in every group: full / MLA groups need every block of
// the prefix, sliding-window and chunked-local groups only those their next query still sees.
// Blocks are reference-counted; a cached block whose last user ends stays in an LRU list of free
// blocks and keeps its contents until a new allocation evicts it (uncached free blocks go first).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/config.h"
#include "kv/spec.h"

namespace specdec::kv {

inline constexpr int32_t kNullBlockId = 0;

// Fixed set of blocks [0, num_blocks) of one group, reference-counted. Free blocks are handed out
// in FIFO order; free blocks that hold a cached prefix (set_cached) wait in an LRU list and are
// handed out only when no other free block is left (evicting them: on_evict is told first).
class BlockPool {
 public:
  // num_blocks includes the null block: must be in [2, 2^31 - 1] (ConfigError naming num_blocks).
  explicit BlockPool(int64_t num_blocks);

  // Appends n free block ids to out, or returns false and changes nothing (pool or out).
  bool allocate(int64_t n, std::vector<int32_t>& out);
  // Drops one reference of each block; a block with none left is free again (a cached one at the
  // tail of the LRU list, the last id of `ids` first). Null ids are ignored. Freeing a block
  // that is not in use (or an id out of range) is an internal invariant violation:
  // std::logic_error naming the id, and the pool is left as it was.
  void free(std::span<const int32_t> ids);
  void free(const std::vector<int32_t>& ids) { free(std::span<const int32_t>(ids)); }

  // Prefix caching: marks an in-use block as holding a cached prefix (or no longer).
  void set_cached(int32_t block_id, bool cached);
  bool is_cached(int32_t block_id) const { return cached_[static_cast<size_t>(block_id)] != 0; }
  // One more reference to a cached block (taken off the LRU list when it was free).
  void take_cached(int32_t block_id);
  // Evicts every free cached block (on_evict for each); returns how many.
  int64_t evict_free_cached();
  // Called with a cached block's id just before an allocation (or evict_free_cached) reuses it.
  std::function<void(int32_t)> on_evict;

  bool is_in_use(int32_t block_id) const;
  int32_t ref_count(int32_t block_id) const { return refs_[static_cast<size_t>(block_id)]; }
  int64_t num_free_blocks() const { return num_free_ + num_lru_; }  // evictable cached included
  int64_t num_free_cached_blocks() const { return num_lru_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t capacity() const { return num_blocks_ - 1; }  // usable blocks (null block excluded)
  int64_t num_used_blocks() const { return capacity() - num_free_blocks(); }

 private:
  void lru_push(int32_t id);
  void lru_remove(int32_t id);

  int64_t num_blocks_;
  std::vector<int32_t> free_ring_;  // [capacity] FIFO ring of free uncached ids
  int64_t head_ = 0;                // index of the oldest free id in free_ring_
  int64_t num_free_ = 0;
  std::vector<int32_t> refs_;      // [num_blocks] references (0: free)
  std::vector<uint8_t> cached_;    // [num_blocks] holds a cached prefix block
  std::vector<int32_t> lru_prev_, lru_next_;  // [num_blocks] list of free cached ids; 0 = sentinel
  int64_t num_lru_ = 0;
};

// One request's blocks in one group.
struct GroupBlocks {
  std::vector<int32_t> block_ids;  // [num_entries] block table; leading freed entries are 0
  int64_t num_freed_blocks = 0;    // leading entries already returned to the pool
};

// Per-group policy over one pool. The only kind-specific part is which leading tokens a query at
// position num_computed_tokens can no longer see; everything else is shared.
class GroupBlockManager {
 public:
  GroupBlockManager(const KvCacheSpec& spec, int64_t num_blocks);
  virtual ~GroupBlockManager() = default;
  GroupBlockManager(const GroupBlockManager&) = delete;
  GroupBlockManager& operator=(const GroupBlockManager&) = delete;

  // Leading tokens invisible to every query at position >= num_computed_tokens
  // (full / MLA: 0; sliding window: c - window + 1; chunked local: start of c's chunk).
  virtual int64_t num_skipped_tokens(int64_t num_computed_tokens) const = 0;
  // Leading blocks whose every position is skipped.
  int64_t num_skipped_blocks(int64_t num_computed_tokens) const {
    return num_skipped_tokens(num_computed_tokens) / block_size();
  }
  // Blocks remove_skipped_blocks(blocks, num_computed_tokens) would return to the pool.
  int64_t num_reclaimable_blocks(const GroupBlocks& blocks, int64_t num_computed_tokens) const;
  // Blocks allocate(blocks, num_tokens) would take from the pool.
  int64_t num_new_blocks(const GroupBlocks& blocks, int64_t num_tokens) const;

  // Frees the skipped leading blocks and points their entries at the null block.
  void remove_skipped_blocks(GroupBlocks& blocks, int64_t num_computed_tokens);
  // Grows the table to cdiv(num_tokens, block_size) entries (never shrinks). The caller checks
  // num_new_blocks against the pool first; a shortfall here is a std::logic_error.
  void allocate(GroupBlocks& blocks, int64_t num_tokens);
  // Keeps cdiv(num_tokens, block_size) entries and frees the rest (caller validated num_tokens).
  void truncate(GroupBlocks& blocks, int64_t num_tokens);
  // Returns every block of the request.
  void free(GroupBlocks& blocks);

  const KvCacheSpec& spec() const { return spec_; }
  int block_size() const { return spec_.block_size; }
  const BlockPool& pool() const { return pool_; }
  BlockPool& pool() { return pool_; }

 private:
  KvCacheSpec spec_;
  BlockPool pool_;
};

// Picks the implementation for spec.kind (MLA behaves as full attention).
std::unique_ptr<GroupBlockManager> make_group_block_manager(const KvCacheSpec& spec,
                                                            int64_t num_blocks);

// Outcome of KvCacheManager::allocate_slots. Running out of blocks is a result for the
// scheduler (wait or preempt), not an exception.
struct AllocationResult {
  bool ok = true;
  int group_id = -1;          // first group that is short (ok == false), else -1
  int64_t blocks_needed = 0;  // new blocks that group needed
  int64_t blocks_free = 0;    // blocks it had: free list + this request's reclaimable blocks
  std::string to_string() const;
};

// Block tables of all requests over all groups of one KvCacheConfig.
class KvCacheManager {
 public:
  // One pool per group of group.num_blocks blocks. ConfigError for a bad spec, num_blocks < 2 or
  // max_model_len < 1. enable_prefix_caching: see the top of this file (it stays off when the
  // groups' block sizes differ: prefix_caching() says whether it is on).
  explicit KvCacheManager(const KvCacheConfig& config, bool enable_prefix_caching = false);
  ~KvCacheManager();
  KvCacheManager(const KvCacheManager&) = delete;
  KvCacheManager& operator=(const KvCacheManager&) = delete;

  // ---- automatic prefix caching ----
  // A new request (unknown here) starts from the longest cached prefix of `tokens` that every
  // group holds, at most max_tokens and at most len(tokens) - 1 (the last token is always
  // computed: its logits are needed), in whole blocks. Its blocks are taken (shared) and the
  // request is created with that many tokens; returns the count (0: nothing cached, nothing
  // created). Counts len(tokens) queried tokens and the returned hit tokens.
  int64_t claim_prefix(const std::string& request_id, std::span<const int32_t> tokens,
                       int64_t max_tokens);
  // A step wrote `tokens` after num_computed_tokens (allocate_slots came first): remembers them,
  // and registers every full block below num_committed_tokens (they can no longer be rolled
  // back) in the prefix chain. A request whose earlier tokens were never told (a step that wrote
  // no token ids) registers nothing more.
  void record_tokens(const std::string& request_id, int64_t num_computed_tokens,
                     std::span<const int32_t> tokens, int64_t num_committed_tokens);
  // Undoes claim_prefix: frees the request (which no step may have grown since) and takes its
  // query and hit back out of the counts. ConfigError naming request_id when unknown.
  void unclaim_prefix(const std::string& request_id);
  // Evicts every cached block no request uses (vLLM's reset_prefix_cache); returns how many.
  int64_t reset_prefix_cache();
  bool prefix_caching() const { return prefix_ != nullptr; }
  int64_t prefix_cache_queries() const { return queries_; }  // prompt tokens looked up
  int64_t prefix_cache_hits() const { return hits_; }        // of those, found cached
  int64_t num_cached_blocks(int group_id) const;             // blocks holding a cached prefix

  // Frees the blocks the query at num_computed_tokens can no longer see, then grows every group's
  // table to cover num_computed_tokens + num_new_tokens tokens. All or nothing: when a group is
  // short, nothing changes in any group and the result names the group. The first call creates
  // the request. ConfigError for a negative count, num_computed_tokens above the tokens that have
  // slots or below the start of the still-allocated window, or a total above max_model_len.
  //
  // num_committed_tokens (speculative decoding): the tokens that can no longer be rolled back;
  // window / chunk blocks are freed only as seen from there (-1: num_computed_tokens), so a later
  // truncate back to num_committed_tokens still finds its window. A drafter passes the accepted
  // length while it decodes draft tokens past it.
  AllocationResult allocate_slots(const std::string& request_id, int64_t num_computed_tokens,
                                  int64_t num_new_tokens, int64_t num_committed_tokens = -1);
  // New blocks allocate_slots would take from group_id's pool (after window freeing). An unknown
  // request counts as a new one.
  int64_t num_blocks_needed(const std::string& request_id, int64_t num_computed_tokens,
                            int64_t num_new_tokens, int group_id,
                            int64_t num_committed_tokens = -1) const;
  bool can_allocate(const std::string& request_id, int64_t num_computed_tokens,
                    int64_t num_new_tokens) const;
  // Blocks of the request that fell out of group_id's window by num_computed_tokens and that
  // allocate_slots gives back before taking new ones (0 for full attention and unknown requests).
  int64_t num_reclaimable_blocks(const std::string& request_id, int64_t num_computed_tokens,
                                 int group_id) const;

  // Speculative rollback: num_tokens becomes the request's length; keeps cdiv(num_tokens,
  // block_size) entries per group and frees the rest. ConfigError when num_tokens exceeds the
  // tokens that have slots, or when the window / chunk of a query at num_tokens was already freed,
  // or when num_tokens ends inside a cached block another request shares (its next tokens would
  // overwrite that request's prefix: roll back to the block's start instead).
  void truncate(const std::string& request_id, int64_t num_tokens);
  // Request end: returns all its blocks. ConfigError naming request_id when unknown.
  void free(const std::string& request_id);

  // [cdiv(num_slot_tokens, block_size)] block ids; leading freed entries are kNullBlockId.
  const std::vector<int32_t>& block_table(const std::string& request_id, int group_id) const;
  int64_t num_freed_blocks(const std::string& request_id, int group_id) const;
  // Tokens of the request that have a slot (the most allocated since the last truncate).
  int64_t num_slot_tokens(const std::string& request_id) const;

  int64_t num_free_blocks(int group_id) const;
  int64_t capacity(int group_id) const;
  double usage() const;  // used / usable blocks over all groups; 0 without groups
  size_t num_requests() const { return requests_.size(); }
  bool has_request(const std::string& request_id) const { return requests_.contains(request_id); }
  int num_groups() const { return static_cast<int>(groups_.size()); }
  const GroupBlockManager& group(int group_id) const;

 private:
  struct RequestState {
    int64_t num_slot_tokens = 0;
    std::vector<GroupBlocks> groups;  // [num_groups]
    // prefix caching: the token ids written so far, and the chain entry of each registered block
    std::vector<int32_t> tokens;
    bool tokens_known = true;     // false once a step wrote positions without their ids
    std::vector<int64_t> chain;   // [registered full blocks] prefix-chain node ids
    int64_t claim_queries = 0, claim_hits = 0;  // what claim_prefix counted for it
  };
  struct PrefixChain;
  void register_blocks(RequestState& state, int64_t num_committed_tokens);
  void uncache_block(int group_id, int32_t block_id);

  const RequestState& state_or_empty(const std::string& request_id) const;
  // The request's state, or ConfigError naming request_id.
  const RequestState& find_state(const std::string& request_id) const;
  RequestState& find_state(const std::string& request_id);
  void check_group_id(int group_id) const;
  void check_allocation_args(const RequestState& state, int64_t num_computed_tokens,
                             int64_t num_new_tokens) const;
  void check_window_intact(const RequestState& state, int64_t num_tokens, const char* field) const;
  AllocationResult find_shortfall(const RequestState& state, int64_t num_computed_tokens,
                                  int64_t num_tokens) const;

  int64_t max_model_len_;
  std::vector<std::unique_ptr<GroupBlockManager>> groups_;  // [num_groups]
  std::unordered_map<std::string, RequestState> requests_;
  RequestState empty_state_;  // stands in for a request not seen yet
  std::unique_ptr<PrefixChain> prefix_;  // null: prefix caching off
  int64_t queries_ = 0, hits_ = 0;
};

}  // namespace specdec::kv
