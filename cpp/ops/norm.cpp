#include "ops/norm.h"

#include <cmath>

#include "common/errors.h"
#include "common/math.h"
#include "ops/impl.h"

namespace specdec::ops {
namespace {

void dispatch_norm(device::Device& dev, const std::string& op, Slice x, std::optional<Slice> residual,
                   std::optional<Slice> weight, Slice y, int64_t rows, int dim, float eps,
                   float weight_offset, const QuantizedOut* q) {
  check_at_least(rows, 0, op + ".rows");
  check_at_least(dim, 1, op + ".dim");
  SPECDEC_CHECK(std::isfinite(eps) && eps >= 0.0f, op + ".eps", eps, "must be finite and >= 0");
  const int64_t n = checked_mul(rows, dim, "rows * dim");
  check_slice(x, n, op + ".x");
  if (residual) check_slice(*residual, n, op + ".residual");
  check_slice(y, n, op + ".y");
  if (weight) check_slice(*weight, dim, op + ".weight");
  if (q != nullptr) {
    check_quantized_out(*q, rows, dim, op);
    SPECDEC_CHECK(y.offset == 0, op + ".y.offset", y.offset, "0 when the output is also quantised");
  }
  if (rows == 0) return;
  switch (dev.kind()) {
    case device::Kind::kOpenCL: return ocl_rms_norm(dev, x, residual, weight, y, rows, dim, eps, weight_offset, q);
    case device::Kind::kCpu: return cpu_rms_norm(dev, x, residual, weight, y, rows, dim, eps, weight_offset, q);
  }
}

}  // namespace

void check_quantized_out(const QuantizedOut& q, int64_t rows, int64_t dim, const std::string& op) {
  SPECDEC_CHECK(q.scale_block == 32 || q.scale_block == 256, op + ".quantized.scale_block",
                q.scale_block, "must be 32 or 256");
  SPECDEC_CHECK(dim % q.scale_block == 0, op + ".dim", dim,
                str_cat("a multiple of ", q.scale_block, " when the output is also quantised"));
  const auto n = static_cast<size_t>(rows * dim);
  SPECDEC_CHECK(q.q8 != nullptr && q.q16 != nullptr && q.rec != nullptr && q.q8->size_bytes() >= n &&
                    q.q16->size_bytes() >= n * 2 && q.rec->size_bytes() >= n / 32 * 16,
                op + ".quantized", "buffers too small",
                str_cat("must hold ", rows, " x ", dim, " activations"));
}

void rms_norm(device::Device& dev, Slice x, std::optional<Slice> weight, Slice y, int64_t rows,
              int dim, float eps, float weight_offset, const QuantizedOut* quantized) {
  dispatch_norm(dev, "rms_norm", x, std::nullopt, weight, y, rows, dim, eps, weight_offset, quantized);
}

void add_rms_norm(device::Device& dev, Slice x, Slice residual, std::optional<Slice> weight, Slice y,
                  int64_t rows, int dim, float eps, float weight_offset,
                  const QuantizedOut* quantized) {
  dispatch_norm(dev, "add_rms_norm", x, residual, weight, y, rows, dim, eps, weight_offset, quantized);
}

}  // namespace specdec::ops
