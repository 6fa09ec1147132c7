// The verification of one engine step, for the whole batch in one call: per request, the accepted
// draft tokens and the recovered or bonus token (rejection.h), the request's and the engine's
// counters, adaptive k's acceptance, the rollback of the target's cache past the first rejection,
// the stop conditions that need no text (end of generation, stop token ids, max_tokens,
// max_model_len) and the tokens appended to the request's sequence. Python keeps the
// orchestration: scheduling, stop strings, logprobs, streaming, finishing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runner/model_runner.h"
#include "sampling/sampler.h"
#include "spec_decode/adaptive.h"
#include "spec_decode/metrics.h"
#include "spec_decode/proposer.h"
#include "spec_decode/rejection.h"
#include "spec_decode/sequence.h"

namespace specdec::spec_decode {

// What verification knows of a request for its whole life (built once, when it is added).
struct VerifyRequest {
  std::shared_ptr<Sequence> sequence;
  sampling::SamplingParams params;
  std::shared_ptr<sampling::Generator> generator;  // sampled requests
  bool on_argmax = true;  // greedy without logprobs: verified on the device's per-row argmax
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;
  int64_t max_tokens = -1;     // -1: none
  bool append = true;          // false: the caller appends (it checks stop strings per token)
  SpecDecodingStats stats;     // this request's counters
};

// One request of the step: rows [row_end - 1 - draft size, row_end) of the step's output verify
// it. num_computed: its tokens in the target's cache before the step (-1: the last chunk of a
// prefill, which has no draft and nothing to roll back).
struct VerifyItem {
  VerifyRequest* request = nullptr;
  const Draft* draft = nullptr;  // nullptr: no draft
  int64_t row_end = 0;
  int64_t num_computed = -1;
};

// A view of a step's output rows (runner::StepOutput's, or the arrays Python holds of it).
struct StepRows {
  int64_t num_rows = 0;
  int64_t vocab_size = 0;              // the width of a logits row
  const float* logits = nullptr;       // [num_logit_rows, vocab_size]
  int64_t num_logit_rows = 0;          // 0: the step ran without return_logits
  const int32_t* argmax = nullptr;     // [num_rows]
  const float* argmax_logprob = nullptr;  // [num_rows]
  static StepRows of(const runner::StepOutput& so) {
    const int64_t rows = static_cast<int64_t>(so.argmax.size());
    return {rows, so.vocab_size, so.logits.data(),
            so.vocab_size ? static_cast<int64_t>(so.logits.size()) / so.vocab_size : 0, so.argmax.data(),
            so.argmax_logprob.data()};
  }
};

enum class Finish : int32_t { kNone = 0, kEndOfGeneration = 1, kStopToken = 2, kLength = 3 };

struct VerifyOutcome {
  std::vector<int32_t> tokens;   // kept: cut after the first that finishes the request
  int num_accepted = 0;          // draft tokens accepted
  double argmax_logprob = 0.0;   // on_argmax requests: the sum of the kept tokens' logprobs
  Finish finish = Finish::kNone;
  int64_t num_computed = 0;      // the request's tokens in the target's cache after the step
};

class StepVerifier {
 public:
  // eog_ids: the target tokenizer's end-of-generation ids; adaptive may be null.
  StepVerifier(std::shared_ptr<runner::ModelRunner> target, std::vector<int32_t> eog_ids,
               int64_t max_model_len, std::shared_ptr<AdaptiveK> adaptive);

  std::vector<VerifyOutcome> verify(const std::vector<VerifyItem>& items, const StepRows& so) {
    return commit(items, decide(items, so), so);
  }
  // The two halves of verify: decide reads only the step's output and the requests' settings
  // (safe without the caller's lock: the sampled rows' work); commit updates counters, the
  // target's cache and the sequences.
  std::vector<VerifyResult> decide(const std::vector<VerifyItem>& items, const StepRows& so) const;
  std::vector<VerifyOutcome> commit(const std::vector<VerifyItem>& items, std::vector<VerifyResult> results,
                                    const StepRows& so);

  SpecDecodingStats& stats() { return stats_; }  // every request's counters added
  void reset_stats() { stats_ = SpecDecodingStats{}; }

 private:
  VerifyResult verify_one(const VerifyItem& item, const StepRows& so) const;
  void keep_until_finish(VerifyRequest& r, VerifyOutcome& out, const StepRows& so, int64_t row0) const;

  std::shared_ptr<runner::ModelRunner> target_;
  std::vector<int32_t> eog_ids_;  // sorted
  int64_t max_model_len_;
  std::shared_ptr<AdaptiveK> adaptive_;
  SpecDecodingStats stats_;
};

}  // namespace specdec::spec_decode
