#include "spec_decode/rejection.h"

#include <algorithm>

#include "common/errors.h"

namespace specdec::spec_decode {

VerifyResult verify_greedy(const std::vector<int32_t>& draft, const int32_t* target_argmax) {
  VerifyResult r;
  for (size_t i = 0; i < draft.size(); ++i) {
    r.tokens.push_back(target_argmax[i]);
    if (draft[i] != target_argmax[i]) return r;
    ++r.num_accepted;
  }
  r.tokens.push_back(target_argmax[draft.size()]);  // bonus
  return r;
}

std::vector<double> dense_probs(const float* logits, int64_t vocab, const sampling::SamplingParams& params) {
  std::vector<double> p(static_cast<size_t>(vocab), 0.0);
  for (const auto& [id, prob] : sampling::candidate_probs(logits, vocab, params)) p[static_cast<size_t>(id)] = prob;
  return p;
}

namespace {

// Inverse CDF over unnormalised non-negative weights with the uniform u in (0, 1]; the last
// positive weight if rounding runs out.
int32_t draw(const std::vector<double>& w, double total, double u) {
  u *= total;
  double acc = 0.0;
  int32_t last = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] <= 0.0) continue;
    acc += w[i];
    last = static_cast<int32_t>(i);
    if (u < acc) return last;
  }
  return last;
}

// Coupled verification: the token at each position is the target's own race there; a draft token
// is accepted when it is that token. The output is what plain decoding draws for this seed.
VerifyResult verify_coupled(const Draft& draft, const float* target_logits, int64_t vocab,
                            const sampling::SamplingParams& params, const sampling::Generator& gen,
                            int64_t first_position) {
  VerifyResult r;
  const size_t k = draft.tokens.size();
  for (size_t i = 0; i <= k; ++i) {
    const float* row = target_logits + static_cast<int64_t>(i) * vocab;
    const int32_t t = sampling::race(sampling::candidate_probs(row, vocab, params), gen,
                                     first_position + static_cast<int64_t>(i));
    r.tokens.push_back(t);
    if (i == k || draft.tokens[i] != t) return r;
    ++r.num_accepted;
  }
  return r;
}

// One rejection-sampling position: accept d with probability min(1, p(d) / q(d)), else draw from
// normalize(max(0, p - q)). True when d is accepted; `out` is the token either way.
bool accept_or_recover(std::vector<double>& p, const float* q, int32_t d, int64_t vocab, const float* row,
                       const sampling::SamplingParams& params, const sampling::Generator& gen,
                       int64_t position, int32_t& out) {
  const double qd = q ? static_cast<double>(q[d]) : 1.0;
  const double u = gen.uniform(position, sampling::Stream::kAccept);
  if (qd > 0.0 && p[static_cast<size_t>(d)] >= u * qd) {  // u <= p/q
    out = d;
    return true;
  }
  double total = 0.0;
  for (int64_t j = 0; j < vocab; ++j) {
    const double qj = q ? static_cast<double>(q[j]) : (j == d ? 1.0 : 0.0);
    p[static_cast<size_t>(j)] = std::max(0.0, p[static_cast<size_t>(j)] - qj);
    total += p[static_cast<size_t>(j)];
  }
  if (total <= 0.0) {  // p <= q everywhere: rejection had probability 0; only rounding gets here
    p = dense_probs(row, vocab, params);
    total = 1.0;
  }
  out = draw(p, total, gen.uniform(position, sampling::Stream::kResidual));
  return false;
}

}  // namespace

VerifyResult verify_sampled(const Draft& draft, const float* target_logits, int64_t vocab,
                            const sampling::SamplingParams& params, const sampling::Generator& gen,
                            int64_t first_position) {
  const size_t k = draft.tokens.size();
  if (draft.has_probs()) {
    SPECDEC_CHECK(draft.vocab_size == vocab && draft.probs.size() == k * static_cast<size_t>(vocab),
                 "draft.probs", draft.probs.size(),
                 str_cat("[", k, " x ", vocab, "] (one row per draft token over the target's vocabulary)"));
  }
  for (size_t i = 0; i < k; ++i) {
    SPECDEC_CHECK(draft.tokens[i] >= 0 && draft.tokens[i] < vocab, "draft token", draft.tokens[i],
                 str_cat("a token id in [0, ", vocab, ")"));
  }
  VerifyResult r;
  if (params.greedy()) {  // a greedy request verified on logits (logprobs asked for)
    for (size_t i = 0; i <= k; ++i) {
      const int32_t t = sampling::argmax(target_logits + static_cast<int64_t>(i) * vocab, vocab);
      r.tokens.push_back(t);
      if (i == k || draft.tokens[i] != t) return r;
      ++r.num_accepted;
    }
    return r;
  }
  if (gen.coupled()) return verify_coupled(draft, target_logits, vocab, params, gen, first_position);
  for (size_t i = 0; i <= k; ++i) {
    const float* row = target_logits + static_cast<int64_t>(i) * vocab;
    const int64_t position = first_position + static_cast<int64_t>(i);
    if (i == k) {  // bonus token
      r.tokens.push_back(sampling::race(sampling::candidate_probs(row, vocab, params), gen, position));
      return r;
    }
    std::vector<double> p = dense_probs(row, vocab, params);
    const float* q = draft.has_probs() ? draft.probs.data() + i * static_cast<size_t>(vocab) : nullptr;
    int32_t t = 0;
    const bool accepted = accept_or_recover(p, q, draft.tokens[i], vocab, row, params, gen, position, t);
    r.tokens.push_back(t);
    if (!accepted) return r;
    ++r.num_accepted;
  }
  return r;
}

}  // namespace specdec::spec_decode
