// WarmUp: ModelRunner::warm_up's throwaway steps: every kernel variant the runner's steps can
// launch, run once at load so that no request waits for a kernel build (OpenCL builds kernels at
// their first launch, PoCL a work-group function per local size).
#pragma once

#include <cstdint>
#include <string>

namespace specdec::runner {

class ModelRunner;

class WarmUp {
 public:
  // `runner`'s lock must be held while the warm-up runs.
  explicit WarmUp(ModelRunner& runner) : runner_(runner) {}

  // Decode, verify and prefill shapes, a decode far enough in for split-KV attention to split
  // and merge, and a DFlash drafter's context path; leaves no request behind.
  void run();

 private:
  // One throwaway request of `n` new tokens after `computed` positions whose K/V rows hold
  // whatever the cache holds (the results are discarded); skipped when its blocks do not fit.
  // Returns whether it ran.
  bool step(int64_t computed, int64_t n);
  // A DFlash drafter's context write of n zero rows, then the request ended.
  void write_context(int64_t n);

  ModelRunner& runner_;
  const std::string id_ = "\x01warm-up";  // no user's request id (those are printable)
};

}  // namespace specdec::runner
