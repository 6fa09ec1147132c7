// The sampling ops on OpenCL (kernels/ops_sampling.cl, kernels/ops_topk.cl).
#include "common/errors.h"
#include "device/ocl_device.h"
#include "ops/impl.h"
#include "ops/ocl_common.h"

namespace specdec::ops {

void ocl_argmax(device::Device& dev, Slice logits, Slice ids, int64_t rows, int vocab) {
  ocl::Context& ctx = ocl::context_of(dev);
  ocl::Kernel k = ctx.kernel("ops_sampling", "argmax", ops_build_options(ctx));
  k.arg(0, *logits.buffer).arg(1, cl_long{logits.offset});
  k.arg(2, *ids.buffer).arg(3, cl_long{ids.offset}).arg(4, cl_int{vocab});
  launch_rows(ctx, k, rows, reduction_local_size(ctx), 5);
}

void ocl_top_k(device::Device& dev, Slice logits, Slice values, Slice ids, int64_t rows, int vocab, int k) {
  ocl::Context& ctx = ocl::context_of(dev);
  const bool heap = top_k_uses_heap(ctx);
  const int local = top_k_local_size(ctx);
  ocl::Kernel kern = ctx.kernel("ops_topk", heap ? "top_k_heap" : "top_k",
                                str_cat(ops_build_options(ctx, local), " -DCAP=", kTopKCandidates));
  kern.arg(0, *logits.buffer).arg(1, cl_long{logits.offset});
  kern.arg(2, *values.buffer).arg(3, cl_long{values.offset});
  kern.arg(4, *ids.buffer).arg(5, cl_long{ids.offset});
  kern.arg(6, cl_int{vocab}).arg(7, cl_int{k});
  launch_rows(ctx, kern, rows, heap ? 1 : local, 8);
}

void ocl_logsumexp(device::Device& dev, Slice logits, Slice lse, Slice out, int64_t rows, int vocab,
                   bool write_out) {
  ocl::Context& ctx = ocl::context_of(dev);
  ocl::Kernel k = ctx.kernel("ops_sampling", "logsumexp", ops_build_options(ctx));
  k.arg(0, *logits.buffer).arg(1, cl_long{logits.offset});
  k.arg(2, *lse.buffer).arg(3, cl_long{lse.offset});
  k.arg(4, *out.buffer).arg(5, cl_long{out.offset});
  k.arg(6, cl_int{vocab}).arg(7, cl_int{write_out ? 1 : 0});
  launch_rows(ctx, k, rows, reduction_local_size(ctx), 8);
}

}  // namespace specdec::ops
