#include "ops/heads.h"

#include "common/errors.h"
#include "common/math.h"

namespace specdec::ops {

void head_matmul(ocl::Context& ctx, Slice w, Slice x, Slice y, int64_t num_tokens, int heads,
                 int rows, int cols, int64_t x_head_stride, int64_t y_head_stride) {
  check_at_least(num_tokens, 0, "head_matmul.num_tokens");
  check_at_least(heads, 1, "head_matmul.heads");
  check_at_least(rows, 1, "head_matmul.rows");
  check_at_least(cols, 1, "head_matmul.cols");
  check_at_least(x_head_stride, cols, "head_matmul.x_head_stride");
  check_at_least(y_head_stride, rows, "head_matmul.y_head_stride");
  check_slice(w, checked_mul(int64_t{heads} * rows, cols, "head_matmul.w"), "head_matmul.w");
  if (num_tokens == 0) return;
  const int64_t last = checked_mul(num_tokens * heads - 1, x_head_stride, "head_matmul.x");
  check_slice(x, checked_add(last, cols, "head_matmul.x"), "head_matmul.x");
  const int64_t last_y = checked_mul(num_tokens * heads - 1, y_head_stride, "head_matmul.y");
  check_slice(y, checked_add(last_y, rows, "head_matmul.y"), "head_matmul.y");
  ocl::Kernel k = ctx.kernel("ops_heads", "head_matmul", ops_build_options(ctx));
  k.arg(0, *w.buffer).arg(1, cl_long{w.offset});
  k.arg(2, *x.buffer).arg(3, cl_long{x.offset}).arg(4, cl_long{x_head_stride});
  k.arg(5, *y.buffer).arg(6, cl_long{y.offset}).arg(7, cl_long{y_head_stride});
  k.arg(8, cl_int{heads}).arg(9, cl_int{rows}).arg(10, cl_int{cols});
  const size_t global[3] = {static_cast<size_t>(rows), static_cast<size_t>(heads),
                            static_cast<size_t>(num_tokens)};
  k.launch(ctx, 3, global);
}

}  // namespace specdec::ops
