// draft_model: a smaller model with its own ModelRunner (own KV-cache groups, block tables, slot
// mappings and attention backends, chosen independently of the target's) drafts k tokens per
// request: one catch-up step over the tokens it has not seen (the accepted ones; a whole prompt
// for a new request, chunked), then k - 1 batched single-token steps. The drafter's cache keeps
// what matches the request's tokens; the rest is rolled back at the next call. Draft tokens are
// uncommitted: the steps that compute them pass the accepted length as num_committed_tokens, so
// sliding-window blocks a rollback may still need are not freed early.
#pragma once

#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "runner/model_runner.h"
#include "spec_decode/drafter_state.h"
#include "spec_decode/proposer.h"
#include "tokenizer/tokenizer.h"

namespace specdec::spec_decode {

// llama.cpp's rule for a drafter's vocabulary (common_speculative_are_compatible): same tokenizer
// kind, same BOS/EOS and add-BOS/EOS flags, sizes within 128, and the same text for every token
// id from 5 up to the smaller size. ConfigError naming what differs.
void check_vocab_compatible(const tokenizer::Tokenizer& target, const tokenizer::Tokenizer& draft);

class DraftModelProposer final : public Proposer {
 public:
  // target_vocab_size: drafts and draft probabilities are over the target's ids (a drafter token
  // outside them ends the draft; when sampling, the drafter's extra ids get probability 0). A
  // drafter with a reduced vocabulary (RunnerOptions::logit_token_ids) drafts from those ids
  // only, grown by the tokens of the running requests' contexts (a prompt's own words, which a
  // frequency ranking misses; at most ModelRunner::kMaxExtraLogitTokens); the others get draft
  // probability 0, so rejection sampling stays exact.
  DraftModelProposer(std::shared_ptr<runner::ModelRunner> drafter, int64_t target_vocab_size);
  std::string name() const override { return "draft_model"; }
  bool drafts_full_length() const override { return true; }
  std::vector<Draft> propose(const std::vector<ProposeRequest>& requests) override;
  void finish(const Sequence& sequence) override;

  const std::shared_ptr<runner::ModelRunner>& drafter() const { return drafter_; }
  // Drafter forward steps run and tokens computed by them (catch-up + drafting), for metrics.
  int64_t num_steps() const { return num_steps_; }
  int64_t num_tokens() const { return num_tokens_; }

 private:
  struct State {
    int64_t last_context = -1;    // context length of the last draft, reused when unchanged
    Draft last_draft;
    size_t scanned = 0;            // context tokens looked at for the extra logit tokens
    std::unordered_set<int32_t> extra;  // its tokens outside the reduced vocabulary (in uses_)
  };
  // A reduced draft vocabulary: adds the context's tokens outside it to the extra logit tokens.
  void track_context(State& st, const std::vector<int32_t>& context);
  void sync_extra_tokens();
  int32_t column_token(int64_t column) const;
  static int32_t column_of(const void* self, int64_t column);
  // One request's share of a call: its index in the call, its context, the tokens the drafter
  // holds of it, the draft length, sampled or greedy.
  struct Work {
    size_t index;
    const ProposeRequest* request;
    const std::vector<int32_t>* context;
    int64_t computed;
    int k;
    bool sample;
  };
  std::vector<Work> plan(const std::vector<ProposeRequest>& requests, std::vector<Draft>& out);
  void catch_up(std::vector<Work>& work, std::vector<Draft>& out);
  void draft_steps(const std::vector<Work>& work, std::vector<Draft>& out);
  bool take(const Work& w, const runner::StepOutput& so, int64_t row, Draft& d) const;

  std::shared_ptr<runner::ModelRunner> drafter_;
  int64_t target_vocab_;
  DrafterRequests cache_;  // what the drafter's cache holds per request
  std::unordered_map<std::string, State> states_;
  int64_t num_steps_ = 0, num_tokens_ = 0;
  std::vector<bool> in_base_;            // [drafter vocab]: in logit_token_ids (empty: whole vocabulary)
  std::vector<int32_t> uses_;            // [drafter vocab]: requests holding the token as extra
  std::vector<int32_t> extra_;           // the drafter's extra logit tokens, as set by this proposer
  int64_t num_extra_ = 0;                // tokens with uses_ > 0
  bool extra_dirty_ = false;
};

}  // namespace specdec::spec_decode
