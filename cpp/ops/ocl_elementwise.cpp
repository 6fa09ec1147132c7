// The elementwise ops on OpenCL (kernels/ops_elementwise.cl).
#include "common/math.h"
#include "device/ocl_device.h"
#include "ops/impl.h"
#include "ops/ocl_common.h"

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

void ocl_add(device::Device& dev, Slice x, Slice y, int64_t n) {
  ocl::Context& ctx = ocl::context_of(dev);
  ocl::Kernel k = elementwise_kernel(ctx, "add");
  k.arg(0, *x.buffer).arg(1, cl_long{x.offset}).arg(2, *y.buffer).arg(3, cl_long{y.offset});
  k.arg(4, cl_long{n});
  launch_1d(ctx, k, n);
}

void ocl_add_bias(device::Device& dev, Slice x, Slice bias, int64_t rows, int dim) {
  ocl::Context& ctx = ocl::context_of(dev);
  ocl::Kernel k = elementwise_kernel(ctx, "add_bias");
  k.arg(0, *x.buffer).arg(1, cl_long{x.offset}).arg(2, *bias.buffer).arg(3, cl_long{bias.offset});
  k.arg(4, cl_int{dim});
  const size_t global[2] = {items(dim), static_cast<size_t>(rows)};
  k.launch(ctx, 2, global);
}

void ocl_scale(device::Device& dev, Slice x, int64_t n, float s) {
  ocl::Context& ctx = ocl::context_of(dev);
  ocl::Kernel k = elementwise_kernel(ctx, "scale");
  k.arg(0, *x.buffer).arg(1, cl_long{x.offset}).arg(2, cl_float{s}).arg(3, cl_long{n});
  launch_1d(ctx, k, n);
}

void ocl_softcap(device::Device& dev, Slice x, int64_t n, float cap) {
  ocl::Context& ctx = ocl::context_of(dev);
  ocl::Kernel k = elementwise_kernel(ctx, "softcap");
  k.arg(0, *x.buffer).arg(1, cl_long{x.offset}).arg(2, cl_float{cap}).arg(3, cl_long{n});
  launch_1d(ctx, k, n);
}

void ocl_gated_activation(device::Device& dev, Slice gate, Slice up, Slice out, int64_t rows, int ff,
                          Activation act, int64_t in_row_stride, const QuantizedOut* q) {
  ocl::Context& ctx = ocl::context_of(dev);
  if (q != nullptr) {
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
