// Host sampler: greedy, temperature / min-p / top-k / top-p distributions, seeded draws checked
// statistically against the distribution they claim, and raw log-probabilities.
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <map>
#include <random>
#include <vector>

#include "common/errors.h"
#include "sampling/sampler.h"

using namespace specdec;
using namespace specdec::sampling;

namespace {

std::vector<double> softmax(const std::vector<float>& x, double t) {
  double m = -INFINITY, s = 0;
  for (float v : x) m = std::max(m, static_cast<double>(v));
  std::vector<double> p;
  for (float v : x) p.push_back(std::exp((v - m) / t));
  for (double v : p) s += v;
  for (double& v : p) v /= s;
  return p;
}

SamplingParams params(double t, int k = 0, double p = 1, double min_p = 0) {
  SamplingParams s;
  s.temperature = t;
  s.top_k = k;
  s.top_p = p;
  s.min_p = min_p;
  return s;
}

const std::vector<float> kLogits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 0.5f, -INFINITY, 2.5f};

}  // namespace

TEST(SamplerTest, ArgmaxTiesAndNan) {
  EXPECT_EQ(argmax(kLogits.data(), 8), 1);
  const std::vector<float> nan = {NAN, -5.0f, NAN, -4.0f};
  EXPECT_EQ(argmax(nan.data(), 4), 3);
  const std::vector<float> all_nan = {NAN, NAN};
  EXPECT_EQ(argmax(all_nan.data(), 2), 0);
}

TEST(SamplerTest, TemperatureIsSoftmaxOfScaledLogits) {
  for (double t : {0.3, 1.0, 2.5}) {
    const auto probs = sampling_probs(kLogits.data(), 8, params(t));
    const auto ref = softmax(kLogits, t);
    ASSERT_EQ(probs.size(), 7u);  // -inf dropped
    double total = 0;
    for (const auto& [id, p] : probs) {
      EXPECT_NEAR(p, ref[id], 1e-12) << id;
      total += p;
    }
    EXPECT_NEAR(total, 1.0, 1e-12);
    EXPECT_EQ(probs[0].first, 1);  // tie 1 vs 3: lower id first
    EXPECT_EQ(probs[1].first, 3);
  }
}

TEST(SamplerTest, TopKTopPMinP) {
  auto ids = [](const std::vector<std::pair<int32_t, double>>& v) {
    std::vector<int32_t> out;
    for (const auto& [id, p] : v) out.push_back(id);
    return out;
  };
  EXPECT_EQ(ids(sampling_probs(kLogits.data(), 8, params(1, 3))), (std::vector<int32_t>{1, 3, 7}));
  const auto ref = softmax(kLogits, 1);
  // top-p: 1 and 3 hold 2 * 0.29 = 0.58; with 7 (0.176) 0.76.
  EXPECT_EQ(ids(sampling_probs(kLogits.data(), 8, params(1, 0, 0.5))), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(ids(sampling_probs(kLogits.data(), 8, params(1, 0, ref[1] + ref[3] + 1e-9))),
            (std::vector<int32_t>{1, 3, 7}));
  EXPECT_EQ(ids(sampling_probs(kLogits.data(), 8, params(1, 0, 1e-6))), (std::vector<int32_t>{1}));
  // min-p 0.5: keep p >= 0.5 * p_max: logits >= 3 - ln 2 = 2.31 -> 1, 3, 7.
  EXPECT_EQ(ids(sampling_probs(kLogits.data(), 8, params(1, 0, 1, 0.5))),
            (std::vector<int32_t>{1, 3, 7}));
  const auto renorm = sampling_probs(kLogits.data(), 8, params(1, 2));
  EXPECT_NEAR(renorm[0].second, 0.5, 1e-12);
  EXPECT_EQ(sampling_probs(kLogits.data(), 8, params(0)).size(), 1u);
}

TEST(SamplerTest, DrawsFollowTheDistribution) {
  // Chi-square goodness of fit over 200k seeded draws; a wrong CDF walk or distribution fails.
  for (const SamplingParams& sp : {params(1), params(0.7, 4), params(1.5, 0, 0.9)}) {
    const auto probs = sampling_probs(kLogits.data(), 8, sp);
    Generator gen(1234);
    std::map<int32_t, int> counts;
    const int n = 200000;
    for (int i = 0; i < n; ++i) ++counts[sample(kLogits.data(), 8, sp, gen, i)];  // a position each
    double chi2 = 0;
    for (const auto& [id, p] : probs) {
      const double expected = p * n;
      chi2 += (counts[id] - expected) * (counts[id] - expected) / expected;
      counts.erase(id);
    }
    EXPECT_TRUE(counts.empty()) << "drew a token outside the distribution";
    // 99.9th percentile of chi-square with <= 6 degrees of freedom is 22.5.
    EXPECT_LT(chi2, 22.5) << "temperature " << sp.temperature;
  }
}

TEST(SamplerTest, DrawsAreAFunctionOfSeedAndPosition) {
  Generator a(7), b(7), c(8);
  std::vector<int32_t> ta, tb, tc;
  for (int i = 0; i < 50; ++i) {
    ta.push_back(sample(kLogits.data(), 8, params(1), a, i));
    tb.push_back(sample(kLogits.data(), 8, params(1), b, i));
    tc.push_back(sample(kLogits.data(), 8, params(1), c, i));
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
  // in any order, any number of times: the position names the draw (counter-based)
  for (int i = 49; i >= 0; --i) EXPECT_EQ(sample(kLogits.data(), 8, params(1), a, i), ta[i]);
  EXPECT_EQ(sample(kLogits.data(), 8, params(0), a, 0), 1);  // greedy: the argmax
  // the streams of one position are distinct numbers
  EXPECT_NE(a.uniform(3, Stream::kToken), a.uniform(3, Stream::kAccept));
  EXPECT_NE(a.uniform(3, Stream::kAccept), a.uniform(3, Stream::kResidual));
  EXPECT_NE(a.uniform(3, Stream::kToken, 0), a.uniform(3, Stream::kToken, 1));
  EXPECT_NE(a.uniform(3, Stream::kToken), a.uniform(4, Stream::kToken));
}

TEST(SamplerTest, UniformsAreUniformAndInRange) {
  Generator g(99);
  const int n = 100000, bins = 20;
  std::vector<int> counts(bins, 0);
  for (int i = 0; i < n; ++i) {
    const double u = g.uniform(i, Stream::kAccept);
    ASSERT_GT(u, 0.0);
    ASSERT_LE(u, 1.0);
    ++counts[std::min(bins - 1, static_cast<int>(u * bins))];
  }
  double chi2 = 0;
  for (int c : counts) chi2 += (c - n / bins) * (c - n / bins) / static_cast<double>(n / bins);
  EXPECT_LT(chi2, 43.8);  // 99.9th percentile, 19 degrees of freedom
}

// The race couples distributions: raced with the same numbers, two close distributions pick the
// same token far more often than independent draws would, and identical ones always do.
TEST(SamplerTest, RaceCouplesCloseDistributions) {
  const std::vector<std::pair<int32_t, double>> p = {{0, 0.5}, {1, 0.3}, {2, 0.2}};
  const std::vector<std::pair<int32_t, double>> q = {{0, 0.45}, {1, 0.35}, {2, 0.2}};
  Generator g(5);
  int same_pq = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(race(p, g, i), race(p, g, i));
    same_pq += race(p, g, i) == race(q, g, i) ? 1 : 0;
  }
  // independent draws agree with probability sum p*q = 0.37; the optimal coupling 1 - TV = 0.95;
  // the race's lower bound (1 - TV) / (1 + TV) = 0.905
  EXPECT_GT(same_pq, 0.9 * n);
}

// The race's bound skips logarithms, never a winner: it equals the plain argmin of every key.
TEST(SamplerTest, RaceEqualsArgminOfEveryKey) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 3000);
    const double spread = (trial % 4) * 3.0;  // flat to peaked
    std::normal_distribution<double> normal(0.0, spread);
    std::vector<std::pair<int32_t, double>> probs;
    std::vector<double> dense(static_cast<size_t>(n), 0.0);
    double total = 0;
    for (int i = 0; i < n; ++i) {
      const double w = (trial % 5 == 0 && i % 3 == 0) ? 0.0 : std::exp(normal(rng));
      probs.emplace_back(i, w);
      total += w;
    }
    if (total == 0) continue;
    for (auto& [id, w] : probs) dense[static_cast<size_t>(id)] = (w /= total);
    std::shuffle(probs.begin(), probs.end(), rng);
    const Generator g(1000 + trial);
    for (int64_t pos = 0; pos < 25; ++pos) {
      int32_t want = -1;
      double best = INFINITY;
      for (int i = 0; i < n; ++i) {
        if (dense[i] <= 0) continue;
        const double key = -std::log(g.uniform(pos, Stream::kToken, static_cast<uint64_t>(i))) / dense[i];
        if (key < best) best = key, want = i;
      }
      ASSERT_EQ(race(probs, g, pos), want) << "trial " << trial << " position " << pos;
      ASSERT_EQ(race_dense(dense, g, pos), want) << "trial " << trial << " position " << pos;
    }
  }
}

// candidate_probs is sampling_probs without the sort: the same ids with the same probabilities.
TEST(SamplerTest, CandidateProbsAreSamplingProbsUnsorted) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.f, 2.f);
  std::vector<float> logits(5000);
  for (float& x : logits) x = normal(rng);
  logits[7] = logits[8];  // a tie at the top-k cut is settled alike
  for (const SamplingParams& sp : {params(1), params(0.7, 40), params(1.2, 0, 0.9), params(0.9, 100, 0.95, 0.05),
                                   params(1, 0, 1, 0.2)}) {
    auto a = sampling_probs(logits.data(), 5000, sp);
    auto b = candidate_probs(logits.data(), 5000, sp);
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].first, b[i].first);
      EXPECT_NEAR(a[i].second, b[i].second, 1e-12);
    }
  }
}

TEST(SamplerTest, LogprobsOfRawLogits) {
  const Logprobs lp = logprobs(kLogits.data(), 8, 3, {4, 6});
  const auto ref = softmax(kLogits, 1);
  ASSERT_EQ(lp.top.size(), 3u);
  EXPECT_EQ(lp.top[0].first, 1);
  EXPECT_EQ(lp.top[1].first, 3);
  EXPECT_EQ(lp.top[2].first, 7);
  EXPECT_NEAR(lp.top[0].second, std::log(ref[1]), 1e-12);
  EXPECT_NEAR(lp.of_ids[0], std::log(ref[4]), 1e-12);
  EXPECT_EQ(lp.of_ids[1], -INFINITY);
  EXPECT_EQ(lp.ranks_of_ids, (std::vector<int64_t>{7, 8}));
  EXPECT_THROW(logprobs(kLogits.data(), 8, 1, {8}), ConfigError);
}

TEST(SamplerTest, BadParamsNameTheField) {
  auto field = [](SamplingParams p) {
    try {
      p.validate();
    } catch (const ConfigError& e) {
      return e.field();
    }
    return std::string("none");
  };
  EXPECT_EQ(field(params(-1)), "temperature");
  EXPECT_EQ(field(params(NAN)), "temperature");
  EXPECT_EQ(field(params(1, -2)), "top_k");
  EXPECT_EQ(field(params(1, 0, 0)), "top_p");
  EXPECT_EQ(field(params(1, 0, 1.5)), "top_p");
  EXPECT_EQ(field(params(1, 0, 1, 2)), "min_p");
  EXPECT_EQ(field(params(0.8, 5, 0.9, 0.1)), "none");
}

// Structured outputs' token bitmask against a plain per-token reference, for vocabularies that
// end inside a word, on a word boundary, and past the mask's words (those tokens not allowed),
// with all-allowed, all-forbidden and random words.
class TokenBitmaskTest : public ::testing::TestWithParam<std::pair<int64_t, int64_t>> {};

TEST_P(TokenBitmaskTest, MatchesPerTokenReference) {
  const auto [vocab, words] = GetParam();
  std::mt19937 rng(static_cast<uint32_t>(vocab * 131 + words));
  std::vector<int32_t> mask(static_cast<size_t>(words));
  for (int64_t w = 0; w < words; ++w) {
    const uint32_t bits = w % 5 == 0 ? 0xFFFFFFFFu : w % 5 == 1 ? 0u : static_cast<uint32_t>(rng());
    mask[static_cast<size_t>(w)] = static_cast<int32_t>(bits);
  }
  std::vector<float> logits(static_cast<size_t>(vocab));
  for (auto& x : logits) x = std::uniform_real_distribution<float>(-4, 4)(rng);
  std::vector<float> want = logits;
  for (int64_t i = 0; i < vocab; ++i) {
    const bool allowed = i < 32 * words && ((static_cast<uint32_t>(mask[static_cast<size_t>(i / 32)]) >> (i % 32)) & 1u);
    if (!allowed) want[static_cast<size_t>(i)] = -INFINITY;
  }
  apply_token_bitmask(logits.data(), vocab, mask.data(), words);
  for (int64_t i = 0; i < vocab; ++i) EXPECT_EQ(logits[static_cast<size_t>(i)], want[static_cast<size_t>(i)]) << i;
}

INSTANTIATE_TEST_SUITE_P(Shapes, TokenBitmaskTest,
                         ::testing::Values(std::pair<int64_t, int64_t>{1, 1}, std::pair<int64_t, int64_t>{31, 1},
                                           std::pair<int64_t, int64_t>{64, 2}, std::pair<int64_t, int64_t>{100, 4},
                                           std::pair<int64_t, int64_t>{100, 2}, std::pair<int64_t, int64_t>{1000, 0},
                                           std::pair<int64_t, int64_t>{151936, 4748}));

TEST(SamplerTest, MaskedLogitsAreNeverSampled) {
  std::vector<float> logits = {5, 1, 4, 3, 2, 0, 6, 1};
  const int32_t mask = 0b00011010;  // tokens 1, 3, 4
  apply_token_bitmask(logits.data(), 8, &mask, 1);
  EXPECT_EQ(argmax(logits.data(), 8), 3);
  const Generator gen(7);
  for (int64_t pos = 0; pos < 200; ++pos) {
    const int32_t t = sample(logits.data(), 8, params(1.5, 0, 0.9), gen, pos);
    EXPECT_TRUE(t == 1 || t == 3 || t == 4) << t;
  }
  const Logprobs lp = logprobs(logits.data(), 8, 3, {0, 3});
  EXPECT_EQ(lp.of_ids[0], -INFINITY);
  EXPECT_LT(lp.of_ids[1], 0.0);
}

TEST(SamplerTest, TokenLogprobIsLogprobsOfIds) {
  std::mt19937 rng(3);
  std::vector<float> logits(1000);
  for (auto& x : logits) x = std::uniform_real_distribution<float>(-6, 6)(rng);
  logits[7] = -INFINITY;
  logits[9] = NAN;
  for (int32_t id : {0, 5, 7, 9, 999}) {
    const Logprobs lp = logprobs(logits.data(), 1000, 0, {id});
    const double got = token_logprob(logits.data(), 1000, id);
    if (std::isinf(lp.of_ids[0])) {
      EXPECT_EQ(got, lp.of_ids[0]) << id;
    } else {
      EXPECT_NEAR(got, lp.of_ids[0], 1e-12) << id;
    }
  }
  EXPECT_THROW(token_logprob(logits.data(), 1000, 1000), ConfigError);
}
