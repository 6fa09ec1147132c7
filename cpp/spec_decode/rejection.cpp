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
  for (const auto& [id, prob] : sampling::sampling_probs(logits, vocab, params)) p[static_cast<size_t>(id)] = prob;
  return p;
}

namespace {

// Inverse CDF over unnormalised non-negative weights; the last positive weight if rounding runs out.
int32_t draw(const std::vector<double>& w, double total, sampling::Generator& gen) {
  const double u = gen.uniform() * total;
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

}  // namespace

VerifyResult verify_sampled(const Draft& draft, const float* target_logits, int64_t vocab,
                            const sampling::SamplingParams& params, sampling::Generator& gen) {
  const size_t k = draft.tokens.size();
  if (draft.has_probs()) {
    SPECDEC_CHECK(draft.vocab_size == vocab && draft.probs.size() == k * static_cast<size_t>(vocab),
                 "draft.probs", draft.probs.size(),
                 str_cat("[", k, " x ", vocab, "] (one row per draft token over the target's vocabulary)"));
  }
  VerifyResult r;
  for (size_t i = 0; i <= k; ++i) {
    const float* row = target_logits + static_cast<int64_t>(i) * vocab;
    if (params.greedy()) {  // a greedy request verified on logits (logprobs asked for)
      const int32_t t = sampling::argmax(row, vocab);
      r.tokens.push_back(t);
      if (i == k || draft.tokens[i] != t) return r;
      ++r.num_accepted;
      continue;
    }
    std::vector<double> p = dense_probs(row, vocab, params);
    if (i == k) {  // bonus token
      r.tokens.push_back(draw(p, 1.0, gen));
      return r;
    }
    const int32_t d = draft.tokens[i];
    SPECDEC_CHECK(d >= 0 && d < vocab, "draft token", d, str_cat("a token id in [0, ", vocab, ")"));
    const float* q = draft.has_probs() ? draft.probs.data() + i * static_cast<size_t>(vocab) : nullptr;
    const double qd = q ? static_cast<double>(q[d]) : 1.0;
    const double u = gen.uniform();
    if (qd > 0.0 && p[static_cast<size_t>(d)] >= u * qd) {  // u <= p/q
      r.tokens.push_back(d);
      ++r.num_accepted;
      continue;
    }
    // recovered token from normalize(max(0, p - q))
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
    r.tokens.push_back(draw(p, total, gen));
    return r;
  }
  return r;
}

}  // namespace specdec::spec_decode
