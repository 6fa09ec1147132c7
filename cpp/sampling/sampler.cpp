#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "common/errors.h"

namespace specdec::sampling {

void SamplingParams::validate() const {
  SPECDEC_CHECK(std::isfinite(temperature) && temperature >= 0, "temperature", temperature,
               "a finite number >= 0 (0 is greedy)");
  SPECDEC_CHECK(top_k >= -1, "top_k", top_k, "-1 or 0 (all tokens) or a positive count");
  SPECDEC_CHECK(top_p > 0 && top_p <= 1, "top_p", top_p, "in (0, 1]");
  SPECDEC_CHECK(min_p >= 0 && min_p <= 1, "min_p", min_p, "in [0, 1]");
}

int32_t argmax(const float* logits, int64_t vocab) {
  int64_t best = 0;
  bool found = false;
  for (int64_t i = 0; i < vocab; ++i) {
    if (std::isnan(logits[i])) continue;
    if (!found || logits[i] > logits[best]) {
      best = i;
      found = true;
    }
  }
  return static_cast<int32_t>(best);
}

namespace {

// exp((x - max) / T) for every finite logit, as (id, weight), sorted by weight descending.
std::vector<std::pair<int32_t, double>> weights(const float* logits, int64_t vocab, double temp) {
  double max = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) {
    if (!std::isnan(logits[i])) max = std::max(max, static_cast<double>(logits[i]));
  }
  std::vector<std::pair<int32_t, double>> w;
  w.reserve(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) {
    const double x = logits[i];
    if (std::isnan(x) || x == -INFINITY) continue;
    w.emplace_back(static_cast<int32_t>(i), std::exp((x - max) / temp));
  }
  std::stable_sort(w.begin(), w.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  return w;
}

}  // namespace

std::vector<std::pair<int32_t, double>> sampling_probs(const float* logits, int64_t vocab,
                                                       const SamplingParams& params) {
  params.validate();
  SPECDEC_CHECK(vocab > 0, "vocab", vocab, "at least one logit");
  if (params.greedy()) return {{argmax(logits, vocab), 1.0}};
  auto w = weights(logits, vocab, params.temperature);
  if (w.empty()) return {{argmax(logits, vocab), 1.0}};
  double total = 0;
  for (const auto& [id, x] : w) total += x;
  // min-p: keep p >= min_p * p_max (w is sorted, so a prefix survives).
  if (params.min_p > 0) {
    const double cut = params.min_p * w.front().second;
    size_t keep = 0;
    while (keep < w.size() && w[keep].second >= cut) ++keep;
    w.resize(std::max<size_t>(keep, 1));
  }
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < w.size()) w.resize(params.top_k);
  total = 0;
  for (const auto& [id, x] : w) total += x;
  // top-p: the smallest prefix whose mass reaches top_p (at least one token).
  if (params.top_p < 1) {
    double mass = 0;
    size_t keep = 0;
    while (keep < w.size()) {
      mass += w[keep].second / total;
      ++keep;
      if (mass >= params.top_p) break;
    }
    w.resize(keep);
    total = 0;
    for (const auto& [id, x] : w) total += x;
  }
  for (auto& [id, x] : w) x /= total;
  return w;
}

namespace {

// SplitMix64's finaliser: a bijection of 64-bit words with full avalanche.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// -log U for the race's number of token `id` at `position`.
double exponential(const Generator& gen, int64_t position, int32_t id) {
  return -std::log(gen.uniform(position, Stream::kToken, static_cast<uint64_t>(id)));
}

}  // namespace

double Generator::uniform(int64_t position, Stream stream, uint64_t index) const {
  uint64_t h = mix(seed_ ^ mix(static_cast<uint64_t>(position)));
  h = mix(h ^ mix(static_cast<uint64_t>(stream) * 0x632be59bd9b4e019ull + index));
  return static_cast<double>((h >> 11) + 1) * 0x1.0p-53;
}

int32_t race(const std::vector<std::pair<int32_t, double>>& probs, const Generator& gen, int64_t position) {
  int32_t best = probs.empty() ? 0 : probs.front().first;
  double best_key = INFINITY;
  for (const auto& [id, p] : probs) {
    if (!(p > 0)) continue;
    const double key = exponential(gen, position, id) / p;
    if (key < best_key) {
      best_key = key;
      best = id;
    }
  }
  return best;
}

int32_t race_dense(const std::vector<double>& p, const Generator& gen, int64_t position) {
  int32_t best = 0;
  double best_key = INFINITY;
  for (size_t i = 0; i < p.size(); ++i) {
    if (!(p[i] > 0)) continue;
    const double key = exponential(gen, position, static_cast<int32_t>(i)) / p[i];
    if (key < best_key) {
      best_key = key;
      best = static_cast<int32_t>(i);
    }
  }
  return best;
}

int32_t sample(const float* logits, int64_t vocab, const SamplingParams& params, const Generator& gen,
               int64_t position) {
  if (params.greedy()) {
    params.validate();
    return argmax(logits, vocab);
  }
  return race(sampling_probs(logits, vocab, params), gen, position);
}

Logprobs logprobs(const float* logits, int64_t vocab, int n, const std::vector<int32_t>& ids) {
  SPECDEC_CHECK(n >= 0, "logprobs", n, "a count >= 0");
  double max = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) {
    if (!std::isnan(logits[i])) max = std::max(max, static_cast<double>(logits[i]));
  }
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    if (!std::isnan(logits[i])) sum += std::exp(logits[i] - max);
  }
  const double lse = max + std::log(sum);
  auto lp = [&](int64_t i) {
    return std::isnan(logits[i]) ? -INFINITY : static_cast<double>(logits[i]) - lse;
  };
  Logprobs out;
  for (int32_t id : ids) {
    SPECDEC_CHECK(id >= 0 && id < vocab, "token_id", id, str_cat("in [0, ", vocab, ")"));
    out.of_ids.push_back(lp(id));
    int64_t rank = 1;
    for (int64_t i = 0; i < vocab; ++i) rank += lp(i) > lp(id) ? 1 : 0;
    out.ranks_of_ids.push_back(rank);
  }
  const int64_t k = std::min<int64_t>(n, vocab);
  std::vector<int32_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  auto better = [&](int32_t a, int32_t b) { return lp(a) > lp(b) || (lp(a) == lp(b) && a < b); };
  std::partial_sort(order.begin(), order.begin() + k, order.end(), better);
  for (int64_t i = 0; i < k; ++i) out.top.emplace_back(order[i], lp(order[i]));
  return out;
}

}  // namespace specdec::sampling
