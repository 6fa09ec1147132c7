// Small integer helpers with overflow checks.
#pragma once

#include <cstdint>
#include <limits>

#include "common/errors.h"

namespace specdec {

constexpr int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// a * b, throwing ConfigError naming `field` when the product does not fit in int64.
inline int64_t checked_mul(int64_t a, int64_t b, const char* field) {
  int64_t out;
  if (__builtin_mul_overflow(a, b, &out)) {
    throw ConfigError(field, str_cat(a, " * ", b), "product overflows 64 bits; use smaller sizes");
  }
  return out;
}

}  // namespace specdec
