// rms_norm and add_rms_norm on the native CPU device (cpu/ops.h), rows split over the pool.
#include <atomic>
#include <memory>
#include <vector>

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
  // Fewer rows than threads (a decode): each row in column chunks, one a thread, so that the
  // other threads do not wait for one (y apart from x and the residual: the chunks write them
  // while the row's other chunks read)
  const int threads = cd.num_threads();
  const int align = quantized ? q->scale_block : 32;
  const int64_t chunk = (int64_t{dim} + threads - 1) / threads;
  const int64_t aligned = (chunk + align - 1) / align * align;
  auto apart = [](const float* a, const float* b, int64_t n) { return a + n <= b || b + n <= a; };
  const int64_t n = rows * dim;
  if (rp != nullptr && rows < threads && dim % align == 0 && aligned < dim && apart(yp, xp, n) &&
      apart(yp, rp, n)) {
    const int64_t chunks = (dim + aligned - 1) / aligned;
    auto ready = std::make_shared<std::vector<std::atomic<int32_t>>>(static_cast<size_t>(rows));
    // static shares (the default schedule): a row's chunks wait for each other, so they must all
    // run at once, one share a thread; a counter handing out runs could leave one untaken
    cd.record("add_rms_norm", rows * chunks, 1, [=](int64_t i0, int64_t i1) {
      cpu::add_rms_norm_chunks(xp, rp, wp, yp, i0, i1, dim, aligned, eps, weight_offset, quantized ? &qo : nullptr,
                               ready->data(), isa);
    });
    return;
  }
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
