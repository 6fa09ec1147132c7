// The proposer interface: given running requests, return up to k draft tokens each (and, for a
// sampled request whose drafter has a distribution, that distribution per draft position).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sampling/sampler.h"
#include "spec_decode/sequence.h"

namespace specdec::spec_decode {

struct ProposeRequest {
  std::shared_ptr<const Sequence> sequence;
  int num_speculative_tokens = 0;    // the most tokens to draft (0: none)
  sampling::SamplingParams params;   // the request's sampling (greedy: temperature 0)
  sampling::Generator* generator = nullptr;  // the request's random stream (sampled requests)
};

struct Draft {
  std::vector<int32_t> tokens;
  // [tokens.size(), vocab_size] draft probabilities q(x) over the target's vocabulary, after the
  // request's temperature / top-k / top-p / min-p; empty: point masses (n-gram, suffix, greedy).
  std::vector<float> probs;
  int64_t vocab_size = 0;
  bool has_probs() const { return !probs.empty(); }
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual std::string name() const = 0;
  // One draft per request, in order; a draft may be shorter than asked (or empty).
  virtual std::vector<Draft> propose(const std::vector<ProposeRequest>& requests) = 0;
  // The request ended (finished, aborted): drop its state (a suffix tree keeps its output).
  virtual void finish(const Sequence& sequence) { (void)sequence; }
  // Whether drafts come as long as asked (a drafting model; a lookup may find nothing): then an
  // engine may schedule the k + 1 rows first and propose right before the verifying forward, in
  // one call with it (spec_decode.propose_and_step).
  virtual bool drafts_full_length() const { return false; }
};

}  // namespace specdec::spec_decode
