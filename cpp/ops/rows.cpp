#include "ops/rows.h"

#include "common/errors.h"
#include "common/math.h"

namespace specdec::ops {
namespace {

ocl::Kernel rows_kernel(ocl::Context& ctx, const char* name) {
  return ctx.kernel("ops_rows", name, ops_build_options(ctx));
}

// Work-items for a row of n elements: 16 each (kernels/ops_rows.cl).
size_t items(int64_t n) { return static_cast<size_t>(cdiv(n, 16)); }

// Elements spanned by `rows` rows of `cols` elements, `stride` apart.
int64_t strided_span(int64_t rows, int64_t cols, int64_t stride, const char* what) {
  if (rows == 0 || cols == 0) return 0;
  return checked_add(checked_mul(rows - 1, stride, what), cols, what);
}

}  // namespace

void gather_rows(ocl::Context& ctx, Slice src, Slice idx, Slice dst, int64_t num_src_rows,
                 int64_t num_idx, int dim) {
  check_at_least(num_src_rows, 0, "gather_rows.num_src_rows");
  check_at_least(num_idx, 0, "gather_rows.num_idx");
  check_at_least(dim, 1, "gather_rows.dim");
  check_slice(src, checked_mul(num_src_rows, dim, "gather_rows.src"), "gather_rows.src");
  check_slice(idx, num_idx, "gather_rows.idx");
  check_slice(dst, checked_mul(num_idx, dim, "gather_rows.dst"), "gather_rows.dst");
  ocl::Kernel k = rows_kernel(ctx, "gather_rows");
  k.arg(0, *src.buffer).arg(1, cl_long{src.offset});
  k.arg(2, *idx.buffer).arg(3, cl_long{idx.offset});
  k.arg(4, *dst.buffer).arg(5, cl_long{dst.offset});
  k.arg(6, cl_int{dim}).arg(7, cl_long{num_src_rows});
  const size_t global[2] = {items(dim), static_cast<size_t>(num_idx)};
  k.launch(ctx, 2, global);
}

void copy_2d(ocl::Context& ctx, Slice src, Slice dst, int64_t rows, int64_t cols,
             int64_t src_row_stride, int64_t dst_row_stride) {
  check_at_least(rows, 0, "copy_2d.rows");
  check_at_least(cols, 0, "copy_2d.cols");
  check_at_least(src_row_stride, cols, "copy_2d.src_row_stride");
  check_at_least(dst_row_stride, cols, "copy_2d.dst_row_stride");
  check_slice(src, strided_span(rows, cols, src_row_stride, "copy_2d.src"), "copy_2d.src");
  check_slice(dst, strided_span(rows, cols, dst_row_stride, "copy_2d.dst"), "copy_2d.dst");
  ocl::Kernel k = rows_kernel(ctx, "copy_2d");
  k.arg(0, *src.buffer).arg(1, cl_long{src.offset}).arg(2, cl_long{src_row_stride});
  k.arg(3, *dst.buffer).arg(4, cl_long{dst.offset}).arg(5, cl_long{dst_row_stride});
  k.arg(6, cl_long{cols});
  const size_t global[2] = {items(cols), static_cast<size_t>(rows)};
  k.launch(ctx, 2, global);
}

void split_columns(ocl::Context& ctx, Slice src, Slice dst_a, Slice dst_b, Slice dst_c,
                   int64_t rows, int a, int b, int c) {
  check_at_least(rows, 0, "split_columns.rows");
  check_at_least(a, 1, "split_columns.a");
  check_at_least(b, 0, "split_columns.b");
  check_at_least(c, 0, "split_columns.c");
  const int64_t width = int64_t{a} + b + c;
  SPECDEC_CHECK(width <= INT32_MAX, "split_columns.a + b + c", width, "must fit in int32");
  check_slice(src, checked_mul(rows, width, "split_columns.src"), "split_columns.src");
  check_slice(dst_a, checked_mul(rows, a, "split_columns.dst_a"), "split_columns.dst_a");
  check_slice(dst_b, checked_mul(rows, b, "split_columns.dst_b"), "split_columns.dst_b");
  check_slice(dst_c, checked_mul(rows, c, "split_columns.dst_c"), "split_columns.dst_c");
  ocl::Kernel k = rows_kernel(ctx, "split_columns");
  k.arg(0, *src.buffer).arg(1, cl_long{src.offset});
  k.arg(2, *dst_a.buffer).arg(3, cl_long{dst_a.offset});
  k.arg(4, *dst_b.buffer).arg(5, cl_long{dst_b.offset});
  k.arg(6, *dst_c.buffer).arg(7, cl_long{dst_c.offset});
  k.arg(8, cl_int{a}).arg(9, cl_int{b}).arg(10, cl_int{c});
  const size_t global[2] = {items(width), static_cast<size_t>(rows)};
  k.launch(ctx, 2, global);
}

void gather_columns(ocl::Context& ctx, Slice src, Slice cols, Slice dst, int64_t rows, int dim) {
  check_at_least(rows, 0, "gather_columns.rows");
  check_at_least(dim, 1, "gather_columns.dim");
  check_slice(src, checked_mul(rows, dim, "gather_columns.src"), "gather_columns.src");
  check_slice(cols, rows, "gather_columns.cols");
  check_slice(dst, rows, "gather_columns.dst");
  ocl::Kernel k = rows_kernel(ctx, "gather_columns");
  k.arg(0, *src.buffer).arg(1, cl_long{src.offset});
  k.arg(2, *cols.buffer).arg(3, cl_long{cols.offset});
  k.arg(4, *dst.buffer).arg(5, cl_long{dst.offset}).arg(6, cl_int{dim});
  const size_t global = static_cast<size_t>(rows);
  k.launch(ctx, 1, &global);
}

}  // namespace specdec::ops
