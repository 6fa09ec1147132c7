#include "runner/request_table.h"

#include <algorithm>

#include "common/errors.h"

namespace specdec::runner {

int64_t RequestTable::length(const std::string& request_id) const {
  const auto it = lengths_.find(request_id);
  return it == lengths_.end() ? 0 : it->second;
}

void RequestTable::truncate(const std::string& request_id, int64_t num_tokens) {
  SPECDEC_CHECK(lengths_.contains(request_id), "request_id", request_id, "a running request");
  SPECDEC_CHECK(num_tokens >= 0 && num_tokens <= lengths_[request_id], "num_tokens", num_tokens,
               str_cat("in [0, ", lengths_[request_id], "] (the tokens in the cache)"));
  manager_.truncate(request_id, num_tokens);
  lengths_[request_id] = num_tokens;
  const auto it = partial_.find(request_id);
  if (it != partial_.end() && num_tokens <= it->second.from) partial_.erase(it);
}

void RequestTable::free(const std::string& request_id) {
  SPECDEC_CHECK(lengths_.contains(request_id), "request_id", request_id, "a running request");
  manager_.free(request_id);
  lengths_.erase(request_id);
  partial_.erase(request_id);
}

int64_t RequestTable::claim_prefix(const std::string& request_id, const std::vector<int32_t>& tokens,
                                   int64_t max_tokens) {
  if (lengths_.contains(request_id)) return 0;
  const int64_t hit = manager_.claim_prefix(request_id, tokens, max_tokens);
  if (hit > 0) lengths_[request_id] = hit;
  return hit;
}

void RequestTable::unclaim_prefix(const std::string& request_id) {
  if (!lengths_.contains(request_id)) return;
  manager_.unclaim_prefix(request_id);
  lengths_.erase(request_id);
  partial_.erase(request_id);
}

PrefixCacheStats RequestTable::prefix_cache_stats() const {
  PrefixCacheStats s;
  s.enabled = manager_.prefix_caching();
  s.queries = manager_.prefix_cache_queries();
  s.hits = manager_.prefix_cache_hits();
  for (int g = 0; g < manager_.num_groups(); ++g) s.cached_blocks.push_back(manager_.num_cached_blocks(g));
  return s;
}

std::vector<int64_t> RequestTable::num_blocks_needed(const std::string& request_id, int64_t num_computed,
                                                     int64_t num_new, int64_t num_committed) const {
  std::vector<int64_t> out;
  const int64_t freed_from = num_committed < 0 ? num_computed : std::min(num_computed, num_committed);
  for (int g = 0; g < manager_.num_groups(); ++g) {
    const int64_t gross = manager_.num_blocks_needed(request_id, num_computed, num_new, g, num_committed);
    const int64_t back = manager_.num_reclaimable_blocks(request_id, freed_from, g);
    out.push_back(std::max<int64_t>(0, gross - back));
  }
  return out;
}

std::vector<int64_t> RequestTable::num_free_blocks() const {
  std::vector<int64_t> out;
  for (int g = 0; g < manager_.num_groups(); ++g) out.push_back(manager_.num_free_blocks(g));
  return out;
}

void RequestTable::drop(const std::string& request_id) {
  if (manager_.has_request(request_id)) manager_.free(request_id);
  lengths_.erase(request_id);
  partial_.erase(request_id);
}

void RequestTable::roll_back(const std::string& request_id, int64_t num_tokens) {
  if (num_tokens == 0) {
    manager_.free(request_id);
    lengths_.erase(request_id);
  } else {
    manager_.truncate(request_id, num_tokens);
    lengths_[request_id] = num_tokens;
  }
  partial_.erase(request_id);
}

void RequestTable::check_exit(const std::vector<StepRequest>& requests, int exit) const {
  for (const auto& r : requests) {  // positions an early exit left without the deeper layers' K/V
    const auto it = partial_.find(r.request_id);
    if (it == partial_.end() || exit <= it->second.layers) continue;
    throw ConfigError(str_cat("request ", r.request_id, ".num_computed_tokens"), str_cat(r.num_computed_tokens),
                      str_cat("at most ", it->second.from, " for a step through ", exit,
                              " layers: an early-exit step through ", it->second.layers,
                              " layers wrote the positions after it (truncate them first)"));
  }
}

std::vector<attn::ScheduledRequest> RequestTable::allocate_slots(const std::vector<StepRequest>& requests) {
  std::vector<attn::ScheduledRequest> sched;
  for (const auto& r : requests) {
    const kv::AllocationResult a = manager_.allocate_slots(
        r.request_id, r.num_computed_tokens, static_cast<int64_t>(r.tokens.size()), r.num_committed_tokens);
    if (!a.ok) {
      for (const auto& done : sched) {
        if (done.num_computed_tokens == 0) manager_.free(done.request_id);
        else manager_.truncate(done.request_id, done.num_computed_tokens);
      }
      if (r.num_computed_tokens == 0 && manager_.has_request(r.request_id)) manager_.free(r.request_id);
      throw ConfigError("kv_cache", a.to_string(), "a step whose new tokens fit the free KV blocks "
                        "(finish or preempt requests, or give a larger kv_cache_memory_bytes)");
    }
    sched.push_back({r.request_id, r.num_computed_tokens, static_cast<int64_t>(r.tokens.size())});
  }
  return sched;
}

void RequestTable::commit_step(const std::vector<StepRequest>& requests, int exit, int num_layers) {
  for (const auto& r : requests) {
    lengths_[r.request_id] = r.num_computed_tokens + static_cast<int64_t>(r.tokens.size());
    // prefix caching: the positions before this step are final in a full step (the engine rolled
    // rejected ones back); an early exit's positions are partial, so it registers nothing
    const int64_t committed = exit < num_layers ? 0
        : r.num_committed_tokens < 0 ? r.num_computed_tokens
        : std::min(r.num_computed_tokens, r.num_committed_tokens);
    manager_.record_tokens(r.request_id, r.num_computed_tokens, r.tokens, committed);
    if (exit < num_layers) {
      auto [it, added] = partial_.try_emplace(r.request_id, Partial{r.num_computed_tokens, exit});
      if (!added) it->second.layers = std::min(it->second.layers, exit);
    }
  }
}

}  // namespace specdec::runner
