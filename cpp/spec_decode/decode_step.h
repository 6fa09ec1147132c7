// A decode / verify step of running requests, end to end in C++: the KV blocks of each request's
// 1 + k rows reserved (a draft that does not fit is dropped: the request decodes without one), the
// drafts proposed, the verifying forward run and its rows decided. The engine takes this path when
// nothing waits and every row fits the step's budgets (a drafting model's step); anything else
// (a prefill, a preemption) goes through the Python scheduler. The caller commits the decisions
// (StepVerifier::commit) where it may touch the requests' state.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "runner/model_runner.h"
#include "spec_decode/proposer.h"
#include "spec_decode/step_verifier.h"

namespace specdec::spec_decode {

struct DecodeRow {
  VerifyRequest* verify = nullptr;      // the request; its sequence's last token is the row's token
  const ProposeRequest* ask = nullptr;  // its draft to ask for (nullptr: a plain decode)
};

struct DecodeStep {
  std::vector<Draft> drafts;  // one per row (empty: verified without a draft)
  runner::StepOutput out;
  std::vector<VerifyItem> items;  // point into drafts: keep this object while they are used
  std::vector<VerifyResult> decided;
  double propose_seconds = 0, forward_seconds = 0;
  int64_t num_asked = 0;  // draft tokens asked of the proposer (drafts dropped for blocks not counted)
};

// Structured outputs (specdec.structured, through the binding): before the forward, each row's
// draft is cut to what its request's grammar allows (nothing verified past a forbidden token);
// after it, the logits of the rows of constrained requests are masked in place, before the rows
// are decided. Rows of requests without a constraint are left alone.
class StepConstraints {
 public:
  virtual ~StepConstraints() = default;
  // drafts[i]: row i's draft (empty: none); may shorten any of them.
  virtual void cut(std::vector<Draft>& drafts) = 0;
  // row_end[i]: one past row i's last logits row in out.logits (its 1 + k rows end there).
  virtual void mask(const std::vector<int64_t>& row_end, runner::StepOutput& out) = 0;
};

// nullopt (nothing run, nothing reserved): some request cannot get the KV blocks of even its one
// decode token; the scheduler preempts. Each row's sequence must end with its one token to compute
// (the request's cache holds all tokens before it).
std::optional<DecodeStep> run_decode_step(Proposer& proposer, runner::ModelRunner& runner,
                                          const StepVerifier& verifier, const std::vector<DecodeRow>& rows,
                                          bool return_logits, StepConstraints* constraints = nullptr);

}  // namespace specdec::spec_decode
