// The row ops on OpenCL (kernels/ops_rows.cl).
#include "common/math.h"
#include "device/ocl_device.h"
#include "ops/impl.h"
#include "ops/ocl_common.h"

namespace specdec::ops {
namespace {

ocl::Kernel rows_kernel(ocl::Context& ctx, const char* name) {
  return ctx.kernel("ops_rows", name, ops_build_options(ctx));
}

// Work-items for a row of n elements: 16 each (kernels/ops_rows.cl).
size_t items(int64_t n) { return static_cast<size_t>(cdiv(n, 16)); }

}  // namespace

void ocl_gather_rows(device::Device& dev, Slice src, Slice idx, Slice dst, int64_t num_src_rows,
                     int64_t num_idx, int dim) {
  ocl::Context& ctx = ocl::context_of(dev);
  ocl::Kernel k = rows_kernel(ctx, "gather_rows");
  k.arg(0, *src.buffer).arg(1, cl_long{src.offset});
  k.arg(2, *idx.buffer).arg(3, cl_long{idx.offset});
  k.arg(4, *dst.buffer).arg(5, cl_long{dst.offset});
  k.arg(6, cl_int{dim}).arg(7, cl_long{num_src_rows});
  const size_t global[2] = {items(dim), static_cast<size_t>(num_idx)};
  k.launch(ctx, 2, global);
}

void ocl_copy_2d(device::Device& dev, Slice src, Slice dst, int64_t rows, int64_t cols,
                 int64_t src_row_stride, int64_t dst_row_stride) {
  ocl::Context& ctx = ocl::context_of(dev);
  ocl::Kernel k = rows_kernel(ctx, "copy_2d");
  k.arg(0, *src.buffer).arg(1, cl_long{src.offset}).arg(2, cl_long{src_row_stride});
  k.arg(3, *dst.buffer).arg(4, cl_long{dst.offset}).arg(5, cl_long{dst_row_stride});
  k.arg(6, cl_long{cols});
  const size_t global[2] = {items(cols), static_cast<size_t>(rows)};
  k.launch(ctx, 2, global);
}

void ocl_split_columns(device::Device& dev, Slice src, Slice dst_a, Slice dst_b, Slice dst_c,
                       int64_t rows, int a, int b, int c) {
  ocl::Context& ctx = ocl::context_of(dev);
  ocl::Kernel k = rows_kernel(ctx, "split_columns");
  k.arg(0, *src.buffer).arg(1, cl_long{src.offset});
  k.arg(2, *dst_a.buffer).arg(3, cl_long{dst_a.offset});
  k.arg(4, *dst_b.buffer).arg(5, cl_long{dst_b.offset});
  k.arg(6, *dst_c.buffer).arg(7, cl_long{dst_c.offset});
  k.arg(8, cl_int{a}).arg(9, cl_int{b}).arg(10, cl_int{c});
  const size_t global[2] = {items(int64_t{a} + b + c), static_cast<size_t>(rows)};
  k.launch(ctx, 2, global);
}

void ocl_gather_columns(device::Device& dev, Slice src, Slice cols, Slice dst, int64_t rows, int dim) {
  ocl::Context& ctx = ocl::context_of(dev);
  ocl::Kernel k = rows_kernel(ctx, "gather_columns");
  k.arg(0, *src.buffer).arg(1, cl_long{src.offset});
  k.arg(2, *cols.buffer).arg(3, cl_long{cols.offset});
  k.arg(4, *dst.buffer).arg(5, cl_long{dst.offset}).arg(6, cl_int{dim});
  const size_t global = static_cast<size_t>(rows);
  k.launch(ctx, 1, &global);
}

}  // namespace specdec::ops
