#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/dtype.h"
#include "common/errors.h"

using namespace specdec;

TEST(DType, HalfRoundTripsAndRounding) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.333333f}) {
    const float back = half_bits_to_float(float_to_half_bits(f));
    EXPECT_NEAR(back, f, std::fabs(f) * 1e-3f + 1e-7f) << f;
  }
  EXPECT_EQ(float_to_half_bits(1.0f), 0x3c00);
  EXPECT_EQ(float_to_half_bits(-2.0f), 0xc000);
  EXPECT_EQ(float_to_half_bits(1e6f), 0x7c00);                 // overflow -> inf
  EXPECT_EQ(float_to_half_bits(1.0f + 1.0f / 2048), 0x3c00);    // tie -> even
  EXPECT_EQ(float_to_half_bits(1.0f + 3.0f / 2048), 0x3c02);    // tie -> even (up)
  EXPECT_TRUE(std::isnan(half_bits_to_float(float_to_half_bits(NAN))));
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(bf16_bits_to_float(0x3f80), 1.0f);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-100.0f, 100.0f);
  for (int i = 0; i < 1000; ++i) {
    const float f = dist(rng);
    EXPECT_NEAR(bf16_bits_to_float(float_to_bf16_bits(f)), f, std::fabs(f) / 128.0f);
  }
}

// SPECDEC_CHECK formats field, value and allowed only when the condition fails, and then throws
// the same ConfigError check_config would.
TEST(Errors, CheckBuildsItsMessageOnlyOnFailure) {
  int formatted = 0;
  auto allowed = [&](int64_t limit) {
    ++formatted;
    return str_cat("must be <= ", limit);
  };
  for (int64_t v = 0; v <= 4; ++v) SPECDEC_CHECK(v <= 4, "v", v, allowed(4));
  EXPECT_EQ(formatted, 0);
  try {
    SPECDEC_CHECK(7 <= 4, "v", 7, allowed(4));
    FAIL() << "no ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_EQ(formatted, 1);
    EXPECT_EQ(e.field(), "v");
    EXPECT_EQ(e.value(), "7");
    EXPECT_EQ(e.allowed(), "must be <= 4");
    EXPECT_STREQ(e.what(), "v = 7: must be <= 4");
  }
  if (formatted > 0) SPECDEC_CHECK(true, "x", 0, allowed(0));  // a statement in if / else
  else
    FAIL();
  EXPECT_EQ(formatted, 1);
}
