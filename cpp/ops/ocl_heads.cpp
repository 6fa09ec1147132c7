// head_matmul on OpenCL (kernels/ops_heads.cl).
#include "device/ocl_device.h"
#include "ops/impl.h"
#include "ops/ocl_common.h"

namespace specdec::ops {

void ocl_head_matmul(device::Device& dev, Slice w, Slice x, Slice y, int64_t num_tokens, int heads,
                     int rows, int cols, int64_t x_head_stride, int64_t y_head_stride) {
  ocl::Context& ctx = ocl::context_of(dev);
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
