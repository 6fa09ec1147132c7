// The element-wise ops on the native CPU device (cpu/ops.h).
#include "cpu/activations.h"
#include "ops/cpu_common.h"
#include "ops/impl.h"

namespace specdec::ops {
namespace {
constexpr int64_t kFlatGrain = 4096;  // elements per run of a flat op
}

void cpu_add(device::Device& dev, Slice x, Slice y, int64_t n) {
  float* xp = host_of<float>(x);
  const float* yp = host_of<const float>(y);
  device::cpu_of(dev).record("add", n, kFlatGrain,
                             [=](int64_t i0, int64_t i1) { cpu::add(xp, yp, i0, i1); });
}

void cpu_add_bias(device::Device& dev, Slice x, Slice bias, int64_t rows, int dim) {
  float* xp = host_of<float>(x);
  const float* bp = host_of<const float>(bias);
  device::cpu_of(dev).record("add_bias", rows, row_grain(dim),
                             [=](int64_t r0, int64_t r1) { cpu::add_bias(xp, bp, r0, r1, dim); });
}

void cpu_scale(device::Device& dev, Slice x, int64_t n, float s) {
  float* xp = host_of<float>(x);
  device::cpu_of(dev).record("scale", n, kFlatGrain,
                             [=](int64_t i0, int64_t i1) { cpu::scale(xp, s, i0, i1); });
}

void cpu_softcap(device::Device& dev, Slice x, int64_t n, float cap) {
  float* xp = host_of<float>(x);
  device::cpu_of(dev).record("softcap", n, kFlatGrain,
                             [=](int64_t i0, int64_t i1) { cpu::softcap(xp, cap, i0, i1); });
}

void cpu_gated_activation(device::Device& dev, Slice gate, Slice up, Slice out, int64_t rows,
                          int ff, Activation act, int64_t in_row_stride, const QuantizedOut* q) {
  device::CpuDevice& cd = device::cpu_of(dev);
  const float* gp = host_of<const float>(gate);
  const float* up_p = host_of<const float>(up);
  float* op = host_of<float>(out);
  const bool quantized = q != nullptr;
  const cpu::QuantOut qo = quantized ? quant_out_of(*q) : cpu::QuantOut{};
  const cpu::Isa isa = cd.isa();
  // in column chunks: a decode's one row on every thread
  cd.record("gated_activation", rows * cpu::column_chunks(ff), 1, [=](int64_t i0, int64_t i1) {
    cpu::gated_activation_chunks(gp, up_p, op, i0, i1, ff, act, in_row_stride, quantized ? &qo : nullptr,
                                 isa);
  });
}

}  // namespace specdec::ops
