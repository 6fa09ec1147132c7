// Token sampling on the host from one row of logits: greedy, or random with temperature, min-p,
// top-k and top-p (applied in vLLM's order: temperature, min-p, top-k, top-p), drawn from a
// per-request seeded generator; plus the log-probabilities vLLM reports (of the raw logits).
//
// The probabilities a token is drawn from are exposed (`sampling_probs`) because speculative
// rejection sampling needs the target's and the drafter's distributions, not just a token.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace specdec::sampling {

struct SamplingParams {
  double temperature = 1.0;  // 0: greedy (argmax; ties -> lowest id)
  int top_k = 0;             // 0 or -1: all tokens
  double top_p = 1.0;        // (0, 1]
  double min_p = 0.0;        // [0, 1]: drop tokens with p < min_p * p_max
  // Throws ConfigError naming the field (temperature < 0 or not finite, top_p outside (0, 1],
  // min_p outside [0, 1], top_k < -1).
  void validate() const;
  bool greedy() const { return temperature == 0.0; }
  // Built from its fields and validated (ConfigError naming the field).
  static SamplingParams make(double temperature, int top_k, double top_p, double min_p) {
    SamplingParams p{temperature, top_k, top_p, min_p};
    p.validate();
    return p;
  }
};

// A request's random stream: the same seed gives the same tokens.
class Generator {
 public:
  explicit Generator(uint64_t seed) : engine_(seed) {}
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return std::generate_canonical<double, 53>(engine_); }

 private:
  std::mt19937_64 engine_;
};

// Index of the largest logit; ties -> lowest index; NaN never wins (all NaN -> 0).
int32_t argmax(const float* logits, int64_t vocab);

// The distribution a random token is drawn from under `params`: (token id, probability) pairs of
// the tokens that survive min-p / top-k / top-p, probabilities renormalised, sorted by
// probability descending (ties: lower id first). Greedy params give the argmax with 1.
std::vector<std::pair<int32_t, double>> sampling_probs(const float* logits, int64_t vocab,
                                                       const SamplingParams& params);

// One token drawn from sampling_probs (inverse CDF with one uniform draw), or argmax when greedy
// (no draw then).
int32_t sample(const float* logits, int64_t vocab, const SamplingParams& params, Generator& gen);

// log_softmax(logits)[id] for every id in `ids`, and the top `n` (id, logprob) pairs (sorted
// descending, ties: lower id), from the raw logits (vLLM's default logprobs mode).
struct Logprobs {
  std::vector<std::pair<int32_t, double>> top;
  std::vector<double> of_ids;
  std::vector<int64_t> ranks_of_ids;  // 1 + the number of tokens with a larger logprob
};
Logprobs logprobs(const float* logits, int64_t vocab, int n, const std::vector<int32_t>& ids);

}  // namespace specdec::sampling
