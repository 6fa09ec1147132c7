#include "ops/slice.h"

#include <algorithm>
#include <cstdlib>

#include "common/errors.h"

namespace specdec::ops {

void check_slice(const Slice& s, int64_t num_elems, const std::string& what) {
  check_config(s.buffer != nullptr && s.buffer->get() != nullptr, what, "(no buffer)",
               "must be an allocated device buffer");
  check_config(s.offset >= 0, what + ".offset", s.offset, "must be >= 0");
  const int64_t capacity = static_cast<int64_t>(s.buffer->size_bytes() / 4);
  check_config(num_elems >= 0 && s.offset <= capacity && num_elems <= capacity - s.offset, what,
               str_cat(num_elems, " elements from offset ", s.offset),
               str_cat("must fit in the buffer of ", capacity, " 4-byte elements; pass a larger buffer"));
}

void check_at_least(int64_t value, int64_t min_value, const std::string& what) {
  check_config(value >= min_value, what, value, str_cat("must be >= ", min_value));
}

int reduction_local_size(const ocl::Context& ctx) {
  if (const char* env = std::getenv("SPECDEC_OPS_LOCAL")) {
    int v = std::clamp(std::atoi(env), 8, 256);
    int p = 8;
    while (p * 2 <= v) p *= 2;
    return p;
  }
  // PoCL's CPU device runs a work-group's items in a loop on one core: few items (8 is the least
  // top_k allows: it needs LOCAL * 16 >= 128 subsets) keep barriers cheap, vectors do the rest.
  return ctx.device().type == "cpu" ? 8 : 256;
}

std::string ops_build_options(const ocl::Context& ctx, int local) {
  if (local == 0) local = reduction_local_size(ctx);
  std::string options = "-DLOCAL=" + std::to_string(local);
  if (ctx.device().fp64) options += " -DUSE_FP64";
  return options;
}

}  // namespace specdec::ops
