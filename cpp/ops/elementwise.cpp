#include "ops/elementwise.h"

#include <cmath>

#include "common/errors.h"
#include "common/math.h"
#include "ops/impl.h"

namespace specdec::ops {

void add(device::Device& dev, Slice x, Slice y, int64_t n) {
  check_at_least(n, 0, "add.n");
  check_slice(x, n, "add.x");
  check_slice(y, n, "add.y");
  switch (dev.kind()) {
    case device::Kind::kOpenCL: return ocl_add(dev, x, y, n);
    case device::Kind::kCpu: return cpu_add(dev, x, y, n);
  }
}

void add_bias(device::Device& dev, Slice x, Slice bias, int64_t rows, int dim) {
  check_at_least(rows, 0, "add_bias.rows");
  check_at_least(dim, 1, "add_bias.dim");
  check_slice(x, checked_mul(rows, dim, "add_bias.rows * dim"), "add_bias.x");
  check_slice(bias, dim, "add_bias.bias");
  switch (dev.kind()) {
    case device::Kind::kOpenCL: return ocl_add_bias(dev, x, bias, rows, dim);
    case device::Kind::kCpu: return cpu_add_bias(dev, x, bias, rows, dim);
  }
}

void scale(device::Device& dev, Slice x, int64_t n, float s) {
  check_at_least(n, 0, "scale.n");
  check_slice(x, n, "scale.x");
  switch (dev.kind()) {
    case device::Kind::kOpenCL: return ocl_scale(dev, x, n, s);
    case device::Kind::kCpu: return cpu_scale(dev, x, n, s);
  }
}

void softcap(device::Device& dev, Slice x, int64_t n, float cap) {
  check_at_least(n, 0, "softcap.n");
  SPECDEC_CHECK(std::isfinite(cap) && cap > 0.0f, "softcap.cap", cap, "must be finite and > 0");
  check_slice(x, n, "softcap.x");
  switch (dev.kind()) {
    case device::Kind::kOpenCL: return ocl_softcap(dev, x, n, cap);
    case device::Kind::kCpu: return cpu_softcap(dev, x, n, cap);
  }
}

void gated_activation(device::Device& dev, Slice gate, Slice up, Slice out, int64_t rows, int ff,
                      Activation act, int64_t in_row_stride, const QuantizedOut* q) {
  check_at_least(rows, 0, "gated_activation.rows");
  check_at_least(ff, 1, "gated_activation.ff");
  if (in_row_stride == 0) in_row_stride = ff;
  SPECDEC_CHECK(in_row_stride >= ff, "gated_activation.in_row_stride", in_row_stride,
               str_cat("must be 0 or >= ff = ", ff));
  if (rows == 0) return;
  const int64_t in_span = checked_add(checked_mul(rows - 1, in_row_stride, "gated_activation.gate"),
                                      ff, "gated_activation.gate");
  check_slice(gate, in_span, "gated_activation.gate");
  check_slice(up, in_span, "gated_activation.up");
  check_slice(out, checked_mul(rows, ff, "gated_activation.rows * ff"), "gated_activation.out");
  if (q != nullptr) {
    check_quantized_out(*q, rows, ff, "gated_activation");
    SPECDEC_CHECK(out.offset == 0, "gated_activation.out.offset", out.offset, "0 when the output is also quantised");
  }
  switch (dev.kind()) {
    case device::Kind::kOpenCL: return ocl_gated_activation(dev, gate, up, out, rows, ff, act, in_row_stride, q);
    case device::Kind::kCpu: return cpu_gated_activation(dev, gate, up, out, rows, ff, act, in_row_stride, q);
  }
}

}  // namespace specdec::ops
