#include "ops/norm.h"

#include <cmath>

#include "common/errors.h"
#include "common/math.h"

namespace specdec::ops {
namespace {

void launch_norm(ocl::Context& ctx, const std::string& op, Slice x, std::optional<Slice> residual,
                 std::optional<Slice> weight, Slice y, int64_t rows, int dim, float eps,
                 float weight_offset, const QuantizedOut* q) {
  check_at_least(rows, 0, op + ".rows");
  check_at_least(dim, 1, op + ".dim");
  SPECDEC_CHECK(std::isfinite(eps) && eps >= 0.0f, op + ".eps", eps, "must be finite and >= 0");
  const int64_t n = checked_mul(rows, dim, "rows * dim");
  check_slice(x, n, op + ".x");
  if (residual) check_slice(*residual, n, op + ".residual");
  check_slice(y, n, op + ".y");
  if (weight) check_slice(*weight, dim, op + ".weight");
  if (q != nullptr) {
    check_quantized_out(*q, rows, dim, op);
    SPECDEC_CHECK(y.offset == 0, op + ".y.offset", y.offset, "0 when the output is also quantised");
  }
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
  const ocl::Buffer& dummy = *y.buffer;  // never written without quantize
  k.arg(13, q ? *q->q8 : dummy).arg(14, q ? *q->q16 : dummy).arg(15, q ? *q->rec : dummy);
  k.arg(16, cl_int{q != nullptr ? q->scale_block : 0});
  launch_rows(ctx, k, rows, reduction_local_size(ctx), 17);
}

}  // namespace

void check_quantized_out(const QuantizedOut& q, int64_t rows, int64_t dim, const std::string& op) {
  SPECDEC_CHECK(q.scale_block == 32 || q.scale_block == 256, op + ".quantized.scale_block",
                q.scale_block, "must be 32 or 256");
  SPECDEC_CHECK(dim % q.scale_block == 0, op + ".dim", dim,
                str_cat("a multiple of ", q.scale_block, " when the output is also quantised"));
  const auto n = static_cast<size_t>(rows * dim);
  SPECDEC_CHECK(q.q8 != nullptr && q.q16 != nullptr && q.rec != nullptr && q.q8->size_bytes() >= n &&
                    q.q16->size_bytes() >= n * 2 && q.rec->size_bytes() >= n / 32 * 16,
                op + ".quantized", "buffers too small",
                str_cat("must hold ", rows, " x ", dim, " activations"));
}

void rms_norm(ocl::Context& ctx, Slice x, std::optional<Slice> weight, Slice y, int64_t rows,
              int dim, float eps, float weight_offset, const QuantizedOut* quantized) {
  launch_norm(ctx, "rms_norm", x, std::nullopt, weight, y, rows, dim, eps, weight_offset, quantized);
}

void add_rms_norm(ocl::Context& ctx, Slice x, Slice residual, std::optional<Slice> weight, Slice y,
                  int64_t rows, int dim, float eps, float weight_offset,
                  const QuantizedOut* quantized) {
  launch_norm(ctx, "add_rms_norm", x, residual, weight, y, rows, dim, eps, weight_offset, quantized);
}

}  // namespace specdec::ops
