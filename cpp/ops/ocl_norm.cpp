// rms_norm and add_rms_norm on OpenCL (kernels/ops_norm.cl).
#include "device/ocl_device.h"
#include "ops/impl.h"
#include "ops/ocl_common.h"

namespace specdec::ops {

void ocl_rms_norm(device::Device& dev, Slice x, std::optional<Slice> residual, std::optional<Slice> weight,
                  Slice y, int64_t rows, int dim, float eps, float weight_offset, const QuantizedOut* q) {
  ocl::Context& ctx = ocl::context_of(dev);
  const Slice r = residual.value_or(x);
  const Slice w = weight.value_or(x);
  ocl::Kernel k = ctx.kernel("ops_norm", "rms_norm", ops_build_options(ctx));
  k.arg(0, *x.buffer).arg(1, cl_long{x.offset});
  k.arg(2, *r.buffer).arg(3, cl_long{r.offset});
  k.arg(4, *w.buffer).arg(5, cl_long{w.offset});
  k.arg(6, *y.buffer).arg(7, cl_long{y.offset});
  k.arg(8, cl_int{dim}).arg(9, cl_float{eps}).arg(10, cl_float{weight_offset});
  k.arg(11, cl_int{weight ? 1 : 0}).arg(12, cl_int{residual ? 1 : 0});
  const device::Buffer& dummy = *y.buffer;  // never written without quantize
  k.arg(13, q ? *q->q8 : dummy).arg(14, q ? *q->q16 : dummy).arg(15, q ? *q->rec : dummy);
  k.arg(16, cl_int{q != nullptr ? q->scale_block : 0});
  launch_rows(ctx, k, rows, reduction_local_size(ctx), 17);
}

}  // namespace specdec::ops
