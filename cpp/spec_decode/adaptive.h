// Adaptive speculation: picks k per request and step from measured acceptance and measured costs
// on this machine, and turns speculation off where it would be slower than plain decoding.
//
// Per request, the conditional acceptance of draft position i (accepted, given positions < i
// were) is estimated from that request's drafts, decayed so that a change of regime (a chat
// answer turning to code) shows within a few steps, with the pool of all requests as the prior.
// The machine's costs are measured from the engine's own steps: the target forward as a
// function of its row count, and the proposer's time as a + b * (draft tokens asked). For each
// k in [0, max_k] the expected tokens per step, E(k) = 1 + sum_{j<=k} prod_{i<j} q_i, is divided
// by the expected time of the step; the best k wins, k = 0 being plain decoding, and a k > 0 only
// when it beats plain decoding by 10 % (turning on) or 3 % (staying on): near break-even the
// estimates' noise costs more than the gain. While off, a request probes again after 8, 16, 32,
// ... plain steps (at most 256) so that it notices when drafts become good, with at most 2 tokens
// and only where the probe's expected loss (the drafter's catch-up included) fits in 3 % of the
// plain steps since the last probe; a request's first probe, and any after 256 plain steps, go
// ahead whatever they cost (so a draft model whose catch-up costs more than 3 % of the steps it
// missed probes every 256 steps). While nothing is known of the proposer's acceptance (fewer than
// two drafts in the pool), requests explore with k <= 2 whatever the estimates; later requests
// start from the pool's estimates. A position no draft has reached takes the estimate of the one
// before it, so longer drafts get tried when the short ones were accepted, and after two drafts in
// a row accepted whole the next is one token longer whatever the estimates. One plain step is
// taken to measure the plain forward. Turning speculation back on after
// plain steps has a price of its own for a draft model (it first catches up on the tokens it has
// not seen): measured per missed token as the excess of such a proposer call over its usual cost,
// it is charged (times the request's missed tokens) to the step that turns speculation on, so that
// a request near the break-even point stays off instead of flipping on and off (each flip paying
// the catch-up).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "spec_decode/acceptance.h"

namespace specdec::spec_decode {

class AdaptiveK {
 public:
  explicit AdaptiveK(int max_k);

  // k for this request's next step (0: plain), given `batch_rows` = rows the step's other
  // requests put in the forward (1 per decoding request) and `limit` <= max_k (tokens left).
  int choose(const std::string& request_id, int limit, int batch_rows = 1);
  // What the request's draft of `drafted` tokens got: the first `accepted` were accepted.
  void observe_draft(const std::string& request_id, int drafted, int accepted);
  // A target forward of `rows` rows (decode / verify steps only) took `seconds`.
  void observe_forward(int64_t rows, double seconds);
  // The proposer took `seconds` for drafts of `tokens` tokens in all (one call). A call that
  // followed a request's first drafts or a run of plain steps is not counted: a draft model then
  // also catches up on the tokens it has not seen (the prompt, the plain steps' tokens), work that
  // k does not change.
  void observe_proposer(int64_t tokens, double seconds);
  void forget(const std::string& request_id);

  int max_k() const { return max_k_; }
  // Estimates (for tests, metrics and the benchmark).
  double forward_seconds(int64_t rows) const;  // measured or interpolated; < 0: nothing measured
  double proposer_seconds(int64_t tokens) const;
  // The measured catch-up per token a draft model missed while speculation was off (EMA), >= 0.
  double catch_up_seconds_per_token() const { return catch_up_per_token_; }
  std::vector<double> acceptance(const std::string& request_id) const;  // q_i, i < max_k
  double expected_tokens(const std::string& request_id, int k) const;   // E(k)
  int64_t num_off_steps() const { return off_steps_; }
  int64_t num_probes() const { return probes_; }

 private:
  struct Request {
    PositionCounts counts;
    int drafts = 0;       // drafts observed
    int off_run = 0;      // plain steps since the last draft while off
    int probe_after = 8;  // plain steps before the next probe (doubles up to 256)
    int missed = 0;       // plain steps since its last draft (its drafter has not seen them); > 0: off
    bool started = false; // the proposer has been called for it (a drafter has its prompt)
    int full_run = 0;     // its last drafts accepted whole, in a row
    int last_drafted = 0; // the length of its last draft
  };
  std::vector<double> q(const Request* r) const;
  void switch_on_now(Request& r);

  int max_k_;
  PositionCounts pool_;
  std::unordered_map<std::string, Request> requests_;
  // forward seconds per row count (EMA), index rows; 0 = not measured
  std::vector<double> fwd_;
  // proposer seconds per total draft tokens of a call (as fwd_)
  std::vector<double> prop_;
  // this step's proposer call includes catch-up work: the drafter's prompt (not counted), or the
  // tokens of plain steps after speculation was off (its excess measures switch_on_)
  enum class CatchUp { kNone, kPrompt, kSwitchOn };
  CatchUp catch_up_ = CatchUp::kNone;
  int64_t pending_missed_ = 0;       // tokens the switch-on requests of this step missed
  double catch_up_per_token_ = 0.0;  // a switch-on call's excess over its usual cost, per missed token
  int64_t off_steps_ = 0, probes_ = 0;
};

}  // namespace specdec::spec_decode
