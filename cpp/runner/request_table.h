// RequestTable: a runner's requests over its KV-cache manager: the tokens in the cache per
// request and the positions early-exit steps wrote with fewer layers, and the request calls of
// ModelRunner (truncate, free, claim_prefix, block counts) on them. Not locked itself: the
// runner's lock guards it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "attention/metadata.h"
#include "kv/blocks.h"
#include "runner/step_io.h"

namespace specdec::runner {

struct PrefixCacheStats {
  bool enabled = false;
  int64_t queries = 0, hits = 0;          // prompt tokens looked up, and found
  std::vector<int64_t> cached_blocks;     // per group
};

class RequestTable {
 public:
  // `manager` must outlive the table.
  explicit RequestTable(kv::KvCacheManager& manager) : manager_(manager) {}

  bool contains(const std::string& request_id) const { return lengths_.contains(request_id); }
  // Tokens in the cache (0: a request the table does not hold).
  int64_t length(const std::string& request_id) const;
  void set_length(const std::string& request_id, int64_t num_tokens) { lengths_[request_id] = num_tokens; }

  // ModelRunner's request calls (documented there).
  void truncate(const std::string& request_id, int64_t num_tokens);
  void free(const std::string& request_id);
  int64_t claim_prefix(const std::string& request_id, const std::vector<int32_t>& tokens, int64_t max_tokens);
  void unclaim_prefix(const std::string& request_id);
  int64_t reset_prefix_cache() { return manager_.reset_prefix_cache(); }
  PrefixCacheStats prefix_cache_stats() const;
  std::vector<int64_t> num_blocks_needed(const std::string& request_id, int64_t num_computed, int64_t num_new,
                                         int64_t num_committed) const;
  std::vector<int64_t> num_free_blocks() const;

  // Ends request_id and returns its blocks; a request the table does not hold is ignored.
  void drop(const std::string& request_id);
  // Rolls request_id back to num_tokens (ends it at 0), unchecked: a DFlash drafter's context
  // rewritten from a target step's rows.
  void roll_back(const std::string& request_id, int64_t num_tokens);

  // ConfigError when a step through `exit` layers would attend over positions an early-exit step
  // wrote with fewer layers.
  void check_exit(const std::vector<StepRequest>& requests, int exit) const;
  // Every request's slots in every KV-cache group; on a shortage this step's allocations are
  // undone and a ConfigError names the group.
  std::vector<attn::ScheduledRequest> allocate_slots(const std::vector<StepRequest>& requests);
  // After a step through `exit` of the model's `num_layers` layers: the new lengths, the tokens
  // for prefix caching (none after an early exit) and the early exit's partial positions.
  void commit_step(const std::vector<StepRequest>& requests, int exit, int num_layers);

 private:
  kv::KvCacheManager& manager_;
  std::map<std::string, int64_t> lengths_;  // tokens in the cache per request
  // Early-exit steps: from position `from` on, a request's cache holds K/V of the first `layers`
  // layers only (until truncated back to `from`).
  struct Partial {
    int64_t from = 0;
    int layers = 0;
  };
  std::map<std::string, Partial> partial_;
};

}  // namespace specdec::runner
