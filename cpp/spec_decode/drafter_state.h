// What proposers that run a model (draft_model, layer_skip, and later dflash) share: the
// bookkeeping of one runner's requests as a drafter sees them, and turning a logit row into a
// draft token.
//
// DrafterRequests keeps, per request, the token ids the runner's cache holds (the runner keeps
// the length, ModelRunner::num_cached_tokens: one place per model). A call of a proposer
// reconciles each request with its new context (the longest common prefix stays, the rest is
// rolled back), reserves the KV blocks its drafting steps will take across all requests of the
// call (so that no step runs out of blocks halfway), records what each step wrote, and rolls back
// positions that must not stay (a layer-skip draft's partial K/V). With `owns_requests` false the
// runner's requests belong to someone else (layer_skip drafts in the target's own cache): they
// are only ever rolled back to where they were, never freed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "runner/model_runner.h"
#include "spec_decode/proposer.h"

namespace specdec::spec_decode {

// *r, or a ConfigError naming `what` when r is null (a proposer built without its runner).
runner::ModelRunner& require_runner(const std::shared_ptr<runner::ModelRunner>& r, const char* what);

class DrafterRequests {
 public:
  DrafterRequests(runner::ModelRunner& runner, bool owns_requests) : runner_(runner), owns_(owns_requests) {}

  // The tokens of `context` the runner already holds for the request, at most `max_keep`; what it
  // holds past that is rolled back (a request it owns that keeps nothing is freed).
  int64_t reconcile(const std::string& request_id, const std::vector<int32_t>& context, int64_t max_keep);
  // Starts a call: the free blocks per group, against which reserve() counts.
  void begin();
  // Reserves the blocks a request's `num_new` tokens after `num_computed` take (`num_committed`:
  // see StepRequest); false, reserving nothing, when they do not fit beside this call's others.
  bool reserve(const std::string& request_id, int64_t num_computed, int64_t num_new, int64_t num_committed = -1);
  // A step wrote `tokens` for the request after what it held.
  void appended(const std::string& request_id, const std::vector<int32_t>& tokens);
  void appended(const std::string& request_id, int32_t token) { appended(request_id, std::vector<int32_t>{token}); }
  // Rolls the request back to `length` tokens (runner and mirror).
  void truncate(const std::string& request_id, int64_t length);
  // The request ended: its blocks back (when owned) and its mirror dropped.
  void finish(const std::string& request_id);
  const std::vector<int32_t>& tokens(const std::string& request_id) { return held_[request_id]; }
  runner::ModelRunner& runner() { return runner_; }

 private:
  runner::ModelRunner& runner_;
  bool owns_;
  std::unordered_map<std::string, std::vector<int32_t>> held_;  // ids in the runner's cache
  std::vector<int64_t> free_, reserved_;
};

// The draft token from logit row `row` of `so` for request `r`, appended to `d`: the argmax for a
// greedy request, else a sample from the request's distribution over the target's `target_vocab`
// ids drawn by the race at the token's position (coupled with the target's draw there), whose
// probabilities are appended to d.probs for the rejection sampler (not for a coupled generator,
// whose verification does not need them). `column_token`
// maps a logit column to its token id (a reduced vocabulary; nullptr: column = id); columns whose
// id is not below target_vocab get probability 0. False when the draft ends here (a greedy token
// outside the target's vocabulary).
using ColumnToken = int32_t (*)(const void* ctx, int64_t column);
bool take_draft_token(Draft& d, const runner::StepOutput& so, int64_t row, int64_t target_vocab,
                      const ProposeRequest& r, ColumnToken column_token = nullptr,
                      const void* column_ctx = nullptr);

}  // namespace specdec::spec_decode
