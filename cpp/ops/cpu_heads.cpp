// The per-head matmul on the native CPU device (cpu/ops.h), (token, head) pairs over the pool.
#include "ops/cpu_common.h"
#include "ops/impl.h"

namespace specdec::ops {

void cpu_head_matmul(device::Device& dev, Slice w, Slice x, Slice y, int64_t num_tokens, int heads,
                     int rows, int cols, int64_t x_head_stride, int64_t y_head_stride) {
  const float* wp = host_of<const float>(w);
  const float* xp = host_of<const float>(x);
  float* yp = host_of<float>(y);
  device::cpu_of(dev).record("head_matmul", num_tokens * heads, 1, [=](int64_t p0, int64_t p1) {
    cpu::head_matmul(wp, xp, yp, p0, p1, heads, rows, cols, x_head_stride, y_head_stride);
  });
}

}  // namespace specdec::ops
