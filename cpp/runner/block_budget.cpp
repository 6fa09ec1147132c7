#include "runner/block_budget.h"

#include <stdexcept>

#include "runner/model_runner.h"

namespace specdec::runner {

StepBlockBudget::StepBlockBudget(const ModelRunner& runner)
    : runner_(runner), free_(runner.num_free_blocks()), reserved_(free_.size(), 0) {}

void StepBlockBudget::refresh() { free_ = runner_.num_free_blocks(); }

bool StepBlockBudget::overdrawn() const {
  for (size_t g = 0; g < free_.size(); ++g)
    if (reserved_[g] > free_[g]) return true;
  return false;
}

bool StepBlockBudget::fits(const std::vector<int64_t>& need) const {
  for (size_t g = 0; g < free_.size(); ++g)
    if (need[g] > free_[g] - reserved_[g]) return false;
  return true;
}

bool StepBlockBudget::take(const std::string& request_id, int64_t num_computed, int64_t n) {
  if (n < 0) throw std::invalid_argument("StepBlockBudget.take: n = " + std::to_string(n) + ": n >= 0 is allowed");
  const std::vector<int64_t> need = runner_.num_blocks_needed(request_id, num_computed, n);
  if (!fits(need)) return false;
  for (size_t g = 0; g < free_.size(); ++g) reserved_[g] += need[g];
  return true;
}

int64_t StepBlockBudget::largest_chunk(const std::string& request_id, int64_t num_computed, int64_t n) const {
  if (n < 0) throw std::invalid_argument("StepBlockBudget.largest_chunk: n = " + std::to_string(n) + ": n >= 0 is allowed");
  // the whole chunk first (the common case; an error then names the caller's n), then the largest
  // that fits by bisection: needs grow with the chunk
  if (fits(runner_.num_blocks_needed(request_id, num_computed, n))) return n;
  int64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (fits(runner_.num_blocks_needed(request_id, num_computed, mid))) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

}  // namespace specdec::runner
