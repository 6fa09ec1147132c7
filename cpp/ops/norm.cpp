#include "ops/norm.h"

#include <cmath>

#include "common/errors.h"
#include "common/math.h"

namespace specdec::ops {

void rms_norm(ocl::Context& ctx, Slice x, std::optional<Slice> weight, Slice y, int64_t rows,
              int dim, float eps, float weight_offset) {
  check_at_least(rows, 0, "rms_norm.rows");
  check_at_least(dim, 1, "rms_norm.dim");
  check_config(std::isfinite(eps) && eps >= 0.0f, "rms_norm.eps", eps, "must be finite and >= 0");
  const int64_t n = checked_mul(rows, dim, "rms_norm.rows * dim");
  check_slice(x, n, "rms_norm.x");
  check_slice(y, n, "rms_norm.y");
  if (weight) check_slice(*weight, dim, "rms_norm.weight");
  if (rows == 0) return;
  const Slice w = weight.value_or(x);
  const int local = reduction_local_size(ctx);
  ocl::Kernel k = ctx.kernel("ops_norm", "rms_norm", ops_build_options(ctx));
  k.arg(0, *x.buffer).arg(1, cl_long{x.offset});
  k.arg(2, *w.buffer).arg(3, cl_long{w.offset});
  k.arg(4, *y.buffer).arg(5, cl_long{y.offset});
  k.arg(6, cl_int{dim}).arg(7, cl_float{eps}).arg(8, cl_float{weight_offset});
  k.arg(9, cl_int{weight ? 1 : 0});
  launch_rows(ctx, k, rows, local);
}

}  // namespace specdec::ops
