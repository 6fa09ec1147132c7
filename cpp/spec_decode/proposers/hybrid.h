// hybrid: several proposers (e.g. suffix decoding and a draft model); per request and step it
// takes the draft with the most expected accepted tokens, and runs a costly part only where that
// can pay, from what it measured in the run:
// - acceptance: per part and request, the conditional acceptance of each draft position, decayed
//   (the last ~5 drafts), with all requests' estimate as the prior. Every part that drafted for a
//   request is scored against the tokens the request then got (the target's own choices), so
//   parts whose draft was not taken keep being measured;
// - cost: each part's seconds per call, and the engine's time between two calls (the target's
//   verification and the host work), both as moving averages.
// Parts run in decreasing order of their rate over all requests (the pool's E(k) / (their cost +
// the verification); cheapest first until a verification is measured). A part runs for a request when its expected
// rate, E(k) / (its cost + the verification), beats the best draft already in hand, E / the
// verification; a part skipped on a request is tried again after 8, 16, ... 64 steps (a regime
// may change). E(draft) = 1 + sum over positions j of prod_{i<=j} q_i.
//
// Lossless: the taken draft is verified like any other. For a sampled request the choice never
// looks at a sampled draft's tokens (only at the part's expected value for the tokens asked), so
// the chosen draft's tokens are distributed as that part's q; deterministic drafts (n-gram,
// suffix, greedy drafters) are functions of the context and may be compared as they are.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "spec_decode/acceptance.h"
#include "spec_decode/proposer.h"

namespace specdec::spec_decode {

class HybridProposer final : public Proposer {
 public:
  // part_tokens: the most tokens each part drafts (its num_speculative_tokens; empty: as asked).
  explicit HybridProposer(std::vector<std::shared_ptr<Proposer>> parts, std::vector<int> part_tokens = {});
  std::string name() const override { return "hybrid"; }
  std::vector<Draft> propose(const std::vector<ProposeRequest>& requests) override;
  void finish(const Sequence& sequence) override;

  const std::vector<std::shared_ptr<Proposer>>& parts() const { return parts_; }
  struct PartStats {
    std::string name;
    int64_t calls = 0;       // calls that ran the part
    int64_t drafted = 0;     // request-steps the part drafted for
    int64_t taken = 0;       // request-steps whose draft came from it
    std::vector<double> acceptance;  // all requests' conditional acceptance per position
    double seconds_per_call = 0.0;
  };
  std::vector<PartStats> stats() const;
  double verify_seconds() const { return verify_seconds_; }  // the engine's time between calls

 private:
  struct PartState {
    PositionCounts counts;
    int64_t context = -1;  // context length of the part's last draft for the request
    std::vector<int32_t> draft;
    int skipped = 0, probe_after = 8;
  };
  struct RequestState {
    std::vector<PartState> parts;
  };
  std::vector<double> q(size_t part, const PartState* st, int k) const;
  double expected(size_t part, const PartState* st, int tokens) const;
  void observe(size_t part, PartState& st, const std::vector<int32_t>& context);

  std::vector<std::shared_ptr<Proposer>> parts_;
  std::vector<int> part_tokens_;
  std::vector<PositionCounts> pool_;
  std::vector<PartStats> stats_;
  std::unordered_map<std::string, RequestState> states_;
  double verify_seconds_ = 0.0;
  std::chrono::steady_clock::time_point last_end_{};
  bool has_last_end_ = false;
};

}  // namespace specdec::spec_decode
