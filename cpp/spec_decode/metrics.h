// Speculative-decoding counters with vLLM's names and definitions (vllm/v1/spec_decode/metrics.py):
// per request per step, observe_draft(num_draft_tokens, num_accepted_tokens).
#pragma once

#include <cstdint>
#include <vector>

namespace specdec::spec_decode {

struct SpecDecodingStats {
  int64_t num_drafts = 0;           // steps in which the request had at least one draft token
  int64_t num_draft_tokens = 0;
  int64_t num_accepted_tokens = 0;
  std::vector<int64_t> num_accepted_tokens_per_pos;  // [i]: drafts whose token i was accepted

  void observe_draft(int num_draft_tokens, int num_accepted_tokens);
  void add(const SpecDecodingStats& other);
  // accepted / drafted (NaN without drafts)
  double acceptance_rate() const;
  // 1 + accepted / drafts (1 without drafts): tokens per verify step, the bonus token included
  double mean_acceptance_length() const;
  // per_pos[i] / drafts
  std::vector<double> acceptance_rate_per_pos() const;
};

}  // namespace specdec::spec_decode
