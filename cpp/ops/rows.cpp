#include "ops/rows.h"

#include "common/errors.h"
#include "common/math.h"
#include "ops/impl.h"

namespace specdec::ops {
namespace {

// Elements spanned by `rows` rows of `cols` elements, `stride` apart.
int64_t strided_span(int64_t rows, int64_t cols, int64_t stride, const char* what) {
  if (rows == 0 || cols == 0) return 0;
  return checked_add(checked_mul(rows - 1, stride, what), cols, what);
}

}  // namespace

void gather_rows(device::Device& dev, Slice src, Slice idx, Slice dst, int64_t num_src_rows,
                 int64_t num_idx, int dim) {
  check_at_least(num_src_rows, 0, "gather_rows.num_src_rows");
  check_at_least(num_idx, 0, "gather_rows.num_idx");
  check_at_least(dim, 1, "gather_rows.dim");
  check_slice(src, checked_mul(num_src_rows, dim, "gather_rows.src"), "gather_rows.src");
  check_slice(idx, num_idx, "gather_rows.idx");
  check_slice(dst, checked_mul(num_idx, dim, "gather_rows.dst"), "gather_rows.dst");
  switch (dev.kind()) {
    case device::Kind::kOpenCL: return ocl_gather_rows(dev, src, idx, dst, num_src_rows, num_idx, dim);
    case device::Kind::kCpu: return cpu_gather_rows(dev, src, idx, dst, num_src_rows, num_idx, dim);
  }
}

void copy_2d(device::Device& dev, Slice src, Slice dst, int64_t rows, int64_t cols,
             int64_t src_row_stride, int64_t dst_row_stride) {
  check_at_least(rows, 0, "copy_2d.rows");
  check_at_least(cols, 0, "copy_2d.cols");
  check_at_least(src_row_stride, cols, "copy_2d.src_row_stride");
  check_at_least(dst_row_stride, cols, "copy_2d.dst_row_stride");
  check_slice(src, strided_span(rows, cols, src_row_stride, "copy_2d.src"), "copy_2d.src");
  check_slice(dst, strided_span(rows, cols, dst_row_stride, "copy_2d.dst"), "copy_2d.dst");
  switch (dev.kind()) {
    case device::Kind::kOpenCL: return ocl_copy_2d(dev, src, dst, rows, cols, src_row_stride, dst_row_stride);
    case device::Kind::kCpu: return cpu_copy_2d(dev, src, dst, rows, cols, src_row_stride, dst_row_stride);
  }
}

void split_columns(device::Device& dev, Slice src, Slice dst_a, Slice dst_b, Slice dst_c,
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
  switch (dev.kind()) {
    case device::Kind::kOpenCL: return ocl_split_columns(dev, src, dst_a, dst_b, dst_c, rows, a, b, c);
    case device::Kind::kCpu: return cpu_split_columns(dev, src, dst_a, dst_b, dst_c, rows, a, b, c);
  }
}

void gather_columns(device::Device& dev, Slice src, Slice cols, Slice dst, int64_t rows, int dim) {
  check_at_least(rows, 0, "gather_columns.rows");
  check_at_least(dim, 1, "gather_columns.dim");
  check_slice(src, checked_mul(rows, dim, "gather_columns.src"), "gather_columns.src");
  check_slice(cols, rows, "gather_columns.cols");
  check_slice(dst, rows, "gather_columns.dst");
  switch (dev.kind()) {
    case device::Kind::kOpenCL: return ocl_gather_columns(dev, src, cols, dst, rows, dim);
    case device::Kind::kCpu: return cpu_gather_columns(dev, src, cols, dst, rows, dim);
  }
}

}  // namespace specdec::ops
