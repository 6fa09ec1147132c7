// Small integer helpers with overflow checks.
#pragma once

#include <cstdint>
#include <limits>

#include "common/errors.h"

namespace specdec {

// ceil(a / b) for a >= 0, b > 0, without overflow.
constexpr int64_t cdiv(int64_t a, int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// The most tokens any count (max_model_len, batched tokens) may hold: keeps every sum of token
// counts far from int64 overflow.
constexpr int64_t kMaxTokens = int64_t{1} << 40;

// a * b, throwing ConfigError naming `field` when the product does not fit in int64.
inline int64_t checked_mul(int64_t a, int64_t b, const char* field) {
  int64_t out;
  if (__builtin_mul_overflow(a, b, &out)) {
    throw ConfigError(field, str_cat(a, " * ", b), "product overflows 64 bits; use smaller sizes");
  }
  return out;
}

// a + b, throwing ConfigError naming `field` when the sum does not fit in int64.
inline int64_t checked_add(int64_t a, int64_t b, const char* field) {
  int64_t out;
  if (__builtin_add_overflow(a, b, &out)) {
    throw ConfigError(field, str_cat(a, " + ", b), "sum overflows 64 bits; use smaller sizes");
  }
  return out;
}

}  // namespace specdec
