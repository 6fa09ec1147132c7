#include "spec_decode/decode_step.h"

#include <chrono>

#include "common/errors.h"
#include "runner/block_budget.h"

namespace specdec::spec_decode {

namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::optional<DecodeStep> run_decode_step(Proposer& proposer, runner::ModelRunner& runner,
                                          const StepVerifier& verifier, const std::vector<DecodeRow>& rows,
                                          bool return_logits, StepConstraints* constraints) {
  // the schedule: the blocks of 1 + k rows, or of the one decode row when the draft's do not fit
  runner::StepBlockBudget blocks(runner);
  std::vector<runner::StepRequest> reqs(rows.size());
  std::vector<ProposeRequest> asks;
  std::vector<size_t> row_of_ask;
  for (size_t i = 0; i < rows.size(); ++i) {
    const DecodeRow& row = rows[i];
    SPECDEC_CHECK(row.verify != nullptr && row.verify->sequence && row.verify->sequence->size() > 0,
                  str_cat("rows[", i, "]"), "a request without a sequence", "a VerifyRequest with tokens");
    const Sequence& seq = *row.verify->sequence;
    SPECDEC_CHECK(!row.ask || row.ask->sequence.get() == &seq, str_cat("asks[", i, "]"),
                  row.ask && row.ask->sequence ? row.ask->sequence->request_id() : "None",
                  str_cat("the ProposeRequest of ", seq.request_id(), " or None"));
    const int64_t done = seq.size() - 1;
    const int k = row.ask ? row.ask->num_speculative_tokens : 0;
    const bool drafted = k > 0 && blocks.take(seq.request_id(), done, 1 + k);
    if (!drafted && !blocks.take(seq.request_id(), done, 1)) return std::nullopt;
    runner::StepRequest& s = reqs[i];
    s.request_id = seq.request_id();
    s.tokens.reserve(1 + (drafted ? k : 0));
    s.tokens.push_back(seq.tokens().back());
    s.num_computed_tokens = done;
    s.num_logits = 1;
    if (drafted) {
      asks.push_back(*row.ask);
      row_of_ask.push_back(i);
    }
  }
  DecodeStep step;
  step.drafts.resize(rows.size());
  for (const ProposeRequest& a : asks) step.num_asked += a.num_speculative_tokens;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Draft> drafts = asks.empty() ? std::vector<Draft>{} : proposer.propose(asks);
  step.propose_seconds = since(t0);
  SPECDEC_CHECK(drafts.size() == asks.size(), "drafts", drafts.size(), str_cat(asks.size(), " (one per ask)"));
  for (size_t a = 0; a < asks.size(); ++a) {
    SPECDEC_CHECK(static_cast<int>(drafts[a].tokens.size()) <= asks[a].num_speculative_tokens, "draft length",
                  drafts[a].tokens.size(), str_cat("at most num_speculative_tokens = ", asks[a].num_speculative_tokens));
    step.drafts[row_of_ask[a]] = std::move(drafts[a]);
  }
  if (constraints != nullptr) constraints->cut(step.drafts);
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::vector<int32_t>& t = step.drafts[i].tokens;
    runner::StepRequest& s = reqs[i];
    s.tokens.insert(s.tokens.end(), t.begin(), t.end());
    s.num_logits += static_cast<int>(t.size());
  }
  const auto t1 = std::chrono::steady_clock::now();
  step.out = runner.step(reqs, {}, return_logits, 0);
  step.forward_seconds = since(t1);
  int64_t row_end = 0;
  std::vector<int64_t> ends(rows.size());
  step.items.reserve(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    row_end += reqs[i].num_logits;
    ends[i] = row_end;
    const Draft* d = step.drafts[i].tokens.empty() ? nullptr : &step.drafts[i];
    step.items.push_back(VerifyItem{rows[i].verify, d, row_end, reqs[i].num_computed_tokens});
  }
  if (constraints != nullptr) constraints->mask(ends, step.out);
  step.decided = verifier.decide(step.items, StepRows::of(step.out));
  return step;
}

}  // namespace specdec::spec_decode
