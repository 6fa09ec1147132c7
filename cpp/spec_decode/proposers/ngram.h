// Prompt lookup (vLLM's NgramProposer): the longest suffix n-gram of the request's tokens
// (min_n <= n <= max_n) that occurs earlier — the earliest such occurrence — and the up to k
// tokens that followed it. No draft probabilities (point masses).
#pragma once

#include "spec_decode/proposer.h"

namespace specdec::spec_decode {

// One request's lookup; max_model_len caps k at max_model_len - tokens.size() (0: no cap).
std::vector<int32_t> ngram_lookup(const std::vector<int32_t>& tokens, int min_n, int max_n, int k,
                                  int64_t max_model_len = 0);

class NgramProposer final : public Proposer {
 public:
  NgramProposer(int prompt_lookup_min, int prompt_lookup_max, int64_t max_model_len = 0);
  std::string name() const override { return "ngram"; }
  std::vector<Draft> propose(const std::vector<ProposeRequest>& requests) override;
  int min_n() const { return min_n_; }
  int max_n() const { return max_n_; }

 private:
  int min_n_, max_n_;
  int64_t max_model_len_;
};

}  // namespace specdec::spec_decode
