#include "ops/slice.h"

#include "common/errors.h"
#include "common/math.h"

namespace specdec::ops {

void check_at_least(int64_t value, int64_t min_value, const std::string& what) {
  SPECDEC_CHECK(value >= min_value, what, value, str_cat("must be >= ", min_value));
}

}  // namespace specdec::ops
