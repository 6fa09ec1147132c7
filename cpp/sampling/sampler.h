// Token sampling on the host from one row of logits: greedy, or random with temperature, min-p,
// top-k and top-p (applied in vLLM's order: temperature, min-p, top-k, top-p), drawn from a
// per-request seeded generator; plus the log-probabilities vLLM reports (of the raw logits).
//
// The probabilities a token is drawn from are exposed (`sampling_probs`) because speculative
// rejection sampling needs the target's and the drafter's distributions, not just a token.
#pragma once

#include <cstdint>
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

// What a random number decides; with the position, it names the number (counter-based).
enum class Stream : uint64_t {
  kToken = 1,     // the race that draws a token (indexed by token id)
  kAccept = 2,    // rejection sampling's acceptance test of a draft token
  kResidual = 3,  // the draw from normalize(max(0, p - q)) after a rejection
};

// A request's random numbers as a pure function of its seed and of what they decide (the token
// position and the stream): counter-based, so a request gets the same numbers whatever else shares
// its batch, however the scheduler cuts its steps, and after preemption or a prefix-cache hit.
// `coupled` (seeded requests) verifies drafts by matching the target's own draw at each position,
// so the output is the one plain decoding gives for this seed, whatever the drafts.
class Generator {
 public:
  explicit Generator(uint64_t seed, bool coupled = true) : seed_(seed), coupled_(coupled) {}
  uint64_t seed() const { return seed_; }
  bool coupled() const { return coupled_; }
  // Uniform in (0, 1] with 53 random bits, named by (position, stream, index).
  double uniform(int64_t position, Stream stream, uint64_t index = 0) const;

 private:
  uint64_t seed_;
  bool coupled_;
};

// sampling_probs in no particular order unless `sorted` (no sort of the vocabulary when neither
// asked for nor needed by top-p): what a draw needs.
std::vector<std::pair<int32_t, double>> candidate_probs(const float* logits, int64_t vocab,
                                                        const SamplingParams& params, bool sorted = false);

// The token drawn at `position` from `probs` ((id, p) pairs, p > 0): the exponential race
// argmin over ids of -log U(position, kToken, id) / p(id) (Gumbel-max): distributed exactly as
// p, and coupled across distributions — a drafter and the target raced with the same numbers
// pick the same token with high probability when their distributions are close.
int32_t race(const std::vector<std::pair<int32_t, double>>& probs, const Generator& gen, int64_t position);
// The same over a dense [vocab] distribution (entries <= 0 never win).
int32_t race_dense(const std::vector<double>& p, const Generator& gen, int64_t position);

// Structured outputs: logits[i] = -inf for every token i whose bit is clear in `mask` (bit i % 32
// of word i / 32, the layout of llguidance's and xgrammar's token bitmasks; 1 = allowed). Tokens
// past 32 * words are not allowed. Sampling, argmax and logprobs then see only allowed tokens.
void apply_token_bitmask(float* logits, int64_t vocab, const int32_t* mask, int64_t words);

// Index of the largest logit; ties -> lowest index; NaN never wins (all NaN -> 0).
int32_t argmax(const float* logits, int64_t vocab);

// The distribution a random token is drawn from under `params`: (token id, probability) pairs of
// the tokens that survive min-p / top-k / top-p, probabilities renormalised, sorted by
// probability descending (ties: lower id first). Greedy params give the argmax with 1.
std::vector<std::pair<int32_t, double>> sampling_probs(const float* logits, int64_t vocab,
                                                       const SamplingParams& params);

// The token drawn at `position` (its index in the request's sequence) from sampling_probs by the
// race, or argmax when greedy (no draw then).
int32_t sample(const float* logits, int64_t vocab, const SamplingParams& params, const Generator& gen,
               int64_t position);

// log_softmax(logits)[id] for every id in `ids`, and the top `n` (id, logprob) pairs (sorted
// descending, ties: lower id), from the raw logits (vLLM's default logprobs mode).
struct Logprobs {
  std::vector<std::pair<int32_t, double>> top;
  std::vector<double> of_ids;
  std::vector<int64_t> ranks_of_ids;  // 1 + the number of tokens with a larger logprob
};
Logprobs logprobs(const float* logits, int64_t vocab, int n, const std::vector<int32_t>& ids);
// log_softmax(logits)[id] alone (what a request's cumulative logprob needs): logprobs(...).of_ids[0]
// without the ranks and the sort; -inf logits (structured outputs' masked tokens) skipped.
double token_logprob(const float* logits, int64_t vocab, int32_t id);

}  // namespace specdec::sampling
