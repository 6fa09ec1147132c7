// rope against ops::ref::rope: NORM and NEOX, full and partial rope_dim, head sizes 8..256,
// bases 1e4 / 1e6, freq_scale 1 and 1/8, Llama 3.1-style freq factors, positions up to 2^17,
// token strides (q inside a fused qkv row); batch invariance (bitwise); errors.
// Tolerance: |got - want| <= 2e-6 * (|x0| + |x1|) per rotated pair (both sides use the same f32
// angle; only cos / sin of double libms can round differently), untouched dims bitwise equal.
#include <gtest/gtest.h>

#include <cstdio>
#include <tuple>

#include "common/errors.h"
#include "ops/reference.h"
#include "ops/rope.h"
#include "ops_test_util.h"

using namespace specdec;
using namespace specdec::ops;
using namespace specdec::ops::testing;

namespace {

std::vector<int32_t> random_positions(int64_t n, std::mt19937& rng) {
  std::vector<int32_t> pos(static_cast<size_t>(n));
  std::uniform_int_distribution<int32_t> big(0, 1 << 17), small(0, 600);
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = i % 3 == 0 ? big(rng) : small(rng);
  if (!pos.empty()) pos[0] = 0;
  return pos;
}

// Max over elements of |got - want| / (|x0| + |x1|) of the element's pair (input values).
double pair_error(const std::vector<float>& got, const std::vector<float>& want,
                  const std::vector<float>& in) {
  double e = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (same_bits(got[i], want[i])) continue;
    e = std::max(e, std::abs(static_cast<double>(got[i]) - want[i]) / (std::abs(in[i]) + 1e-30));
  }
  return e;
}

using RopeParam = std::tuple<RopeType, int /*head*/, int /*rope_dim: 0 full, else head / n*/,
                             int /*heads*/, int /*tokens*/>;

class RopeShapes : public ::testing::TestWithParam<RopeParam> {};

// Every shape with bases 1e4 / 1e6 and freq_scale 1 / 0.125.
TEST_P(RopeShapes, MatchesReference) {
  const auto [type, head, part, heads, tokens] = GetParam();
  const int rope_dim = part == 0 ? head : head / part;
  std::mt19937 rng(head * 7 + heads * 3 + tokens + rope_dim);
  auto& ctx = dev();
  for (double base : {10000.0, 1e6}) {
    for (double freq_scale : {1.0, 0.125}) {
      const auto x = random_floats(static_cast<size_t>(tokens) * heads * head, rng);
      const auto pos = random_positions(tokens, rng);
      const RopeTable table(ctx, type, rope_dim, base, freq_scale);
      std::vector<float> want = x;
      ref::rope(want, pos, tokens, heads, head, table.inv_freq(), type);
      const device::Buffer xb = upload(x), pb = upload(pos);
      rope(dev(), xb, pb, tokens, heads, head, table);
      const auto got = download<float>(xb, x.size());
      const ErrorStats s = compare(got, want);
      EXPECT_LE(pair_error(got, want, x), 2e-6)
          << "base " << base << " scale " << freq_scale << ": " << s.exact << " of " << s.n
          << " bitwise equal";
      if (s.exact != s.n)
        std::printf("rope head %d rope_dim %d: %zu of %zu bitwise equal\n", head, rope_dim, s.exact,
                    s.n);
      for (int64_t t = 0; t < tokens; ++t) {
        for (int h = 0; h < heads; ++h) {
          for (int d = rope_dim; d < head; ++d) {
            const size_t i = static_cast<size_t>((t * heads + h) * head + d);
            ASSERT_TRUE(same_bits(got[i], x[i]))
                << "dim " << d << " past rope_dim " << rope_dim << " changed";
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, RopeShapes,
                         ::testing::Combine(::testing::Values(RopeType::kNorm, RopeType::kNeox),
                                            ::testing::Values(8, 64, 128, 256),
                                            ::testing::Values(0, 2, 4), ::testing::Values(1, 4),
                                            ::testing::Values(1, 7, 64)));

TEST(Rope, MatchesTheTextbookRotation) {
  // NEOX on one head of 4 dims at position 3: pairs (0, 2) and (1, 3) by 3 * base^(-2i/4).
  const std::vector<float> x = {1.0f, 2.0f, 3.0f, 4.0f};
  const device::Buffer xb = upload(x), pb = upload(std::vector<int32_t>{3});
  rope(dev(), xb, pb, 1, 1, 4, 4, RopeType::kNeox, 100.0);
  const auto got = download<float>(xb, 4);
  const double t0 = 3.0, t1 = 3.0 / 10.0;
  EXPECT_NEAR(got[0], 1 * std::cos(t0) - 3 * std::sin(t0), 1e-6);
  EXPECT_NEAR(got[2], 1 * std::sin(t0) + 3 * std::cos(t0), 1e-6);
  EXPECT_NEAR(got[1], 2 * std::cos(t1) - 4 * std::sin(t1), 1e-6);
  EXPECT_NEAR(got[3], 2 * std::sin(t1) + 4 * std::cos(t1), 1e-6);
  // NORM rotates adjacent pairs (0, 1) and (2, 3).
  const device::Buffer xn = upload(x);
  rope(dev(), xn, pb, 1, 1, 4, 4, RopeType::kNorm, 100.0);
  const auto gn = download<float>(xn, 4);
  EXPECT_NEAR(gn[0], 1 * std::cos(t0) - 2 * std::sin(t0), 1e-6);
  EXPECT_NEAR(gn[1], 1 * std::sin(t0) + 2 * std::cos(t0), 1e-6);
  EXPECT_NEAR(gn[2], 3 * std::cos(t1) - 4 * std::sin(t1), 1e-6);
}

TEST(Rope, FreqFactorsAndTokenStride) {
  // k part of a fused [tokens, q + k + v] row, rotated where it lies, with per-dim factors.
  auto& ctx = dev();
  std::mt19937 rng(5);
  const int tokens = 9, q = 8 * 64, kh = 2, head = 64, v = 2 * 64;
  const int64_t stride = q + kh * head + v;
  const auto fused = random_floats(static_cast<size_t>(tokens * stride), rng);
  const auto pos = random_positions(tokens, rng);
  std::vector<float> factors(head / 2);
  for (size_t i = 0; i < factors.size(); ++i) factors[i] = 1.0f + static_cast<float>(i % 5);
  const RopeTable table(ctx, RopeType::kNorm, head, 500000.0, 1.0, factors);
  std::vector<float> want = fused;
  ref::rope(std::span<float>(want).subspan(q), pos, tokens, kh, head, table.inv_freq(),
            RopeType::kNorm, stride);
  const device::Buffer xb = upload(fused), pb = upload(pos);
  rope(dev(), Slice(xb, q), pb, tokens, kh, head, table, stride);
  const auto got = download<float>(xb, fused.size());
  EXPECT_LE(pair_error(got, want, fused), 2e-6);
  for (int t = 0; t < tokens; ++t) {  // q and v untouched
    for (int64_t i = 0; i < stride; ++i) {
      if (i >= q && i < q + kh * head) continue;
      ASSERT_TRUE(same_bits(got[t * stride + i], fused[t * stride + i]));
    }
  }
  EXPECT_FLOAT_EQ(table.inv_freq()[3], static_cast<float>(std::pow(500000.0, -6.0 / 64) / 4.0));
}

TEST(Rope, TokenIsBitwiseTheSameAloneAndInAnyBatch) {
  auto& ctx = dev();
  std::mt19937 rng(9);
  const int tokens = 64, heads = 12, head = 128;
  const int64_t row = heads * head;
  const auto x = random_floats(static_cast<size_t>(tokens * row), rng);
  const auto pos = random_positions(tokens, rng);
  const RopeTable table(ctx, RopeType::kNeox, head, 1e6);
  const device::Buffer xb = upload(x), pb = upload(pos);
  rope(dev(), xb, pb, tokens, heads, head, table);
  const auto batch = download<float>(xb, x.size());
  for (int t : {0, 5, 63}) {
    const std::vector<float> want(batch.begin() + t * row, batch.begin() + (t + 1) * row);
    const device::Buffer one =
        upload(std::vector<float>(x.begin() + t * row, x.begin() + (t + 1) * row));
    rope(dev(), one, Slice(pb, t), 1, heads, head, table);
    EXPECT_TRUE(bitwise_equal(download<float>(one, static_cast<size_t>(row)), want))
        << "token " << t;
  }
}

TEST(Rope, BadArgumentsNameTheField) {
  auto& ctx = dev();
  const device::Buffer x = upload(std::vector<float>(64)), p = upload(std::vector<int32_t>(2));
  auto field_of = [](auto&& f) {
    try {
      f();
    } catch (const ConfigError& e) {
      return e.field();
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(field_of([&] { RopeTable(ctx, RopeType::kNone, 64, 1e4); }), "rope_type");
  EXPECT_EQ(field_of([&] { RopeTable(ctx, RopeType::kNorm, 63, 1e4); }), "rope_dim");
  EXPECT_EQ(field_of([&] { RopeTable(ctx, RopeType::kNorm, 64, 1.0); }), "rope_base");
  EXPECT_EQ(field_of([&] { RopeTable(ctx, RopeType::kNorm, 64, 1e4, 0.0); }), "rope_freq_scale");
  const std::vector<float> bad_factors(3, 1.0f);
  EXPECT_EQ(field_of([&] { RopeTable(ctx, RopeType::kNorm, 64, 1e4, 1.0, bad_factors); }),
            "rope_freqs.size");
  const RopeTable t(ctx, RopeType::kNorm, 32, 1e4);
  EXPECT_EQ(field_of([&] { rope(dev(), x, p, 2, 1, 16, t); }), "rope.head_size");
  const device::Buffer big = upload(std::vector<float>(256));
  EXPECT_EQ(field_of([&] { rope(dev(), big, p, 3, 1, 32, t); }), "rope.positions");
  EXPECT_EQ(field_of([&] { rope(dev(), x, p, 2, 2, 32, t); }), "rope.x");
  EXPECT_EQ(field_of([&] { rope(dev(), x, p, 2, 1, 32, t, 16); }), "rope.token_stride");
}

}  // namespace
