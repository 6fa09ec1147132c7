// layer_skip: self-drafting with the target's own first L layers (an early exit), its final norm
// and its LM head: no second model, the target's weights and the K/V of those layers shared.
//
// Per step and request the target's cache holds every token but the last (the one the last
// verification produced). The proposer runs k early-exit steps through the target's runner over
// [last token, d1, ..., d(k-1)] at the request's next positions (batched over the requests),
// reads d1..dk from their logits, and truncates the request back: the verification step then
// rewrites those positions in every layer. The tokens are therefore exactly the target's own
// (lossless), whatever the drafts are.
//
// exit_layer 0 is "auto": the proposer measures, for candidate exit layers (1/2 and 3/4 of the
// depth, and 3, 2, 1 layers short of it), the acceptance per draft position (from how each draft matched the tokens the request
// then got) and the time of one early-exit step, and uses the exit with the most expected tokens
// per second, E(k) / (k * t(L) + t(all layers)), t(L) = a + b L fitted to the measured steps.
// Each candidate is explored first; afterwards every 16th call tries the least-tried one again.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "runner/model_runner.h"
#include "spec_decode/acceptance.h"
#include "spec_decode/drafter_state.h"
#include "spec_decode/proposer.h"

namespace specdec::spec_decode {

class LayerSkipProposer final : public Proposer {
 public:
  // exit_layer: in [1, num_layers - 1], or 0 for auto. ConfigError naming
  // speculative_config.exit_layer otherwise.
  LayerSkipProposer(std::shared_ptr<runner::ModelRunner> target, int exit_layer);
  std::string name() const override { return "layer_skip"; }
  bool drafts_full_length() const override { return true; }
  std::vector<Draft> propose(const std::vector<ProposeRequest>& requests) override;
  void finish(const Sequence& sequence) override;

  bool is_auto() const { return auto_; }
  // The exit layer the next call uses (auto: the current choice).
  int exit_layer() const;
  const std::vector<int>& candidates() const { return candidates_; }

  struct CandidateStats {
    int exit_layer = 0;
    int64_t drafts = 0;               // drafts whose outcome was seen
    std::vector<double> acceptance;   // conditional acceptance per position (decayed estimate)
    double step_seconds = 0.0;        // one early-exit step (EMA; 0: not measured)
    double expected_tokens_per_second = 0.0;  // at num_speculative_tokens of the last call
  };
  std::vector<CandidateStats> stats() const;
  int64_t num_steps() const { return num_steps_; }  // early-exit steps run

 private:
  struct Candidate {
    int exit = 0;
    int64_t drafts = 0;
    PositionCounts counts;
    double step_seconds = 0.0;
  };
  struct State {
    int64_t context = -1;  // context length the last draft was made at
    std::vector<int32_t> draft;
    size_t candidate = 0;
  };
  void observe(State& st, const std::vector<int32_t>& context);
  size_t choose();
  size_t best_candidate() const;  // the highest expected rate
  double step_seconds(int layers) const;
  double rate(const Candidate& c, int k) const;

  std::shared_ptr<runner::ModelRunner> target_;
  DrafterRequests cache_;  // the target's requests: block reservations and rollback only
  bool auto_ = false;
  std::vector<int> candidates_;
  std::vector<Candidate> stats_;
  std::unordered_map<std::string, State> states_;
  int last_k_ = 1;
  int64_t calls_ = 0, num_steps_ = 0;
};

}  // namespace specdec::spec_decode
