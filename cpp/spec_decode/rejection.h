// Rejection sampling: turns a draft and the target's verification rows into the tokens a request
// gets this step (accepted drafts + one recovered or bonus token), losslessly:
// - greedy: accept while draft == the target's argmax (computed on the device), then the target's
//   token at the first mismatch, or the bonus token after k acceptances;
// - sampled: accept draft d with probability min(1, p(d) / q(d)); at the first rejection sample
//   from normalize(max(0, p - q)); after k acceptances sample the bonus token from p. Drafts
//   without probabilities are point masses (q = 1 at d). p and q are the distributions the
//   request's temperature / min-p / top-k / top-p give (sampling::sampling_probs).
// The output distribution equals the target's own sampling distribution (Leviathan et al. 2023).
// Seeded requests are verified coupled instead (see verify_sampled): the same distribution, and
// the very tokens plain decoding draws for the seed, whatever the drafts and the batch.
#pragma once

#include <cstdint>
#include <vector>

#include "sampling/sampler.h"
#include "spec_decode/proposer.h"

namespace specdec::spec_decode {

struct VerifyResult {
  std::vector<int32_t> tokens;  // accepted drafts, then the recovered or bonus token
  int num_accepted = 0;         // drafts accepted (tokens.size() - 1)
};

// target_argmax: [draft.size() + 1] the target's argmax per verification row.
VerifyResult verify_greedy(const std::vector<int32_t>& draft, const int32_t* target_argmax);

// target_logits: [draft.size() + 1, vocab] raw logits of the verification rows; row i decides the
// token at sequence index first_position + i (the random numbers used are named by it).
// A coupled generator (seeded requests) accepts a draft token when it equals the target's own
// draw at its position (sampling::race), so the tokens are those plain decoding gives; otherwise
// rejection sampling as above (the most acceptance for drafts with probabilities).
VerifyResult verify_sampled(const Draft& draft, const float* target_logits, int64_t vocab,
                            const sampling::SamplingParams& params, const sampling::Generator& gen,
                            int64_t first_position);

// The dense distribution sampling::sampling_probs gives, as [vocab] floats.
std::vector<double> dense_probs(const float* logits, int64_t vocab, const sampling::SamplingParams& params);

}  // namespace specdec::spec_decode
