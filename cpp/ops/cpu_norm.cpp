// rms_norm and add_rms_norm on the native CPU device (cpu/ops.h), rows split over the pool.
#include "ops/cpu_common.h"
#include "ops/impl.h"

namespace specdec::ops {

void cpu_rms_norm(device::Device& dev, Slice x, std::optional<Slice> residual,
                  std::optional<Slice> weight, Slice y, int64_t rows, int dim, float eps,
                  float weight_offset, const QuantizedOut* q) {
  device::CpuDevice& cd = device::cpu_of(dev);
  float* xp = host_of<float>(x);
  const float* rp = residual ? host_of<const float>(*residual) : nullptr;
  const float* wp = weight ? host_of<const float>(*weight) : nullptr;
  float* yp = host_of<float>(y);
  const bool quantized = q != nullptr;
  const cpu::QuantOut qo = quantized ? quant_out_of(*q) : cpu::QuantOut{};
  const cpu::Isa isa = cd.isa();
  cd.record(rp ? "add_rms_norm" : "rms_norm", rows, row_grain(dim), [=](int64_t r0, int64_t r1) {
    const cpu::QuantOut* qp = quantized ? &qo : nullptr;
    if (rp != nullptr) {
      cpu::add_rms_norm(xp, rp, wp, yp, r0, r1, dim, eps, weight_offset, qp, isa);
    } else {
      cpu::rms_norm(xp, wp, yp, r0, r1, dim, eps, weight_offset, qp, isa);
    }
  });
}

}  // namespace specdec::ops
