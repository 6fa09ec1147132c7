// argmax, top_k, logsumexp_rows and log_softmax_rows against ops::ref over vocabularies up to
// Gemma's 262144 and rows 1..64, on random logits and on hard rows (ties, NaN, -0 / +0, +-inf,
// a row of one value, ascending rows that defeat top_k's first bound, few distinct values);
// batch invariance (bitwise); argument errors.
// top_k runs both kernels (heap and work-group).
// Tolerances: argmax and top_k ids exact, top_k values bitwise; lse |d| <= 2e-7 * max(1, |lse|)
// (exp of two libms, sums in double), log_softmax the same on each element.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <tuple>

#include "common/errors.h"
#include "ops/reference.h"
#include "ops/sampling.h"
#include "ops_test_util.h"

using namespace specdec;
using namespace specdec::ops;
using namespace specdec::ops::testing;

namespace {

enum class Rows { kRandom, kHard };

// Row r of a [rows, vocab] matrix of kind `kind`: random logits, or one of the hard rows.
std::vector<float> make_logits(int rows, int vocab, Rows kind, std::mt19937& rng) {
  auto x = random_floats(static_cast<size_t>(rows) * vocab, rng, 3.0f);
  if (kind == Rows::kRandom) return x;
  std::uniform_int_distribution<int> pick(0, vocab - 1);
  for (int r = 0; r < rows; ++r) {
    float* row = x.data() + static_cast<size_t>(r) * vocab;
    switch (r % 10) {
      case 0:
        std::fill(row, row + vocab, 0.25f);
        break;  // one value
      case 1:
        for (int i = 0; i < vocab; ++i) row[i] = static_cast<float>(i);
        break;  // ascending
      case 2:
        for (int i = 0; i < vocab; ++i) row[i] = static_cast<float>(pick(rng) % 4);
        break;  // 4 values
      case 3:
        for (int i = 0; i < vocab; i += 3) row[i] = NAN;
        break;  // NaN among numbers
      case 4:
        std::fill(row, row + vocab, NAN);
        break;  // all NaN
      case 5:
        std::fill(row, row + vocab, -INFINITY);
        row[vocab - 1] = -0.0f;
        row[vocab / 2] = 0.0f;
        break;
      case 6:
        std::fill(row, row + vocab, -INFINITY);
        break;
      case 7:
        row[pick(rng)] = INFINITY;
        row[vocab - 1] = 50.0f;
        break;
      case 8:
        row[vocab - 1] = 100.0f;
        row[0] = 100.0f;
        break;  // tie, first and last
      default:
        for (int i = 0; i < vocab; ++i) row[i] = static_cast<float>(vocab - i) * 1e-3f;
        break;
    }
  }
  return x;
}

using Param = std::tuple<int /*vocab*/, int /*rows*/, Rows>;

class Sampling : public ::testing::TestWithParam<Param> {};

TEST_P(Sampling, ArgmaxExact) {
  const auto [vocab, rows, kind] = GetParam();
  std::mt19937 rng(vocab + rows);
  const auto x = make_logits(rows, vocab, kind, rng);
  std::vector<int32_t> want(rows);
  ref::argmax(x, want, rows, vocab);
  const device::Buffer xb = upload(x), ib = upload(std::vector<int32_t>(rows));
  argmax(dev(), xb, ib, rows, vocab);
  EXPECT_EQ(download<int32_t>(ib, rows), want);
}

TEST_P(Sampling, TopKExact) {
  const auto [vocab, rows, kind] = GetParam();
  std::mt19937 rng(vocab * 3 + rows);
  const auto x = make_logits(rows, vocab, kind, rng);
  for (int k : {1, 5, 20, 64, 128}) {
    if (k > vocab) continue;
    for (const char* kernel : {"heap", "group"}) {
      setenv("SPECDEC_OPS_TOPK", kernel, 1);
      const size_t n = static_cast<size_t>(rows) * k;
      std::vector<float> wv(n);
      std::vector<int32_t> wi(n);
      ref::top_k(x, wv, wi, rows, vocab, k);
      const device::Buffer xb = upload(x), vb = upload(std::vector<float>(n)),
                        ib = upload(std::vector<int32_t>(n));
      top_k(dev(), xb, vb, ib, rows, vocab, k);
      EXPECT_EQ(download<int32_t>(ib, n), wi) << kernel << " k " << k;
      EXPECT_TRUE(bitwise_equal(download<float>(vb, n), wv)) << kernel << " k " << k;
    }
  }
  unsetenv("SPECDEC_OPS_TOPK");
}

TEST_P(Sampling, LogsumexpAndLogSoftmax) {
  const auto [vocab, rows, kind] = GetParam();
  std::mt19937 rng(vocab * 5 + rows);
  const auto x = make_logits(rows, vocab, kind, rng);
  std::vector<float> want_lse(rows), want_out(x.size());
  ref::log_softmax_rows(x, want_out, want_lse, rows, vocab);
  const device::Buffer xb = upload(x), lb = upload(std::vector<float>(rows)),
                    ob = upload(std::vector<float>(x.size()));
  logsumexp_rows(dev(), xb, lb, rows, vocab);
  const auto lse = download<float>(lb, rows);
  for (int r = 0; r < rows; ++r) {
    if (std::isnan(want_lse[r]) || std::isinf(want_lse[r])) {
      EXPECT_TRUE(same_bits(lse[r], want_lse[r]))
          << "row " << r << ": " << lse[r] << " vs " << want_lse[r];
    } else {
      EXPECT_NEAR(lse[r], want_lse[r], 2e-7 * std::max(1.0f, std::abs(want_lse[r]))) << "row " << r;
    }
  }
  log_softmax_rows(dev(), xb, xb, lb, rows, vocab);  // in place
  const auto out = download<float>(xb, x.size());
  EXPECT_TRUE(bitwise_equal(download<float>(lb, rows), lse))
      << "log_softmax_rows writes the same lse";
  size_t bad = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const float w = want_out[i];
    const bool ok =
        (std::isnan(w) || std::isinf(w))
            ? same_bits(out[i], w)
            : std::abs(out[i] - w) <=
                  2e-7 * std::max(1.0f, std::abs(want_lse[i / vocab])) + 1e-7 * std::abs(w);
    bad += ok ? 0 : 1;
  }
  EXPECT_EQ(bad, 0u);
}

INSTANTIATE_TEST_SUITE_P(Small, Sampling,
                         ::testing::Combine(::testing::Values(1, 7, 16, 64, 100, 512, 4099),
                                            ::testing::Values(1, 11, 64),
                                            ::testing::Values(Rows::kRandom, Rows::kHard)));
INSTANTIATE_TEST_SUITE_P(Vocab, Sampling,
                         ::testing::Combine(::testing::Values(32000, 49152, 151936, 262144),
                                            ::testing::Values(1, 11),
                                            ::testing::Values(Rows::kRandom, Rows::kHard)));

// A row's results alone, first in a batch of 64 and third in a batch of 5 are bitwise the same.
TEST(Sampling, RowIsBitwiseTheSameAloneAndInAnyBatch) {
  for (int vocab : {151936, 262144}) {
    std::mt19937 rng(vocab);
    const int rows = vocab > 200000 ? 24 : 64, k = 50;
    const auto x = random_floats(static_cast<size_t>(rows) * vocab, rng, 4.0f);
    const device::Buffer xb = upload(x);
    struct Out {
      std::vector<float> lse, values, logprobs;
      std::vector<int32_t> argmax, ids;
    };
    auto run = [&](const device::Buffer& in, int64_t first_row, int n, int row_of_interest) {
      const device::Buffer lb = upload(std::vector<float>(n)), ab = upload(std::vector<int32_t>(n)),
                        vb = upload(std::vector<float>(n * k)),
                        ib = upload(std::vector<int32_t>(n * k)),
                        ob = upload(std::vector<float>(static_cast<size_t>(n) * vocab));
      const Slice at(in, first_row * vocab);
      logsumexp_rows(dev(), at, lb, n, vocab);
      argmax(dev(), at, ab, n, vocab);
      top_k(dev(), at, vb, ib, n, vocab, k);
      log_softmax_rows(dev(), at, ob, lb, n, vocab);
      const size_t r = static_cast<size_t>(row_of_interest);
      return Out{download<float>(lb, 1, r), download<float>(vb, k, r * k),
                 download<float>(ob, static_cast<size_t>(vocab), r * vocab),
                 download<int32_t>(ab, 1, r), download<int32_t>(ib, k, r * k)};
    };
    for (int r : {0, 13, rows - 1}) {
      const Out batch = run(xb, 0, rows, r);
      const Out alone = run(xb, r, 1, 0);
      auto other = random_floats(static_cast<size_t>(5) * vocab, rng, 4.0f);
      std::copy_n(x.begin() + static_cast<size_t>(r) * vocab, vocab, other.begin() + 2 * vocab);
      const Out mixed = run(upload(other), 0, 5, 2);
      for (const Out* o : {&alone, &mixed}) {
        EXPECT_TRUE(bitwise_equal(o->lse, batch.lse)) << "vocab " << vocab << " row " << r;
        EXPECT_TRUE(bitwise_equal(o->logprobs, batch.logprobs))
            << "vocab " << vocab << " row " << r;
        EXPECT_TRUE(bitwise_equal(o->values, batch.values));
        EXPECT_EQ(o->argmax, batch.argmax);
        EXPECT_EQ(o->ids, batch.ids);
      }
    }
  }
}

TEST(Sampling, BadArgumentsNameTheField) {
  const device::Buffer x = upload(std::vector<float>(64)), i = upload(std::vector<int32_t>(8));
  auto field_of = [](auto&& f) {
    try {
      f();
    } catch (const ConfigError& e) {
      return e.field();
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(field_of([&] { argmax(dev(), x, i, 2, 0); }), "argmax.vocab");
  EXPECT_EQ(field_of([&] { argmax(dev(), x, i, 2, 33); }), "argmax.logits");
  EXPECT_EQ(field_of([&] { argmax(dev(), x, i, 9, 4); }), "argmax.ids");
  EXPECT_EQ(field_of([&] { top_k(dev(), x, x, i, 1, 64, 0); }), "top_k.k");
  EXPECT_EQ(field_of([&] { top_k(dev(), x, x, i, 1, 16, 17); }), "top_k.k");
  EXPECT_EQ(field_of([&] { top_k(dev(), x, x, i, 2, 32, 5); }), "top_k.ids");
  EXPECT_EQ(field_of([&] { logsumexp_rows(dev(), x, Slice(x, 63), 2, 32); }), "logsumexp_rows.lse");
  EXPECT_EQ(field_of([&] { log_softmax_rows(dev(), x, Slice(x, 1), i, 2, 32); }),
            "log_softmax_rows.out");
  EXPECT_EQ(field_of([&] { argmax(dev(), x, i, 0, 64); }), "(no error)");
}

}  // namespace
