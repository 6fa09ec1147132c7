// Row moves on the native CPU device (cpu/ops.h).
#include "ops/cpu_common.h"
#include "ops/impl.h"

namespace specdec::ops {

void cpu_gather_rows(device::Device& dev, Slice src, Slice idx, Slice dst, int64_t num_src_rows,
                     int64_t num_idx, int dim) {
  const float* sp = host_of<const float>(src);
  const int32_t* ip = host_of<const int32_t>(idx);
  float* dp = host_of<float>(dst);
  device::cpu_of(dev).record("gather_rows", num_idx, row_grain(dim), [=](int64_t j0, int64_t j1) {
    cpu::gather_rows(sp, ip, dp, j0, j1, num_src_rows, dim);
  });
}

void cpu_copy_2d(device::Device& dev, Slice src, Slice dst, int64_t rows, int64_t cols,
                 int64_t src_row_stride, int64_t dst_row_stride) {
  const float* sp = host_of<const float>(src);
  float* dp = host_of<float>(dst);
  device::cpu_of(dev).record("copy_2d", rows, row_grain(cols), [=](int64_t r0, int64_t r1) {
    cpu::copy_2d(sp, dp, r0, r1, cols, src_row_stride, dst_row_stride);
  });
}

void cpu_split_columns(device::Device& dev, Slice src, Slice dst_a, Slice dst_b, Slice dst_c,
                       int64_t rows, int a, int b, int c) {
  const float* sp = host_of<const float>(src);
  float* ap = host_of<float>(dst_a);
  float* bp = host_of<float>(dst_b);
  float* cp = c > 0 ? host_of<float>(dst_c) : nullptr;
  device::cpu_of(dev).record(
      "split_columns", rows, row_grain(int64_t{a} + b + c),
      [=](int64_t r0, int64_t r1) { cpu::split_columns(sp, ap, bp, cp, r0, r1, a, b, c); });
}

void cpu_gather_columns(device::Device& dev, Slice src, Slice cols, Slice dst, int64_t rows,
                        int dim) {
  const float* sp = host_of<const float>(src);
  const int32_t* cp = host_of<const int32_t>(cols);
  float* dp = host_of<float>(dst);
  device::cpu_of(dev).record("gather_columns", rows, 256, [=](int64_t r0, int64_t r1) {
    cpu::gather_columns(sp, cp, dp, r0, r1, dim);
  });
}

}  // namespace specdec::ops
