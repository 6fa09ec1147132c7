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

void apply_token_bitmask(float* logits, int64_t vocab, const int32_t* mask, int64_t words) {
  SPECDEC_CHECK(words >= 0, "words", words, "a count >= 0");
  const int64_t covered = std::min(vocab, 32 * words);
  for (int64_t w = 0; 32 * w < covered; ++w) {
    const auto bits = static_cast<uint32_t>(mask[w]);
    if (bits == 0xFFFFFFFFu) continue;
    const int64_t end = std::min<int64_t>(32, covered - 32 * w);
    float* row = logits + 32 * w;
    for (int64_t b = 0; b < end; ++b) {
      if (!((bits >> b) & 1u)) row[b] = -INFINITY;
    }
  }
  for (int64_t i = covered; i < vocab; ++i) logits[i] = -INFINITY;
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

using Weighted = std::pair<int32_t, double>;

// Heavier first; equal weights: the lower id first (what a stable sort of ids in order gives).
bool heavier(const Weighted& a, const Weighted& b) {
  return a.second > b.second || (a.second == b.second && a.first < b.first);
}

// exp((x - max) / T) for every finite logit, as (id, weight), in id order (the largest is 1).
std::vector<Weighted> weights(const float* logits, int64_t vocab, double temp) {
  double max = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) {
    if (!std::isnan(logits[i])) max = std::max(max, static_cast<double>(logits[i]));
  }
  std::vector<Weighted> w;
  w.reserve(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) {
    const double x = logits[i];
    if (std::isnan(x) || x == -INFINITY) continue;
    w.emplace_back(static_cast<int32_t>(i), std::exp((x - max) / temp));
  }
  return w;
}

double total_of(const std::vector<Weighted>& w) {
  double total = 0;
  for (const auto& [id, x] : w) total += x;
  return total;
}

}  // namespace

std::vector<std::pair<int32_t, double>> candidate_probs(const float* logits, int64_t vocab,
                                                        const SamplingParams& params, bool sorted) {
  params.validate();
  SPECDEC_CHECK(vocab > 0, "vocab", vocab, "at least one logit");
  if (params.greedy()) return {{argmax(logits, vocab), 1.0}};
  auto w = weights(logits, vocab, params.temperature);
  if (w.empty()) return {{argmax(logits, vocab), 1.0}};
  // min-p: keep p >= min_p * p_max (the largest weight is 1, and it survives).
  if (params.min_p > 0) {
    double top = 0;
    for (const auto& [id, x] : w) top = std::max(top, x);
    const double cut = params.min_p * top;
    std::erase_if(w, [cut](const Weighted& e) { return e.second < cut; });
  }
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < w.size()) {
    std::nth_element(w.begin(), w.begin() + params.top_k, w.end(), heavier);
    w.resize(static_cast<size_t>(params.top_k));
  }
  if (sorted || params.top_p < 1) std::sort(w.begin(), w.end(), heavier);
  double total = total_of(w);
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
    total = total_of(w);
  }
  for (auto& [id, x] : w) x /= total;
  return w;
}

std::vector<std::pair<int32_t, double>> sampling_probs(const float* logits, int64_t vocab,
                                                       const SamplingParams& params) {
  return candidate_probs(logits, vocab, params, true);
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

namespace {

// The race over (id, p) entries given by `at(i)`, i < n: the most probable entry's key first, so
// that the bound lets most others go without a logarithm: key = -log u / p < best needs
// u > exp(-best * p) >= 1 - best * p.
template <typename At>
int32_t race_over(size_t n, At at, const Generator& gen, int64_t position) {
  size_t first = n;
  for (size_t i = 0; i < n; ++i) {
    if (at(i).second > 0 && (first == n || at(i).second > at(first).second)) first = i;
  }
  if (first == n) return n ? at(0).first : 0;
  int32_t best = at(first).first;
  double best_key = exponential(gen, position, best) / at(first).second;
  for (size_t i = 0; i < n; ++i) {
    const auto [id, p] = at(i);
    if (!(p > 0) || i == first) continue;
    const double u = gen.uniform(position, Stream::kToken, static_cast<uint64_t>(id));
    // its key is at least best_key (1 - u is exact for u >= 1/2; the margin covers the rounding of
    // best_key * p)
    if (1.0 - u >= best_key * p * (1.0 + 0x1p-50)) continue;
    const double key = -std::log(u) / p;
    if (key < best_key || (key == best_key && id < best)) {
      best_key = key;
      best = id;
    }
  }
  return best;
}

}  // namespace

int32_t race(const std::vector<std::pair<int32_t, double>>& probs, const Generator& gen, int64_t position) {
  return race_over(probs.size(), [&](size_t i) { return probs[i]; }, gen, position);
}

int32_t race_dense(const std::vector<double>& p, const Generator& gen, int64_t position) {
  return race_over(p.size(), [&](size_t i) { return Weighted{static_cast<int32_t>(i), p[i]}; }, gen, position);
}

int32_t sample(const float* logits, int64_t vocab, const SamplingParams& params, const Generator& gen,
               int64_t position) {
  if (params.greedy()) {
    params.validate();
    return argmax(logits, vocab);
  }
  return race(candidate_probs(logits, vocab, params), gen, position);
}

double token_logprob(const float* logits, int64_t vocab, int32_t id) {
  SPECDEC_CHECK(id >= 0 && id < vocab, "token_id", id, str_cat("in [0, ", vocab, ")"));
  if (std::isnan(logits[id])) return -INFINITY;
  double max = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i) {
    if (!std::isnan(logits[i])) max = std::max(max, static_cast<double>(logits[i]));
  }
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    const float x = logits[i];
    if (x != -INFINITY && !std::isnan(x)) sum += std::exp(x - max);
  }
  return static_cast<double>(logits[id]) - (max + std::log(sum));
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
