// cpp/spec: SpeculativeConfig validation, n-gram lookup (vLLM's cases), the suffix trie, the
// rejection sampler (greedy cases; stochastic output distribution on synthetic rows), metrics.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <random>

#include "common/errors.h"
#include "spec_decode/adaptive.h"
#include "spec_decode/config.h"
#include "spec_decode/metrics.h"
#include "spec_decode/proposers/hybrid.h"
#include "spec_decode/proposers/ngram.h"
#include "spec_decode/proposers/suffix.h"
#include "spec_decode/rejection.h"

using namespace specdec;
using namespace specdec::spec_decode;

namespace {

void expect_config_error(const std::string& json, const std::string& field) {
  try {
    SpeculativeConfig::from_json_text(json);
    FAIL() << "accepted: " << json;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(SpecConfig, DefaultsAndInference) {
  auto c = SpeculativeConfig::from_json_text(R"({"model": "[ngram]", "num_speculative_tokens": 3})");
  EXPECT_EQ(c.method, "ngram");
  EXPECT_EQ(c.prompt_lookup_min, 5);
  EXPECT_EQ(c.prompt_lookup_max, 5);
  c = SpeculativeConfig::from_json_text(R"({"model": "d.gguf", "num_speculative_tokens": 3, "attention_backend": "Auto"})");
  EXPECT_EQ(c.method, "draft_model");
  EXPECT_TRUE(c.attention_backend.empty());
  c = SpeculativeConfig::from_json_text(R"({"method": "suffix", "suffix_decoding_max_tree_depth": 12})");
  EXPECT_EQ(c.num_speculative_tokens, 12);
  c = SpeculativeConfig::from_json_text(R"({"model": "d", "num_speculative_tokens": 2, "draft_kv_cache_memory_bytes": "1.5GiB"})");
  EXPECT_EQ(c.draft_kv_cache_memory_bytes, int64_t{3} << 29);
}

TEST(SpecConfig, ErrorsNameTheField) {
  expect_config_error("{}", "speculative_config.method");
  expect_config_error(R"({"method": "eagle", "num_speculative_tokens": 2})", "speculative_config.method = eagle");
  expect_config_error(R"({"method": "ngram", "num_speculative_tokens": 0})", "num_speculative_tokens = 0");
  expect_config_error(R"({"method": "ngram", "num_speculative_tokens": true})", "num_speculative_tokens = true");
  expect_config_error(R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 6, "prompt_lookup_max": 3})",
                      "prompt_lookup_min = 6");
  expect_config_error(R"({"model": "d", "num_speculative_tokens": 2, "attention_backend": "nope"})", "attention_backend = nope");
  expect_config_error(R"({"method": "ngram", "num_speculative_tokens": 2, "bogus": 1})", "speculative_config.bogus");
  expect_config_error(R"({"method": "suffix", "suffix_decoding_min_token_prob": -0.1})", "suffix_decoding_min_token_prob");
  expect_config_error("[1]", "speculative_config");
  expect_config_error("{", "speculative_config");
}

TEST(SpecNgram, MatchesVllmCases) {
  EXPECT_EQ(ngram_lookup({1, 2, 3, 4, 1, 2, 3}, 2, 2, 3), (std::vector<int32_t>{4, 1, 2}));
  EXPECT_EQ(ngram_lookup({1, 2, 3, 4, 1, 2, 3}, 4, 4, 2), (std::vector<int32_t>{}));
  EXPECT_EQ(ngram_lookup({2, 3, 4, 5, 1, 2, 3, 4, 1, 2, 3, 4}, 3, 4, 2), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(ngram_lookup({1, 2, 3, 100, 1, 2, 3, 200, 1, 2, 3, 300, 1, 2, 3}, 3, 3, 2),
            (std::vector<int32_t>{100, 1}));
  EXPECT_EQ(ngram_lookup({1, 3, 6, 2, 3, 4, 1, 2, 3}, 1, 1, 2), (std::vector<int32_t>{6, 2}));
  EXPECT_THROW(NgramProposer(3, 2), ConfigError);
}

TEST(SpecSuffix, TrieCountsAndRemoval) {
  SuffixTrie t(4);
  const std::vector<int32_t> a = {1, 2, 3, 1, 2, 4, 1, 2};
  t.extend(0, a, 0, a.size());
  // after "1 2" the continuations were 3 and 4 once each: ties go to the lower id
  auto s = t.speculate({9, 1, 2}, 2, 4.0, 0.0);
  EXPECT_EQ(s.match_len, 2);
  ASSERT_FALSE(s.tokens.empty());
  EXPECT_EQ(s.tokens[0], 3);
  // min_token_prob 0.6 stops at the 50/50 branch
  EXPECT_TRUE(t.speculate({9, 1, 2}, 2, 4.0, 0.6).tokens.empty());
  const size_t nodes = t.num_nodes();
  const std::vector<int32_t> b = {7, 8, 9};
  t.extend(1, b, 0, b.size());
  t.forget(1);
  EXPECT_GT(t.num_nodes(), nodes);
  t.remove(1, b);
  EXPECT_EQ(t.num_nodes(), nodes);
}

TEST(SpecRejection, Greedy) {
  const std::vector<int32_t> argmax = {1, 2, 3, 4};
  auto r = verify_greedy({1, 2, 3}, argmax.data());
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(r.num_accepted, 3);
  const std::vector<int32_t> other = {1, 5, 3, 4};
  r = verify_greedy({1, 2, 3}, other.data());
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{1, 5}));
  EXPECT_EQ(r.num_accepted, 1);
}

// The first output token of speculative sampling is distributed as p (row 0), whatever q is,
// with draft probabilities and with point masses, by rejection sampling and coupled.
class SpecRejectionDistribution : public ::testing::TestWithParam<std::tuple<bool, bool>> {};

TEST_P(SpecRejectionDistribution, OutputEqualsTarget) {
  const auto [with_probs, coupled] = GetParam();
  const int64_t V = 5;
  const std::vector<float> logits = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f,   // row 0
                                     0.3f, 0.3f, 0.3f, 0.3f, 0.3f};  // row 1 (bonus)
  std::vector<double> p(V);
  double z = 0;
  for (int64_t i = 0; i < V; ++i) z += std::exp(logits[i]);
  for (int64_t i = 0; i < V; ++i) p[i] = std::exp(logits[i]) / z;
  const std::vector<float> q = {0.05f, 0.6f, 0.2f, 0.05f, 0.1f};  // far from p
  sampling::SamplingParams params;
  sampling::Generator gen(7, coupled);
  std::mt19937 draw(3);
  std::discrete_distribution<int> qd(q.begin(), q.end());
  const int n = 60000;
  std::vector<double> counts(V, 0);
  int accepted = 0;
  for (int i = 0; i < n; ++i) {
    Draft d;
    d.tokens = {with_probs ? qd(draw) : static_cast<int32_t>(draw() % V)};
    if (with_probs) {
      d.probs = q;
      d.vocab_size = V;
    }
    const VerifyResult r = verify_sampled(d, logits.data(), V, params, gen, 2 * i);  // fresh positions
    ASSERT_EQ(r.tokens.size(), static_cast<size_t>(r.num_accepted) + 1);
    counts[r.tokens[0]] += 1;
    accepted += r.num_accepted;
    if (coupled) {  // the token plain decoding draws at that position, whatever the draft
      EXPECT_EQ(r.tokens[0], sampling::sample(logits.data(), V, params, gen, 2 * i));
    }
  }
  double tv = 0;
  for (int64_t i = 0; i < V; ++i) tv += std::abs(counts[i] / n - p[i]);
  EXPECT_LT(tv / 2, 0.01);
  EXPECT_GT(accepted, n / 10);  // drafts are accepted at all
}

INSTANTIATE_TEST_SUITE_P(DraftKinds, SpecRejectionDistribution,
                         ::testing::Combine(::testing::Bool(), ::testing::Bool()));

TEST(SpecMetrics, VllmDefinitions) {
  SpecDecodingStats s;
  EXPECT_TRUE(std::isnan(s.acceptance_rate()));
  EXPECT_EQ(s.mean_acceptance_length(), 1.0);
  s.observe_draft(3, 2);
  s.observe_draft(3, 0);
  s.observe_draft(0, 0);  // no draft: not a draft
  EXPECT_EQ(s.num_drafts, 2);
  EXPECT_EQ(s.num_draft_tokens, 6);
  EXPECT_EQ(s.num_accepted_tokens, 2);
  EXPECT_EQ(s.num_accepted_tokens_per_pos, (std::vector<int64_t>{1, 1, 0}));
  EXPECT_DOUBLE_EQ(s.mean_acceptance_length(), 2.0);
  EXPECT_DOUBLE_EQ(s.acceptance_rate_per_pos()[0], 0.5);
  EXPECT_THROW(s.observe_draft(2, 3), ConfigError);
}

// Adaptive k: synthetic costs and acceptance, the choices they imply.
namespace {
// Feeds `steps` steps of a request whose every draft token is accepted with probability `q`
// (deterministic pattern), forward cost base * (1 + slope * (rows - 1)), proposer cost per token.
void feed(AdaptiveK& a, const std::string& id, double q, double base, double slope, double per_token,
          int steps) {
  std::mt19937 rng(7);
  std::bernoulli_distribution accept(q);
  for (int s = 0; s < steps; ++s) {
    const int k = a.choose(id, a.max_k());
    if (k > 0) {
      int accepted = 0;  // each position accepted with probability q, up to the first rejection
      while (accepted < k && accept(rng)) ++accepted;
      a.observe_proposer(k, per_token * k);
      a.observe_draft(id, k, accepted);
    }
    a.observe_forward(1 + k, base * (1.0 + slope * k));
  }
}
}  // namespace

TEST(SpecAdaptive, CostsAreMeasuredAndInterpolated) {
  AdaptiveK a(8);
  EXPECT_LT(a.forward_seconds(1), 0);  // nothing measured
  a.observe_forward(1, 0.010);
  a.observe_forward(5, 0.014);
  EXPECT_DOUBLE_EQ(a.forward_seconds(1), 0.010);
  EXPECT_NEAR(a.forward_seconds(3), 0.012, 1e-12);  // interpolated
  EXPECT_NEAR(a.forward_seconds(9), 0.018, 1e-12);  // extrapolated with the measured slope
  a.observe_forward(1, 1.0);                         // an outlier is clipped at 2x
  EXPECT_LE(a.forward_seconds(1), 0.7 * 0.010 + 0.3 * 0.020 + 1e-12);
  a.observe_forward(5, 0.001);  // much faster than a first (kernel-building) sample: replaces it
  EXPECT_DOUBLE_EQ(a.forward_seconds(5), 0.001);
  EXPECT_EQ(a.proposer_seconds(3), 0.0);  // nothing measured: free
  a.observe_proposer(2, 0.004);
  a.observe_proposer(6, 0.008);
  EXPECT_NEAR(a.proposer_seconds(6), 0.008, 1e-12);
  EXPECT_NEAR(a.proposer_seconds(3), 0.006, 1e-12);  // the nearest size, in proportion
  // a request's first drafts include the drafter's prompt: that call is not counted
  (void)a.choose("new", 8);
  a.observe_proposer(6, 5.0);
  EXPECT_NEAR(a.proposer_seconds(6), 0.008, 1e-12);
  EXPECT_THROW(AdaptiveK(0), ConfigError);
}

TEST(SpecAdaptive, AcceptanceIsConditionalPerPosition) {
  AdaptiveK a(4);
  for (int i = 0; i < 30; ++i) a.observe_draft("r", 4, 4);  // everything accepted
  EXPECT_GT(a.expected_tokens("r", 4), 4.5);
  for (int i = 0; i < 30; ++i) a.observe_draft("r", 4, 0);  // nothing: adapts within the window
  EXPECT_LT(a.expected_tokens("r", 4), 1.7);  // later positions lean on the pool
  const auto q = a.acceptance("r");
  ASSERT_EQ(q.size(), 4u);
  EXPECT_LT(q[0], 0.2);
  a.forget("r");
  EXPECT_EQ(a.acceptance("r").size(), 4u);  // the pool's estimate again
}

TEST(SpecAdaptive, SpeculatesWhenVerifyIsCheapAndAcceptanceHigh) {
  AdaptiveK a(8);
  feed(a, "r", 0.9, 0.010, 0.05, 0.0, 40);  // cheap drafts (n-gram), verification ~free
  EXPECT_GE(a.choose("r", 8), 4);
}

TEST(SpecAdaptive, TurnsOffWhenDraftingCostsMoreThanItGains) {
  AdaptiveK a(6);
  // each draft token costs half a target forward, verification 3x for 4 rows, 30 % acceptance
  feed(a, "r", 0.3, 0.010, 0.7, 0.005, 60);
  EXPECT_EQ(a.choose("r", 6), 0);
  EXPECT_GT(a.num_off_steps(), 20);
  // it still probes now and then, backing off (8, 16, 32 ... plain steps between probes)
  int probes = 0;
  for (int i = 0; i < 200; ++i) probes += a.choose("r", 6) > 0;
  EXPECT_GE(probes, 2);
  EXPECT_LE(probes, 6);
  EXPECT_EQ(a.choose("r", 0), 0);  // no tokens left: never drafts
}

// Exploration is short and happens once: a request drafts whatever the estimates say only while the
// pool knows nothing of the proposer's acceptance, and then with k <= 2; a later request starts from
// the pool's estimates (here: drafts that do not pay, so it starts plain decoding at once).
TEST(SpecAdaptive, ExploresBrieflyOnlyWhileNothingIsKnown) {
  AdaptiveK a(6);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(a.choose("first", 6), 2) << "exploration draft " << i;
    a.observe_proposer(2, 1.0);  // the drafter's prompt, its first steps: not counted
    a.observe_draft("first", 2, 0);
    a.observe_forward(3, 0.030);
  }
  EXPECT_EQ(a.proposer_seconds(2), 0.0);
  EXPECT_EQ(a.choose("first", 6), 0) << "measures the plain forward once";
  a.observe_forward(1, 0.010);
  EXPECT_EQ(a.choose("first", 1), 0) << "nothing accepted, verification 3x: off";
  EXPECT_EQ(a.choose("second", 6), 0) << "a new request starts from the pool: no exploration";
  EXPECT_EQ(a.choose("second", 1), 0);
}

// A position no draft has reached takes the estimate of the last one reached: after 2-token drafts
// that were always accepted, longer drafts look as good and are taken where verification is cheap.
TEST(SpecAdaptive, UnseenPositionsTakeTheLastSeenEstimate) {
  AdaptiveK a(6);
  for (int i = 0; i < 6; ++i) a.observe_draft("r", 2, 2);
  const auto q = a.acceptance("r");
  ASSERT_EQ(q.size(), 6u);
  EXPECT_GT(q[1], 0.8);
  for (size_t i = 2; i < q.size(); ++i) EXPECT_DOUBLE_EQ(q[i], q[1]) << "position " << i;
  a.observe_forward(1, 0.010);
  a.observe_forward(3, 0.016);
  a.observe_proposer(2, 0.0002);
  EXPECT_GT(a.choose("r", 6), 2) << "with 1/2 for the unseen positions it would stop at 2";
  a.observe_draft("r", 6, 2);  // position 3 reached and rejected: measured from now on
  EXPECT_LT(a.acceptance("r")[2], q[2]);
}

// A position rejected during the short exploration does not keep k below it for good: after drafts
// accepted whole, the next one is a token longer, and the estimates then follow what it got.
TEST(SpecAdaptive, GrowsPastAPositionRejectedWhileExploring) {
  AdaptiveK a(6);
  for (int i = 0; i < 2; ++i) {  // exploration: the second token rejected both times
    ASSERT_EQ(a.choose("r", 6), 2);
    a.observe_proposer(2, 0.004);
    a.observe_draft("r", 2, 1);
    a.observe_forward(3, 0.0125);
  }
  ASSERT_EQ(a.choose("r", 6), 0);  // measures the plain forward
  a.observe_forward(1, 0.010);
  int longest = 0;
  for (int s = 0; s < 30; ++s) {  // from now on every draft token is accepted
    const int k = a.choose("r", 6);
    longest = std::max(longest, k);
    if (k > 0) {
      a.observe_proposer(k, 0.002 * k);
      a.observe_draft("r", k, k);
    }
    a.observe_forward(1 + k, 0.010 * (1.0 + 0.12 * k));
  }
  EXPECT_GE(longest, 4) << "stuck at short drafts";
}

// A request that starts drafting on the pool's estimates (no exploration of its own): its first
// proposer call holds the drafter's prompt and is not taken for a usual cost or a catch-up.
TEST(SpecAdaptive, ALaterRequestsFirstCallIsAPromptCall) {
  AdaptiveK a(4);
  feed(a, "r", 0.9, 0.010, 0.02, 0.001, 30);  // cheap drafts, mostly accepted: on
  const double usual = a.proposer_seconds(2);
  ASSERT_GT(usual, 0.0);
  // one plain step first (a batch whose forward is not measured yet), so that turning on would
  // otherwise count as a switch-on after a missed token
  ASSERT_EQ(a.choose("new", 4, /*batch_rows=*/16), 0);
  const int k = a.choose("new", 4);
  ASSERT_GT(k, 0) << "the pool's acceptance is high: drafts at once";
  const double before = a.proposer_seconds(k);
  a.observe_proposer(k, 5.0);  // the prompt's prefill
  EXPECT_NEAR(a.proposer_seconds(k), before, 1e-12);
  EXPECT_NEAR(a.proposer_seconds(2), usual, 1e-12);
  EXPECT_EQ(a.catch_up_seconds_per_token(), 0.0);
}

namespace {
// As feed, but a proposer call after plain steps costs `catch_up` seconds more per plain step since
// the last draft (a draft model first processing the tokens it has not seen). Returns how often
// speculation was turned on after plain steps; *drafting counts the steps that drafted.
int feed_with_catch_up(AdaptiveK& a, double q, double per_token, double catch_up, int steps, int* drafting) {
  std::mt19937 rng(11);
  std::bernoulli_distribution accept(q);
  int missed = 0, switch_ons = 0;
  for (int s = 0; s < steps; ++s) {
    const int k = a.choose("r", a.max_k());
    if (k > 0) {
      int accepted = 0;
      while (accepted < k && accept(rng)) ++accepted;
      a.observe_proposer(k, per_token * k + catch_up * missed);
      a.observe_draft("r", k, accepted);
      switch_ons += missed > 0 ? 1 : 0;
      missed = 0;
      ++*drafting;
    } else {
      ++missed;
    }
    a.observe_forward(1 + k, 0.010 * (1.0 + 0.1 * k));
  }
  return switch_ons;
}
}  // namespace

// A draft model's catch-up on turning back on (5 ms per missed token here) is measured at the probes
// and charged to the step that would turn speculation on: with acceptance that pays only while the
// drafter is warm, an idle request stays off where a free switch turns on.
TEST(SpecAdaptive, ChargesTheDraftersCatchUpToTurningOn) {
  AdaptiveK cheap(4), costly(4);
  int cheap_drafting = 0, costly_drafting = 0;
  (void)feed_with_catch_up(cheap, 0.9, 0.002, 0.0, 40, &cheap_drafting);  // on: usual costs measured
  (void)feed_with_catch_up(costly, 0.9, 0.002, 0.005, 40, &costly_drafting);
  (void)feed_with_catch_up(cheap, 0.02, 0.002, 0.0, 150, &cheap_drafting);  // then off, probing
  const int costly_ons = feed_with_catch_up(costly, 0.02, 0.002, 0.005, 150, &costly_drafting);
  EXPECT_LT(cheap.catch_up_seconds_per_token(), 0.0001);
  EXPECT_NEAR(costly.catch_up_seconds_per_token(), 0.005, 0.001);
  EXPECT_LE(costly_ons, 8) << "turned on only to probe (8, 16, 32 ... plain steps apart)";
  for (AdaptiveK* a : {&cheap, &costly}) {
    for (int i = 0; i < 10; ++i) {  // plain steps: the drafter falls 10 tokens behind
      ASSERT_EQ(a->choose("r", 4), 0);
      a->observe_forward(1, 0.010);
    }
    for (int i = 0; i < 12; ++i) a->observe_draft("r", 1, 1);  // the text became predictable
  }
  EXPECT_GT(cheap.choose("r", 4), 0) << "a free switch: on at once";
  const int64_t probes = costly.num_probes();
  const int k = costly.choose("r", 4);
  EXPECT_TRUE(k == 0 || costly.num_probes() == probes + 1) << "charged the catch-up: on only by a probe";
}

// A probe goes ahead only where its expected loss fits in 3 % of the plain steps since the last one:
// a proposer without catch-up keeps probing (8, 16, 32 ... steps apart); a draft model whose
// catch-up costs half a plain step per missed token (measured when it turns on) stops probing until
// 256 plain steps have passed.
TEST(SpecAdaptive, ProbesOnlyWhereTheProbeIsCheap) {
  AdaptiveK cheap(4), costly(4);
  int cheap_drafting = 0, costly_drafting = 0;
  for (AdaptiveK* a : {&cheap, &costly}) {  // on: the usual costs measured
    (void)feed_with_catch_up(*a, 0.9, 0.002, a == &cheap ? 0.0 : 0.005, 40, a == &cheap ? &cheap_drafting : &costly_drafting);
  }
  (void)feed_with_catch_up(cheap, 0.02, 0.002, 0.0, 40, &cheap_drafting);  // then off, a probe or two
  (void)feed_with_catch_up(costly, 0.02, 0.002, 0.005, 40, &costly_drafting);
  ASSERT_NEAR(costly.catch_up_seconds_per_token(), 0.005, 0.001) << "measured at its first probe";
  const int cheap_ons = feed_with_catch_up(cheap, 0.02, 0.002, 0.0, 200, &cheap_drafting);
  const int costly_ons = feed_with_catch_up(costly, 0.02, 0.002, 0.005, 200, &costly_drafting);
  EXPECT_GE(cheap_ons, 2);
  EXPECT_EQ(costly_ons, 0);
  const int later = feed_with_catch_up(costly, 0.02, 0.002, 0.005, 100, &costly_drafting);
  EXPECT_EQ(later, 1) << "after 256 plain steps it probes whatever it costs";
}

// The call that holds a new request's drafter prompt is never measured, whatever the order in which
// the step's requests were chosen (one switching back on, one new).
TEST(SpecAdaptive, APromptCallIsNeverTakenForACatchUp) {
  for (bool new_first : {true, false}) {
    AdaptiveK a(4);
    int drafting = 0;
    (void)feed_with_catch_up(a, 0.9, 0.002, 0.0, 40, &drafting);  // "r": usual costs measured
    // "r" turned off for good (nothing accepted), then a step where it probes beside a new request
    int plain = 0;
    for (int i = 0; i < 300 && plain < 20; ++i) {
      const int k = a.choose("r", 4);
      if (k > 0) {
        a.observe_proposer(k, 0.002 * k);
        a.observe_draft("r", k, 0);
        plain = 0;
      } else {
        ++plain;
      }
      a.observe_forward(1 + k, 0.010 * (1.0 + 0.1 * k));
    }
    for (int i = 0; i < 300; ++i) {  // plain steps until "r" is about to probe
      if (new_first) (void)a.choose("new" + std::to_string(i), 4);  // a new request: its prompt
      const int k = a.choose("r", 4);
      if (!new_first) (void)a.choose("new" + std::to_string(i), 4);
      a.observe_proposer(4 + k, 3.0);  // the prompt's prefill: seconds, not a catch-up
      a.observe_forward(1, 0.010);
      if (k > 0) break;
    }
    EXPECT_EQ(a.catch_up_seconds_per_token(), 0.0) << "new first: " << new_first;
    EXPECT_NEAR(a.proposer_seconds(2), 0.004, 0.001) << "nor a usual cost";
  }
}

// The margins, on exact estimates: k = 1 is taken while it beats plain decoding by more than 3 %
// (staying on), and once off, only when it beats it by more than 10 % (turning on).
TEST(SpecAdaptive, NeedsAMarginOverPlainDecoding) {
  AdaptiveK a(1);
  for (int i = 0; i < 2; ++i) {  // exploration: its proposer calls are not measured
    ASSERT_EQ(a.choose("r", 1), 1);
    a.observe_proposer(1, 1.0);
    a.observe_draft("r", 1, 0);
  }
  a.observe_proposer(1, 0.002);  // a usual call: 2 ms a draft token
  a.observe_forward(1, 0.010);
  const double q0 = a.acceptance("r")[0];
  auto gain = [](const AdaptiveK& b) {  // of k = 1 over plain decoding, on b's estimates
    return b.expected_tokens("r", 1) * b.forward_seconds(1) / (b.proposer_seconds(1) + b.forward_seconds(2));
  };
  {
    AdaptiveK b = a;
    b.observe_forward(2, (1.0 + q0) * 0.010 / 1.05 - 0.002);
    ASSERT_NEAR(gain(b), 1.05, 1e-9);
    EXPECT_EQ(b.choose("r", 1), 1) << "on, 5 % better: stays on";
  }
  AdaptiveK b = a;
  b.observe_forward(2, (1.0 + q0) * 0.010 / 1.01 - 0.002);
  ASSERT_NEAR(gain(b), 1.01, 1e-9);
  EXPECT_EQ(b.choose("r", 1), 0) << "on, 1 % better: off";
  bool refused_between = false;
  for (int i = 0; i < 8; ++i) {  // verification gets cheaper (another process left): the gain climbs
    b.observe_forward(2, (1.0 + q0) * 0.010 / 1.2 - 0.002);  // an EMA: 30 % of the way each time
    const double g = gain(b);
    const int k = b.choose("r", 1);
    if (g <= 1.10) {
      EXPECT_EQ(k, 0) << "off, " << g << "x: stays off";
      refused_between = refused_between || g > 1.03;
    } else {
      EXPECT_EQ(k, 1) << "off, " << g << "x: turns on";
      break;
    }
  }
  EXPECT_TRUE(refused_between) << "a gain that would keep it on did not turn it on";
}

// ---------------------------------------------------------------- the hybrid proposer's choice
namespace {

// Drafts from a script of the request's true continuation (`right`) or wrong tokens, and spends
// `cost_us` per call (busy, like a model's forward).
class ScriptedProposer final : public Proposer {
 public:
  ScriptedProposer(std::string name, std::vector<int32_t> script, bool right, int cost_us)
      : name_(std::move(name)), script_(std::move(script)), right_(right), cost_us_(cost_us) {}
  std::string name() const override { return name_; }
  std::vector<Draft> propose(const std::vector<ProposeRequest>& requests) override {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(cost_us_);
    while (std::chrono::steady_clock::now() < until) {
    }
    ++calls;
    std::vector<Draft> out(requests.size());
    for (size_t i = 0; i < requests.size(); ++i) {
      const size_t at = static_cast<size_t>(requests[i].sequence->size());
      for (int j = 0; j < requests[i].num_speculative_tokens && at + j < script_.size(); ++j) {
        out[i].tokens.push_back(right_ ? script_[at + j] : script_[at + j] + 1000);
      }
    }
    return out;
  }
  int calls = 0;

 private:
  std::string name_;
  std::vector<int32_t> script_;
  bool right_;
  int cost_us_;
};

// Runs `steps` engine steps of one request through `hybrid`: verification accepts the draft's
// prefix that matches the script (greedy), then the script's next token; `verify_us` between
// calls stands for the target's forward. Returns the steps run.
int run_steps(HybridProposer& hybrid, const std::vector<int32_t>& script, int k, int verify_us) {
  auto seq = std::make_shared<Sequence>("r", std::vector<int32_t>(script.begin(), script.begin() + 4));
  int steps = 0;
  while (seq->size() + k + 1 < static_cast<int64_t>(script.size())) {
    ProposeRequest req;
    req.sequence = seq;
    req.num_speculative_tokens = k;
    const Draft d = hybrid.propose({req})[0];
    size_t at = static_cast<size_t>(seq->size()), a = 0;
    while (a < d.tokens.size() && d.tokens[a] == script[at + a]) ++a;
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(verify_us);
    while (std::chrono::steady_clock::now() < until) {
    }
    for (size_t j = 0; j <= a; ++j) seq->append(script[at + j]);
    ++steps;
  }
  return steps;
}

}  // namespace

TEST(HybridProposer, TakesTheDraftThatIsRightWhenBothAreCheap) {
  std::vector<int32_t> script(400);
  for (size_t i = 0; i < script.size(); ++i) script[i] = static_cast<int32_t>(i % 97);
  auto wrong = std::make_shared<ScriptedProposer>("wrong", script, false, 0);
  auto right = std::make_shared<ScriptedProposer>("right", script, true, 0);
  HybridProposer h({wrong, right});
  const int steps = run_steps(h, script, 4, 300);
  const auto st = h.stats();
  EXPECT_GT(st[1].taken, 0.9 * steps) << st[1].taken << " of " << steps;
  EXPECT_LT(st[0].acceptance[0], 0.25);  // few observations: the estimate keeps its prior
  EXPECT_GT(st[1].acceptance[0], 0.9);
  // once the right part's draft is in hand first, the wrong one cannot beat it: only probes
  EXPECT_GT(wrong->calls, 1);
  EXPECT_LT(wrong->calls, steps / 2);
}

TEST(HybridProposer, SkipsACostlyPartThatCannotPayAndProbesItAgain) {
  std::vector<int32_t> script(300);
  for (size_t i = 0; i < script.size(); ++i) script[i] = static_cast<int32_t>(i % 89);
  // right, but a call costs 10 verifications: E(3) = 4 tokens for 11 units < 1 token per unit
  auto cheap = std::make_shared<ScriptedProposer>("cheap", script, false, 0);
  auto costly = std::make_shared<ScriptedProposer>("costly", script, true, 4000);
  HybridProposer slow({cheap, costly});
  const int steps = run_steps(slow, script, 3, 400);
  EXPECT_LT(costly->calls, steps / 4) << costly->calls << " of " << steps;
  EXPECT_GT(costly->calls, 1);  // measured, then probed again
  // the same part at a tenth of the cost pays (4 tokens for 2 units): it runs on most steps
  auto cheap2 = std::make_shared<ScriptedProposer>("cheap", script, false, 0);
  auto affordable = std::make_shared<ScriptedProposer>("affordable", script, true, 400);
  HybridProposer fast({cheap2, affordable});
  const int steps2 = run_steps(fast, script, 3, 400);
  EXPECT_GT(affordable->calls, steps2 / 2) << affordable->calls << " of " << steps2;
}

TEST(SpecConfig, HybridParts) {
  auto c = SpeculativeConfig::from_json_text(
      R"({"method": "hybrid", "num_speculative_tokens": 4, "proposers": [{"method": "suffix"},
          {"method": "draft_model", "model": "d.gguf", "num_speculative_tokens": 2}]})");
  ASSERT_EQ(c.proposers.size(), 2u);
  EXPECT_EQ(c.proposers[0].num_speculative_tokens, 4);  // the hybrid's
  EXPECT_EQ(c.proposers[1].num_speculative_tokens, 2);
  EXPECT_TRUE(c.uses_drafter());
  EXPECT_EQ(c.drafter_config().model, "d.gguf");
  expect_config_error(R"({"method": "hybrid", "num_speculative_tokens": 2, "proposers": [{"method": "suffix"},
      {"method": "custom", "model": "m:C"}]})", "proposers[1].method = custom");
  expect_config_error(R"({"method": "hybrid", "num_speculative_tokens": 2, "proposers": [{"method": "suffix"},
      {"method": "ngram", "bogus": 1}]})", "speculative_config.proposers[1].bogus");
}

TEST(HybridProposer, EachPartDraftsAtMostItsOwnTokens) {
  struct Asked final : public Proposer {
    std::string name() const override { return "asked"; }
    std::vector<Draft> propose(const std::vector<ProposeRequest>& requests) override {
      for (const auto& r : requests) most = std::max(most, r.num_speculative_tokens);
      return std::vector<Draft>(requests.size());
    }
    int most = 0;
  };
  auto a = std::make_shared<Asked>(), b = std::make_shared<Asked>();
  HybridProposer h({a, b}, {2, 5});
  ProposeRequest req;
  req.sequence = std::make_shared<Sequence>("r", std::vector<int32_t>{1, 2, 3});
  req.num_speculative_tokens = 4;
  h.propose({req});
  EXPECT_EQ(a->most, 2);  // its own 2
  EXPECT_EQ(b->most, 4);  // the 4 asked, below its 5
  EXPECT_THROW(HybridProposer({a, b}, {2}), ConfigError);
}
