#include "ops/norm.h"

#include <cmath>

#include "common/errors.h"
#include "common/math.h"

namespace specdec::ops {
namespace {

void launch_norm(ocl::Context& ctx, const std::string& op, Slice x, std::optional<Slice> residual,
                 std::optional<Slice> weight, Slice y, int64_t rows, int dim, float eps,
                 float weight_offset) {
  check_at_least(rows, 0, op + ".rows");
  check_at_least(dim, 1, op + ".dim");
  check_config(std::isfinite(eps) && eps >= 0.0f, op + ".eps", eps, "must be finite and >= 0");
  const int64_t n = checked_mul(rows, dim, "rows * dim");
  check_slice(x, n, op + ".x");
  if (residual) check_slice(*residual, n, op + ".residual");
  check_slice(y, n, op + ".y");
  if (weight) check_slice(*weight, dim, op + ".weight");
  if (rows == 0) return;
  const Slice r = residual.value_or(x);
  const Slice w = weight.value_or(x);
  ocl::Kernel k = ctx.kernel("ops_norm", "rms_norm", ops_build_options(ctx));
  k.arg(0, *x.buffer).arg(1, cl_long{x.offset});
  k.arg(2, *r.buffer).arg(3, cl_long{r.offset});
  k.arg(4, *w.buffer).arg(5, cl_long{w.offset});
  k.arg(6, *y.buffer).arg(7, cl_long{y.offset});
  k.arg(8, cl_int{dim}).arg(9, cl_float{eps}).arg(10, cl_float{weight_offset});
  k.arg(11, cl_int{weight ? 1 : 0}).arg(12, cl_int{residual ? 1 : 0});
  launch_rows(ctx, k, rows, reduction_local_size(ctx), 13);
}

}  // namespace

void rms_norm(ocl::Context& ctx, Slice x, std::optional<Slice> weight, Slice y, int64_t rows,
              int dim, float eps, float weight_offset) {
  launch_norm(ctx, "rms_norm", x, std::nullopt, weight, y, rows, dim, eps, weight_offset);
}

void add_rms_norm(ocl::Context& ctx, Slice x, Slice residual, std::optional<Slice> weight, Slice y,
                  int64_t rows, int dim, float eps, float weight_offset) {
  launch_norm(ctx, "add_rms_norm", x, residual, weight, y, rows, dim, eps, weight_offset);
}

}  // namespace specdec::ops
