#include "ops/elementwise.h"

#include <cmath>

#include "common/errors.h"
#include "common/math.h"

namespace specdec::ops {
namespace {

ocl::Kernel elementwise_kernel(ocl::Context& ctx, const char* name) {
  return ctx.kernel("ops_elementwise", name, ops_build_options(ctx));
}

// Work-items for n elements: 16 each (kernels/ops_elementwise.cl).
size_t items(int64_t n) { return static_cast<size_t>(cdiv(n, 16)); }

void launch_1d(ocl::Context& ctx, ocl::Kernel& k, int64_t n) {
  const size_t global = items(n);
  k.launch(ctx, 1, &global);
}

}  // namespace

void add(ocl::Context& ctx, Slice x, Slice y, int64_t n) {
  check_at_least(n, 0, "add.n");
  check_slice(x, n, "add.x");
  check_slice(y, n, "add.y");
  ocl::Kernel k = elementwise_kernel(ctx, "add");
  k.arg(0, *x.buffer).arg(1, cl_long{x.offset}).arg(2, *y.buffer).arg(3, cl_long{y.offset});
  k.arg(4, cl_long{n});
  launch_1d(ctx, k, n);
}

void add_bias(ocl::Context& ctx, Slice x, Slice bias, int64_t rows, int dim) {
  check_at_least(rows, 0, "add_bias.rows");
  check_at_least(dim, 1, "add_bias.dim");
  check_slice(x, checked_mul(rows, dim, "add_bias.rows * dim"), "add_bias.x");
  check_slice(bias, dim, "add_bias.bias");
  ocl::Kernel k = elementwise_kernel(ctx, "add_bias");
  k.arg(0, *x.buffer).arg(1, cl_long{x.offset}).arg(2, *bias.buffer).arg(3, cl_long{bias.offset});
  k.arg(4, cl_int{dim});
  const size_t global[2] = {items(dim), static_cast<size_t>(rows)};
  k.launch(ctx, 2, global);
}

void scale(ocl::Context& ctx, Slice x, int64_t n, float s) {
  check_at_least(n, 0, "scale.n");
  check_slice(x, n, "scale.x");
  ocl::Kernel k = elementwise_kernel(ctx, "scale");
  k.arg(0, *x.buffer).arg(1, cl_long{x.offset}).arg(2, cl_float{s}).arg(3, cl_long{n});
  launch_1d(ctx, k, n);
}

void softcap(ocl::Context& ctx, Slice x, int64_t n, float cap) {
  check_at_least(n, 0, "softcap.n");
  SPECDEC_CHECK(std::isfinite(cap) && cap > 0.0f, "softcap.cap", cap, "must be finite and > 0");
  check_slice(x, n, "softcap.x");
  ocl::Kernel k = elementwise_kernel(ctx, "softcap");
  k.arg(0, *x.buffer).arg(1, cl_long{x.offset}).arg(2, cl_float{cap}).arg(3, cl_long{n});
  launch_1d(ctx, k, n);
}

void gated_activation(ocl::Context& ctx, Slice gate, Slice up, Slice out, int64_t rows, int ff,
                      Activation act, int64_t in_row_stride, const QuantizedOut* q) {
  check_at_least(rows, 0, "gated_activation.rows");
  check_at_least(ff, 1, "gated_activation.ff");
  if (in_row_stride == 0) in_row_stride = ff;
  SPECDEC_CHECK(in_row_stride >= ff, "gated_activation.in_row_stride", in_row_stride,
               str_cat("must be 0 or >= ff = ", ff));
  if (rows == 0) return;
  const int64_t in_span = checked_add(checked_mul(rows - 1, in_row_stride, "gated_activation.gate"),
                                      ff, "gated_activation.gate");
  check_slice(gate, in_span, "gated_activation.gate");
  check_slice(up, in_span, "gated_activation.up");
  check_slice(out, checked_mul(rows, ff, "gated_activation.rows * ff"), "gated_activation.out");
  if (q != nullptr) {
    check_quantized_out(*q, rows, ff, "gated_activation");
    SPECDEC_CHECK(out.offset == 0, "gated_activation.out.offset", out.offset, "0 when the output is also quantised");
    ocl::Kernel k = elementwise_kernel(ctx, "gated_activation_q");
    k.arg(0, *gate.buffer).arg(1, cl_long{gate.offset});
    k.arg(2, *up.buffer).arg(3, cl_long{up.offset});
    k.arg(4, *out.buffer).arg(5, cl_int{ff}).arg(6, cl_long{in_row_stride});
    k.arg(7, cl_int{act == Activation::kSilu ? 0 : 1});
    k.arg(8, *q->q8).arg(9, *q->q16).arg(10, *q->rec).arg(11, cl_int{q->scale_block});
    const size_t global[2] = {static_cast<size_t>(ff / q->scale_block), static_cast<size_t>(rows)};
    k.launch(ctx, 2, global);
    return;
  }
  ocl::Kernel k = elementwise_kernel(ctx, "gated_activation");
  k.arg(0, *gate.buffer).arg(1, cl_long{gate.offset});
  k.arg(2, *up.buffer).arg(3, cl_long{up.offset});
  k.arg(4, *out.buffer).arg(5, cl_long{out.offset});
  k.arg(6, cl_int{ff}).arg(7, cl_long{in_row_stride});
  k.arg(8, cl_int{act == Activation::kSilu ? 0 : 1});
  const size_t global[2] = {items(ff), static_cast<size_t>(rows)};
  k.launch(ctx, 2, global);
}

}  // namespace specdec::ops
