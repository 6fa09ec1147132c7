// head_matmul against ops::ref over MLA-shaped sizes (absorb q_nope into the latent space, lift
// the latent output to v): bitwise equal to the reference (same block order, no FMA), strided
// heads read and written in place, batch invariance, argument errors.
#include <gtest/gtest.h>

#include <tuple>

#include "common/errors.h"
#include "ops/heads.h"
#include "ops/reference.h"
#include "ops_test_util.h"

using namespace specdec;
using namespace specdec::ops;
using namespace specdec::ops::testing;

namespace {

// (tokens, heads, rows, cols, x padding per head, y padding per head)
class HeadMatmul : public ::testing::TestWithParam<std::tuple<int, int, int, int, int, int>> {};

TEST_P(HeadMatmul, MatchesReferenceBitwise) {
  const auto [tokens, heads, rows, cols, xpad, ypad] = GetParam();
  std::mt19937 rng(tokens * 7 + heads * 13 + rows + cols);
  const int64_t xs = cols + xpad, ys = rows + ypad;
  const auto w = random_floats(static_cast<size_t>(heads) * rows * cols, rng, 0.1f);
  const auto x = random_floats(static_cast<size_t>(tokens * heads * xs + 3), rng);
  std::vector<float> want(static_cast<size_t>(tokens * heads * ys + 2), -7.0f);
  ref::head_matmul(w, std::span<const float>(x).subspan(3), std::span<float>(want).subspan(2),
                   tokens, heads, rows, cols, xs, ys);
  const device::Buffer wb = upload(w), xb = upload(x), yb = upload(std::vector<float>(want.size(), -7.0f));
  head_matmul(dev(), wb, Slice(xb, 3), Slice(yb, 2), tokens, heads, rows, cols, xs, ys);
  const auto got = download<float>(yb, want.size());
  EXPECT_TRUE(bitwise_equal(got, want)) << "padding between heads must stay untouched too";

  // token 0 alone gives the same bits as inside the batch
  const device::Buffer y1 = upload(std::vector<float>(static_cast<size_t>(heads * ys), 0.0f));
  head_matmul(dev(), wb, Slice(xb, 3), y1, 1, heads, rows, cols, xs, ys);
  const auto alone = download<float>(y1, static_cast<size_t>(heads * ys));
  for (int h = 0; h < heads; ++h) {
    for (int r = 0; r < rows; ++r) {
      ASSERT_TRUE(same_bits(alone[h * ys + r], got[2 + h * ys + r])) << "head " << h << " row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Ops, HeadMatmul,
    ::testing::Values(std::make_tuple(1, 16, 512, 128, 64, 64),   // V2-Lite absorb: q_nope -> latent
                      std::make_tuple(5, 16, 128, 512, 0, 0),     // V2-Lite latent -> v
                      std::make_tuple(3, 4, 256, 64, 32, 32),     // random test models
                      std::make_tuple(2, 4, 64, 256, 0, 0),
                      std::make_tuple(4, 3, 7, 5, 2, 1),          // tails shorter than a block
                      std::make_tuple(1, 1, 1, 1, 0, 0),
                      std::make_tuple(2, 2, 33, 47, 1, 0)));

TEST(HeadMatmulErrors, NamesTheArgument) {
  const device::Buffer w = upload(std::vector<float>(2 * 4 * 8)), x = upload(std::vector<float>(64)),
                    y = upload(std::vector<float>(64));
  head_matmul(dev(), w, x, y, 0, 2, 4, 8, 8, 4);  // no tokens: nothing to do
  auto message = [&](auto&& f) {
    try {
      f();
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([&] { head_matmul(dev(), w, x, y, 1, 2, 4, 8, 7, 4); }).find("x_head_stride"),
            std::string::npos);
  EXPECT_NE(message([&] { head_matmul(dev(), w, x, y, 1, 3, 4, 8, 8, 4); }).find("head_matmul.w"),
            std::string::npos);
  EXPECT_NE(message([&] { head_matmul(dev(), w, x, y, 5, 2, 4, 8, 8, 4); }).find("head_matmul.x"),
            std::string::npos);
  EXPECT_NE(message([&] { head_matmul(dev(), w, x, y, 1, 2, 4, 8, 8, 0); }).find("y_head_stride"),
            std::string::npos);
}

}  // namespace
