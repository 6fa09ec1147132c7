// add, add_bias, scale, softcap and gated_activation against ops::ref over shapes, offsets,
// fused gate/up rows and in-place output; batch invariance (bitwise); argument errors.
// Tolerances: add, add_bias, scale bitwise equal; softcap and gated activations relative 4e-7 /
// 5e-7 (exp / tanh of two libms, PoCL's vs glibc's; about 80 % of elements are bitwise equal).
#include <gtest/gtest.h>

#include <cstdio>
#include <tuple>

#include "common/errors.h"
#include "ops/elementwise.h"
#include "ops/reference.h"
#include "quant/matmul.h"
#include "ops_test_util.h"

using namespace specdec;
using namespace specdec::ops;
using namespace specdec::ops::testing;

namespace {

class Elementwise : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(Elementwise, AddBiasScaleSoftcap) {
  const auto [dim, rows] = GetParam();
  std::mt19937 rng(dim + rows);
  const size_t n = static_cast<size_t>(dim) * rows;
  const auto x = random_floats(n, rng, 20.0f), y = random_floats(n, rng),
             b = random_floats(dim, rng);
  {
    std::vector<float> want = x;
    ref::add(want, y);
    const device::Buffer xb = upload(x), yb = upload(y);
    add(dev(), xb, yb, static_cast<int64_t>(n));
    EXPECT_TRUE(bitwise_equal(download<float>(xb, n), want));
  }
  {
    std::vector<float> want = x;
    ref::add_bias(want, b, rows, dim);
    const device::Buffer xb = upload(x), bb = upload(b);
    add_bias(dev(), xb, bb, rows, dim);
    EXPECT_TRUE(bitwise_equal(download<float>(xb, n), want));
  }
  {
    std::vector<float> want = x;
    ref::scale(want, 39.191835f);
    const device::Buffer xb = upload(x);
    scale(dev(), xb, static_cast<int64_t>(n), 39.191835f);
    EXPECT_TRUE(bitwise_equal(download<float>(xb, n), want));
  }
  for (float cap : {30.0f, 5.0f}) {
    std::vector<float> want = x;
    ref::softcap(want, cap);
    const device::Buffer xb = upload(x);
    softcap(dev(), xb, static_cast<int64_t>(n), cap);
    const ErrorStats s = compare(download<float>(xb, n), want);
    EXPECT_LE(s.max_rel, 4e-7) << "cap " << cap;
    if (s.exact != s.n)
      std::printf("softcap %g: %zu of %zu bitwise equal, max rel %.3g\n", cap, s.exact, s.n,
                  s.max_rel);
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, Elementwise,
                         ::testing::Combine(::testing::Values(1, 7, 64, 576, 896, 1536, 151936),
                                            ::testing::Values(1, 5, 16)));

class Gated : public ::testing::TestWithParam<std::tuple<Activation, int, int>> {};

TEST_P(Gated, SeparateFusedAndInPlace) {
  const auto [act, ff, rows] = GetParam();
  std::mt19937 rng(ff * 3 + rows);
  const size_t n = static_cast<size_t>(ff) * rows;
  const auto gate = random_floats(n, rng, 3.0f), up = random_floats(n, rng);
  std::vector<float> want(n);
  ref::gated_activation(gate, up, want, rows, ff, act);
  {  // separate buffers
    const device::Buffer g = upload(gate), u = upload(up), o = upload(std::vector<float>(n));
    gated_activation(dev(), g, u, o, rows, ff, act);
    const auto got = download<float>(o, n);
    const ErrorStats s = compare(got, want);
    EXPECT_LE(s.max_rel, 5e-7);
    if (s.exact != s.n)
      std::printf("gated %s ff %d: %zu of %zu bitwise equal, max rel %.3g\n",
                  activation_name(act), ff, s.exact, s.n, s.max_rel);
  }
  {  // in place into gate
    const device::Buffer g = upload(gate), u = upload(up);
    gated_activation(dev(), g, u, g, rows, ff, act);
    EXPECT_LE(compare(download<float>(g, n), want).max_rel, 5e-7);
  }
  {  // fused [rows, 2 * ff] (gate then up), output at an offset
    std::vector<float> fused(2 * n);
    for (int r = 0; r < rows; ++r) {
      std::copy_n(gate.begin() + r * ff, ff, fused.begin() + 2 * r * ff);
      std::copy_n(up.begin() + r * ff, ff, fused.begin() + (2 * r + 1) * ff);
    }
    const device::Buffer f = upload(fused), o = upload(std::vector<float>(n + 3));
    gated_activation(dev(), Slice(f, 0), Slice(f, ff), Slice(o, 3), rows, ff, act, 2 * ff);
    EXPECT_LE(compare(download<float>(o, n, 3), want).max_rel, 5e-7);
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, Gated,
                         ::testing::Combine(::testing::Values(Activation::kSilu,
                                                              Activation::kGeluTanh),
                                            ::testing::Values(1, 7, 64, 2048, 4864, 6912, 8960),
                                            ::testing::Values(1, 5, 16)));

TEST(Gated, ExtremeGates) {
  const std::vector<float> gate = {-1e30f, -100.0f, -20.0f,   -5.0f,     -1e-20f,
                                   0.0f,   -0.0f,   1e-20f,   5.0f,      20.0f,
                                   100.0f, 1e30f,   INFINITY, -INFINITY, NAN};
  const std::vector<float> up(gate.size(), 1.5f);
  const int ff = static_cast<int>(gate.size());
  for (Activation act : {Activation::kSilu, Activation::kGeluTanh}) {
    std::vector<float> want(gate.size());
    ref::gated_activation(gate, up, want, 1, ff, act);
    const device::Buffer g = upload(gate), u = upload(up), o = upload(std::vector<float>(gate.size()));
    gated_activation(dev(), g, u, o, 1, ff, act);
    const auto got = download<float>(o, gate.size());
    for (size_t i = 0; i < gate.size(); ++i) {
      if (std::isnan(want[i]) || std::isinf(want[i])) {
        EXPECT_TRUE(same_bits(got[i], want[i])) << activation_name(act) << " gate "
                                                << gate[i] << ": " << got[i] << " vs " << want[i];
      } else {
        EXPECT_NEAR(got[i], want[i], 5e-7 * std::abs(want[i]))
            << activation_name(act) << " gate " << gate[i];
      }
    }
  }
}

// A row's results are bitwise the same computed alone (at an offset) and inside a batch of 16.
TEST(Elementwise, RowIsBitwiseTheSameAloneAndInAnyBatch) {
  std::mt19937 rng(17);
  const int rows = 16, ff = 8960 + 5, dim = 1536 + 3;
  const auto gate = random_floats(static_cast<size_t>(rows) * ff, rng, 3.0f);
  const auto up = random_floats(gate.size(), rng);
  const auto x = random_floats(static_cast<size_t>(rows) * dim, rng, 10.0f);
  const auto bias = random_floats(dim, rng);
  const device::Buffer g = upload(gate), u = upload(up), o = upload(std::vector<float>(gate.size()));
  const device::Buffer xb = upload(x), bb = upload(bias);
  for (Activation act : {Activation::kSilu, Activation::kGeluTanh}) {
    gated_activation(dev(), g, u, o, rows, ff, act);
    const auto batch = download<float>(o, gate.size());
    for (int r : {0, 7, 15}) {
      const int64_t at = int64_t{r} * ff;
      const device::Buffer one = upload(std::vector<float>(ff));
      gated_activation(dev(), Slice(g, at), Slice(u, at), one, 1, ff, act);
      EXPECT_TRUE(bitwise_equal(download<float>(one, ff),
                                std::vector<float>(batch.begin() + at, batch.begin() + at + ff)))
          << activation_name(act) << " row " << r;
    }
  }
  const device::Buffer all = upload(x);
  add_bias(dev(), all, bb, rows, dim);
  softcap(dev(), all, int64_t{rows} * dim, 30.0f);
  const auto batch = download<float>(all, x.size());
  for (int r : {0, 9, 15}) {
    const int64_t at = int64_t{r} * dim;
    add_bias(dev(), Slice(xb, at), bb, 1, dim);
    softcap(dev(), Slice(xb, at), dim, 30.0f);
    EXPECT_TRUE(bitwise_equal(download<float>(xb, dim, at),
                              std::vector<float>(batch.begin() + at, batch.begin() + at + dim)))
        << "row " << r;
  }
}

TEST(Elementwise, BadArgumentsNameTheField) {
  const device::Buffer x = upload(std::vector<float>(64)), b = upload(std::vector<float>(8));
  auto field_of = [](auto&& f) {
    try {
      f();
    } catch (const ConfigError& e) {
      return e.field();
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(field_of([&] { add(dev(), x, b, 64); }), "add.y");
  EXPECT_EQ(field_of([&] { add_bias(dev(), x, b, 4, 16); }), "add_bias.bias");
  EXPECT_EQ(field_of([&] { scale(dev(), Slice(x, 60), 5, 2.0f); }), "scale.x");
  EXPECT_EQ(field_of([&] { softcap(dev(), x, 64, 0.0f); }), "softcap.cap");
  EXPECT_EQ(field_of([&] { gated_activation(dev(), x, x, b, 2, 8, Activation::kSilu, 4); }),
            "gated_activation.in_row_stride");
  EXPECT_EQ(
      field_of([&] { gated_activation(dev(), x, Slice(x, 32), b, 2, 8, Activation::kSilu, 32); }),
      "gated_activation.up");
  EXPECT_EQ(field_of([&] { gated_activation(dev(), x, x, b, 2, 8, Activation::kSilu); }),
            "gated_activation.out");
  EXPECT_EQ(field_of([&] { add(dev(), x, x, 0); }), "(no error)");
}

}  // namespace

TEST(Gated, QuantisedOutputIsBitwiseQuantizeActivations) {
  // gated_activation that also quantises its output: the same f32 output, and the bytes
  // quantize_activations writes for it; fused halves (in_row_stride 2 ff) and separate buffers;
  // one scale per 32 values and per 256 (K-quant down projections).
  std::mt19937 rng(52);
  for (auto act : {Activation::kSilu, Activation::kGeluTanh}) {
    for (auto [ff, sb] : {std::pair{32, 32}, std::pair{1536, 32}, std::pair{256, 256},
                          std::pair{1536, 256}}) {
      const int64_t rows = 3, n = rows * ff;
      const auto fused = random_floats(static_cast<size_t>(2 * n), rng, 2.0f);
      const device::Buffer fb = upload(fused), want_out = upload(std::vector<float>(n)),
                        got_out = upload(std::vector<float>(n));
      gated_activation(dev(), fb, Slice(fb, ff), want_out, rows, ff, act, 2 * int64_t{ff});
      quant::QuantizedActivations want, got;
      quant::quantize_activations(dev(), want_out, rows, ff, want, sb);
      ASSERT_TRUE(quant::prepare_activations(dev(), rows, ff, got, sb));
      const QuantizedOut q{&got.q8, &got.q16, &got.rec, sb};
      gated_activation(dev(), fb, Slice(fb, ff), got_out, rows, ff, act, 2 * int64_t{ff}, &q);
      EXPECT_TRUE(bitwise_equal(download<float>(got_out, n), download<float>(want_out, n))) << ff;
      EXPECT_EQ(download<int8_t>(got.q8, n), download<int8_t>(want.q8, n)) << ff;
      if (dev().kind() == device::Kind::kOpenCL) {  // the int16 copy: OpenCL's Q8_0 kernels only
        EXPECT_EQ(download<int16_t>(got.q16, n), download<int16_t>(want.q16, n)) << ff;
      }
      EXPECT_EQ(download<int32_t>(got.rec, n / 32 * 4), download<int32_t>(want.rec, n / 32 * 4)) << ff;
    }
  }
  quant::QuantizedActivations small;
  ASSERT_TRUE(quant::prepare_activations(dev(), 1, 32, small));
  const QuantizedOut qs{&small.q8, &small.q16, &small.rec};
  const device::Buffer a = upload(std::vector<float>(256, 1.0f));
  EXPECT_THROW(gated_activation(dev(), a, a, a, 1, 48, Activation::kSilu, 0, &qs), ConfigError);
  EXPECT_THROW(gated_activation(dev(), a, a, Slice(a, 32), 1, 32, Activation::kSilu, 0, &qs), ConfigError);
  EXPECT_THROW(gated_activation(dev(), a, a, a, 2, 64, Activation::kSilu, 0, &qs), ConfigError);
  const QuantizedOut q256{&small.q8, &small.q16, &small.rec, 256};
  EXPECT_THROW(gated_activation(dev(), a, a, a, 1, 32, Activation::kSilu, 0, &q256), ConfigError);
}
