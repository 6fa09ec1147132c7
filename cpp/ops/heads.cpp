#include "ops/heads.h"

#include "common/errors.h"
#include "common/math.h"
#include "ops/impl.h"

namespace specdec::ops {

void head_matmul(device::Device& dev, Slice w, Slice x, Slice y, int64_t num_tokens, int heads,
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
  switch (dev.kind()) {
    case device::Kind::kOpenCL: return ocl_head_matmul(dev, w, x, y, num_tokens, heads, rows, cols, x_head_stride, y_head_stride);
    case device::Kind::kCpu: return cpu_head_matmul(dev, w, x, y, num_tokens, heads, rows, cols, x_head_stride, y_head_stride);
  }
}

}  // namespace specdec::ops
