// rms_norm against ops::ref::rms_norm over shapes (model widths, head sizes, odd tails), with and
// without a weight and a weight offset, in place, at buffer offsets; batch invariance (bitwise);
// add_rms_norm bitwise equal to add + rms_norm; argument errors.
// Tolerance: relative 1e-6 per element (on fp64 devices every element measured is bitwise equal:
// the only possible difference is the order of the double sum).
#include <gtest/gtest.h>

#include <cstdio>
#include <tuple>

#include "common/errors.h"
#include "ops/elementwise.h"
#include "ops/norm.h"
#include "ops/reference.h"
#include "quant/matmul.h"
#include "ops_test_util.h"

using namespace specdec;
using namespace specdec::ops;
using namespace specdec::ops::testing;

namespace {

enum class Weight { kNone, kPlain, kOffsetOne };

struct NormRun {
  std::vector<float> got, want;
};

NormRun run_norm(int64_t rows, int dim, Weight wmode, float eps, std::mt19937& rng,
                 float stddev = 1.0f) {
  const auto x = random_floats(static_cast<size_t>(rows * dim), rng, stddev);
  const auto w = random_floats(static_cast<size_t>(dim), rng, 0.5f, 1.0f);
  const float offset = wmode == Weight::kOffsetOne ? 1.0f : 0.0f;
  const std::vector<float> no_weight;
  NormRun r;
  r.want.resize(x.size());
  ref::rms_norm(x, wmode == Weight::kNone ? no_weight : w, r.want, rows, dim, eps, offset);
  const device::Buffer xb = upload(x), wb = upload(w), yb = upload(std::vector<float>(x.size()));
  std::optional<Slice> weight;
  if (wmode != Weight::kNone) weight = wb;
  rms_norm(dev(), xb, weight, yb, rows, dim, eps, offset);
  r.got = download<float>(yb, x.size());
  return r;
}

class RmsNormShapes : public ::testing::TestWithParam<std::tuple<int, int, Weight>> {};

TEST_P(RmsNormShapes, MatchesReference) {
  const auto [dim, rows, wmode] = GetParam();
  std::mt19937 rng(dim * 131 + rows);
  const NormRun r = run_norm(rows, dim, wmode, 1e-6f, rng);
  const ErrorStats s = compare(r.got, r.want);
  EXPECT_LE(s.max_rel, 1e-6) << s.exact << " of " << s.n << " bitwise equal";
  if (s.exact != s.n)
    std::printf("rms_norm dim %d rows %d: %zu of %zu bitwise equal, max rel %.3g\n", dim, rows,
                s.exact, s.n, s.max_rel);
}

INSTANTIATE_TEST_SUITE_P(Ops, RmsNormShapes,
                         ::testing::Combine(::testing::Values(1, 7, 16, 64, 100, 128, 256, 576, 640,
                                                              896, 1152, 1536, 2304, 4096),
                                            ::testing::Values(1, 3, 16, 64),
                                            ::testing::Values(Weight::kNone, Weight::kPlain,
                                                              Weight::kOffsetOne)));

TEST(RmsNorm, ExtremeScalesAndEps) {
  std::mt19937 rng(7);
  for (float stddev : {1e-12f, 1e-3f, 1e3f, 1e15f}) {
    for (float eps : {0.0f, 1e-6f, 1e-5f}) {
      const NormRun r = run_norm(4, 896, Weight::kPlain, eps, rng, stddev);
      EXPECT_LE(compare(r.got, r.want).max_rel, 1e-6) << "stddev " << stddev << " eps " << eps;
    }
  }
}

TEST(RmsNorm, PerHeadInPlaceAtOffsets) {
  // q norm: [tokens, heads, head_size] normalised per head, in place, inside a larger buffer.
  std::mt19937 rng(11);
  const int tokens = 5, heads = 8, head = 128;
  const int64_t n = int64_t{tokens} * heads * head, off = 333;
  auto all = random_floats(static_cast<size_t>(n + off + 50), rng);
  const auto w = random_floats(static_cast<size_t>(head + 9), rng, 0.3f, 1.0f);
  std::vector<float> want(all.begin() + off, all.begin() + off + n);
  ref::rms_norm(want, std::span<const float>(w).subspan(9, head), want, int64_t{tokens} * heads,
                head, 1e-6f);
  const device::Buffer xb = upload(all), wb = upload(w);
  rms_norm(dev(), Slice(xb, off), Slice(wb, 9), Slice(xb, off), int64_t{tokens} * heads, head, 1e-6f);
  const auto got = download<float>(xb, all.size());
  EXPECT_LE(compare(std::vector<float>(got.begin() + off, got.begin() + off + n), want).max_rel,
            1e-6);
  EXPECT_TRUE(bitwise_equal(std::vector<float>(got.begin(), got.begin() + off),
                            std::vector<float>(all.begin(), all.begin() + off)));
  EXPECT_TRUE(bitwise_equal(std::vector<float>(got.begin() + off + n, got.end()),
                            std::vector<float>(all.begin() + off + n, all.end())));
}

TEST(AddRmsNorm, BitwiseAddThenNorm) {
  std::mt19937 rng(21);
  for (int dim : {7, 64, 100, 1152, 1536}) {
    const int rows = 9;
    const size_t n = static_cast<size_t>(rows) * dim;
    const auto x = random_floats(n, rng), r = random_floats(n, rng),
               w = random_floats(dim, rng, 0.2f, 1.0f);
    std::vector<float> sum = x, want(n);
    ref::add(sum, r);
    ref::rms_norm(sum, w, want, rows, dim, 1e-6f, 1.0f);
    // reference path on the device: add, then rms_norm
    const device::Buffer x1 = upload(x), r1 = upload(r), w1 = upload(w),
                      y1 = upload(std::vector<float>(n));
    const device::Buffer x2 = upload(x), y2 = upload(std::vector<float>(n));
    add(dev(), x1, r1, static_cast<int64_t>(n));
    rms_norm(dev(), x1, w1, y1, rows, dim, 1e-6f, 1.0f);
    add_rms_norm(dev(), x2, r1, w1, y2, rows, dim, 1e-6f, 1.0f);
    EXPECT_TRUE(bitwise_equal(download<float>(x2, n), sum)) << "dim " << dim << ": residual stream";
    EXPECT_TRUE(bitwise_equal(download<float>(y2, n), download<float>(y1, n))) << "dim " << dim;
    EXPECT_LE(compare(download<float>(y2, n), want).max_rel, 1e-6) << "dim " << dim;
    // y written over the residual input
    const device::Buffer x3 = upload(x), r3 = upload(r);
    add_rms_norm(dev(), x3, r3, w1, r3, rows, dim, 1e-6f, 1.0f);
    EXPECT_TRUE(bitwise_equal(download<float>(r3, n), download<float>(y1, n)))
        << "dim " << dim << ": y = residual";
  }
  const device::Buffer small = upload(std::vector<float>(16));
  try {
    add_rms_norm(dev(), upload(std::vector<float>(64)), small, std::nullopt,
                 upload(std::vector<float>(64)), 4, 16, 1e-6f);
    FAIL() << "a residual of 16 for 4 x 16 must be refused";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.field(), "add_rms_norm.residual");
  }
}

class RmsNormInvariance : public ::testing::TestWithParam<int> {};

TEST_P(RmsNormInvariance, RowIsBitwiseTheSameAloneAndInAnyBatch) {
  const int dim = GetParam();
  const int rows = 64;
  std::mt19937 rng(dim);
  const auto x = random_floats(static_cast<size_t>(rows) * dim, rng);
  const auto w = random_floats(static_cast<size_t>(dim), rng);
  const device::Buffer xb = upload(x), wb = upload(w), yb = upload(std::vector<float>(x.size()));
  rms_norm(dev(), xb, wb, yb, rows, dim, 1e-6f);
  const auto batch = download<float>(yb, x.size());
  for (int r : {0, 1, 17, 63}) {
    const std::vector<float> want(batch.begin() + int64_t{r} * dim,
                                  batch.begin() + int64_t{r + 1} * dim);
    // alone, read in place from the batch buffer
    const device::Buffer one = upload(std::vector<float>(dim));
    rms_norm(dev(), Slice(xb, int64_t{r} * dim), wb, one, 1, dim, 1e-6f);
    EXPECT_TRUE(bitwise_equal(download<float>(one, dim), want)) << "row " << r << " alone";
    // third of a batch of 7 other rows
    auto other = random_floats(static_cast<size_t>(7) * dim, rng);
    std::copy(want.begin(), want.end(), other.begin());  // overwritten below
    std::copy(x.begin() + int64_t{r} * dim, x.begin() + int64_t{r + 1} * dim,
              other.begin() + 2 * dim);
    const device::Buffer ob = upload(other), oy = upload(std::vector<float>(other.size()));
    rms_norm(dev(), ob, wb, oy, 7, dim, 1e-6f);
    EXPECT_TRUE(bitwise_equal(download<float>(oy, dim, 2 * dim), want))
        << "row " << r << " in a batch of 7";
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, RmsNormInvariance, ::testing::Values(64, 100, 896, 1536, 4096));

TEST(RmsNorm, BadArgumentsNameTheField) {
  const device::Buffer x = upload(std::vector<float>(64)), w = upload(std::vector<float>(8));
  try {
    rms_norm(dev(), x, w, x, 4, 16, 1e-6f);
    FAIL() << "a weight of 8 for dim 16 must be refused";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.field(), "rms_norm.weight");
  }
  EXPECT_THROW(rms_norm(dev(), x, std::nullopt, x, 5, 16, 1e-6f), ConfigError);  // 80 > 64
  EXPECT_THROW(rms_norm(dev(), Slice(x, 1), std::nullopt, x, 4, 16, 1e-6f), ConfigError);
  EXPECT_THROW(rms_norm(dev(), x, std::nullopt, x, 4, 0, 1e-6f), ConfigError);
  EXPECT_THROW(rms_norm(dev(), x, std::nullopt, x, -1, 16, 1e-6f), ConfigError);
  EXPECT_THROW(rms_norm(dev(), x, std::nullopt, x, 4, 16, -1.0f), ConfigError);
  EXPECT_NO_THROW(rms_norm(dev(), x, std::nullopt, x, 0, 16, 1e-6f));
}

}  // namespace

TEST(AddRmsNorm, QuantisedOutputIsBitwiseQuantizeActivations) {
  // The norm that also quantises its output writes the same bytes as quantize_activations of y
  // (int8, int16 and the per-block records), in place or not, with and without the residual; one
  // scale per 32 values and per 256 (K-quant readers).
  std::mt19937 rng(41);
  for (auto [dim, sb] : {std::pair{32, 32}, std::pair{576, 32}, std::pair{896, 32},
                         std::pair{256, 256}, std::pair{1536, 256}}) {
    for (int64_t rows : {int64_t{1}, int64_t{5}}) {
      const int64_t n = rows * dim;
      auto x = random_floats(static_cast<size_t>(n), rng, 3.0f);
      x[0] = 0.0f;  // a block with zeros, and one that is all zero
      if (dim >= 64) std::fill(x.begin() + 32, x.begin() + 64, 0.0f);
      const auto r = random_floats(static_cast<size_t>(n), rng);
      const auto w = random_floats(static_cast<size_t>(dim), rng);
      const device::Buffer x1 = upload(x), r1 = upload(r), w1 = upload(w), y1 = upload(std::vector<float>(n));
      quant::QuantizedActivations want;
      add_rms_norm(dev(), x1, r1, w1, y1, rows, dim, 1e-5f);
      quant::quantize_activations(dev(), y1, rows, dim, want, sb);
      const device::Buffer x2 = upload(x), r2 = upload(r), y2 = upload(std::vector<float>(n));
      quant::QuantizedActivations got;
      ASSERT_TRUE(quant::prepare_activations(dev(), rows, dim, got, sb));
      const QuantizedOut q{&got.q8, &got.q16, &got.rec, sb};
      add_rms_norm(dev(), x2, r2, w1, y2, rows, dim, 1e-5f, 0.0f, &q);
      EXPECT_TRUE(bitwise_equal(download<float>(y2, n), download<float>(y1, n))) << dim;
      EXPECT_EQ(download<int8_t>(got.q8, n), download<int8_t>(want.q8, n)) << dim;
      if (dev().kind() == device::Kind::kOpenCL) {  // the int16 copy: OpenCL's Q8_0 kernels only
        EXPECT_EQ(download<int16_t>(got.q16, n), download<int16_t>(want.q16, n)) << dim;
      }
      EXPECT_EQ(download<int32_t>(got.rec, n / 32 * 4), download<int32_t>(want.rec, n / 32 * 4)) << dim;
      // plain rms_norm in place (y = x) quantises the normed values, not the input
      const device::Buffer x3 = upload(x);
      quant::QuantizedActivations in_place;
      ASSERT_TRUE(quant::prepare_activations(dev(), rows, dim, in_place, sb));
      const QuantizedOut q3{&in_place.q8, &in_place.q16, &in_place.rec, sb};
      rms_norm(dev(), x3, w1, x3, rows, dim, 1e-5f, 0.0f, &q3);
      quant::QuantizedActivations want3;
      quant::quantize_activations(dev(), x3, rows, dim, want3, sb);
      EXPECT_EQ(download<int8_t>(in_place.q8, n), download<int8_t>(want3.q8, n)) << dim;
      EXPECT_EQ(download<int32_t>(in_place.rec, n / 32 * 4), download<int32_t>(want3.rec, n / 32 * 4)) << dim;
    }
  }
  // bad requests: dim not a multiple of 32, an offset y, buffers too small
  quant::QuantizedActivations small;
  ASSERT_TRUE(quant::prepare_activations(dev(), 1, 32, small));
  const QuantizedOut qs{&small.q8, &small.q16, &small.rec};
  const device::Buffer a = upload(std::vector<float>(256, 1.0f));
  EXPECT_THROW(rms_norm(dev(), a, std::nullopt, a, 1, 48, 1e-5f, 0.0f, &qs), ConfigError);
  EXPECT_THROW(rms_norm(dev(), a, std::nullopt, Slice(a, 32), 1, 32, 1e-5f, 0.0f, &qs), ConfigError);
  EXPECT_THROW(rms_norm(dev(), a, std::nullopt, a, 4, 64, 1e-5f, 0.0f, &qs), ConfigError);
  // one scale per 256 values needs dim % 256 == 0; other scale blocks are refused
  const QuantizedOut q256{&small.q8, &small.q16, &small.rec, 256};
  EXPECT_THROW(rms_norm(dev(), a, std::nullopt, a, 1, 32, 1e-5f, 0.0f, &q256), ConfigError);
  const QuantizedOut q64{&small.q8, &small.q16, &small.rec, 64};
  EXPECT_THROW(rms_norm(dev(), a, std::nullopt, a, 1, 64, 1e-5f, 0.0f, &q64), ConfigError);
}
