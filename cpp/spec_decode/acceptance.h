// Acceptance per draft position, as adaptive k, the hybrid proposer and layer_skip's auto exit
// estimate it: decayed counts of drafts that reached each position and were accepted there, and
// how a past draft compares with the tokens the request then got.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace specdec::spec_decode {

struct PositionCounts {
  std::vector<double> tried, accepted;  // per draft position, decayed

  // One draft's outcome: positions < reached were tried, the first `matched` of them accepted;
  // everything counted before weighs `decay` less. Grows to `reached` positions.
  void add(size_t reached, size_t matched, double decay) {
    if (tried.size() < reached) {
      tried.resize(reached, 0.0);
      accepted.resize(reached, 0.0);
    }
    for (size_t i = 0; i < tried.size(); ++i) {
      tried[i] *= decay;
      accepted[i] *= decay;
    }
    for (size_t i = 0; i < reached; ++i) {
      tried[i] += 1.0;
      if (i < matched) accepted[i] += 1.0;
    }
  }
  double tried_at(size_t i) const { return i < tried.size() ? tried[i] : 0.0; }
  double accepted_at(size_t i) const { return i < accepted.size() ? accepted[i] : 0.0; }
};

// The conditional acceptance of position i: the pool's counts (a Laplace estimate) as a prior
// worth `prior` drafts, updated by the request's own (nullptr: the pool's estimate alone).
inline double blended_acceptance(const PositionCounts& pool, const PositionCounts* request, size_t i,
                                 double prior) {
  const double g = (pool.accepted_at(i) + 1.0) / (pool.tried_at(i) + 2.0);
  if (request == nullptr) return g;
  return (request->accepted_at(i) + prior * g) / (request->tried_at(i) + prior);
}

// A draft made when the request held `at` tokens, against the tokens it holds now: how many of
// its positions are known (`known`) and how many leading draft tokens equal the tokens there (the
// target's own choices: for greedy requests exactly what verification accepted, or would have).
inline size_t matched_prefix(const std::vector<int32_t>& draft, const std::vector<int32_t>& context, size_t at,
                             size_t& known) {
  known = context.size() > at ? std::min(draft.size(), context.size() - at) : 0;
  size_t m = 0;
  while (m < known && draft[m] == context[at + m]) ++m;
  return m;
}

}  // namespace specdec::spec_decode
