#pragma once
// The KV blocks one scheduler step reserves, per KV-cache group, against the runner's free blocks:
// the scheduler asks `take` for each request it adds to the step (and `largest_chunk` for a prefill
// chunk) instead of summing block counts itself. A request's need is the runner's
// num_blocks_needed (net of what its own sliding window gives back), so sums over requests are an
// upper bound and the step never runs out of blocks it counted on.
#include <cstdint>
#include <string>
#include <vector>

namespace specdec::runner {

class ModelRunner;

class StepBlockBudget {
 public:
  explicit StepBlockBudget(const ModelRunner& runner);

  // Free blocks read again (after a preemption gave some back or a prefix claim took some).
  void refresh();
  // More reserved than free in some group (a prefix claim took cached free blocks the step
  // counted on).
  bool overdrawn() const;
  // Reserves the blocks of the next n tokens of a request with num_computed tokens cached; false
  // (nothing reserved) when they do not fit.
  bool take(const std::string& request_id, int64_t num_computed, int64_t n);
  // The most of the next n tokens whose blocks fit (0 if none); reserves nothing.
  int64_t largest_chunk(const std::string& request_id, int64_t num_computed, int64_t n) const;

  const std::vector<int64_t>& free() const { return free_; }
  const std::vector<int64_t>& reserved() const { return reserved_; }

 private:
  bool fits(const std::vector<int64_t>& need) const;

  const ModelRunner& runner_;
  std::vector<int64_t> free_, reserved_;
};

}  // namespace specdec::runner
