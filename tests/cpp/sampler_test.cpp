// Host sampler: greedy, temperature / min-p / top-k / top-p distributions, seeded draws checked
// statistically against the distribution they claim, and raw log-probabilities.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

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
    for (int i = 0; i < n; ++i) ++counts[sample(kLogits.data(), 8, sp, gen)];
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

TEST(SamplerTest, SeedReproducesGreedyDrawsNothing) {
  Generator a(7), b(7), c(8);
  std::vector<int32_t> ta, tb, tc;
  for (int i = 0; i < 50; ++i) {
    ta.push_back(sample(kLogits.data(), 8, params(1), a));
    tb.push_back(sample(kLogits.data(), 8, params(1), b));
    tc.push_back(sample(kLogits.data(), 8, params(1), c));
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
  Generator g(7);
  EXPECT_EQ(sample(kLogits.data(), 8, params(0), g), 1);
  EXPECT_EQ(sample(kLogits.data(), 8, params(1), g), ta[0]);  // greedy consumed no draw
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
