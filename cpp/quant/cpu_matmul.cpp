// The quant ops on the native CPU device (cpu/matmul.h, cpu/activations.h, cpu/embedding.h): the
// same packed weight bytes and activation records as OpenCL's, weight row groups (or activation
// rows, ids) split over the pool.
#include <cstring>

#include "cpu/activations.h"
#include "cpu/embedding.h"
#include "cpu/matmul.h"
#include "device/cpu_device.h"
#include "quant/impl.h"

namespace specdec::quant {
namespace {

template <typename T>
T* host_at(const device::Buffer& b) {
  return reinterpret_cast<T*>(b.host());
}

}  // namespace

void cpu_quantize_activations(device::Device& dev, const device::Buffer& x, int64_t n, int64_t cols,
                              QuantizedActivations& out, int scale_block) {
  device::CpuDevice& cd = device::cpu_of(dev);
  const float* xp = host_at<const float>(x);
  int8_t* q = host_at<int8_t>(out.q8);
  cpu::ActRec* rec = host_at<cpu::ActRec>(out.rec);
  const cpu::Isa isa = cd.isa();
  // in column chunks: a decode's one row on every thread
  cd.record("quantize_activations", n * cpu::column_chunks(cols), 1, [=](int64_t i0, int64_t i1) {
    cpu::quantize_activation_chunks(xp, i0, i1, cols, scale_block, q, rec, isa);
  });
}

void cpu_matmul(device::Device& dev, const DeviceWeight& w, const device::Buffer& x,
                const QuantizedActivations& xq, int64_t n, device::Buffer& y, int64_t y_offset,
                int64_t ldy) {
  device::CpuDevice& cd = device::cpu_of(dev);
  // a weight lives as long as its model: past the flush that runs the ops reading it
  const DeviceLayout* layout = &w.layout;
  const cpu::PackedWeight pw{layout, host_at<const uint8_t>(w.buffer)};
  const bool is_float = family(w.type()) == Family::kFloat;
  const float* xp = is_float ? host_at<const float>(x) : nullptr;
  const cpu::Activations act = is_float
                                   ? cpu::Activations{}
                                   : cpu::Activations{xq.n, xq.cols, host_at<const int8_t>(xq.q8),
                                                      host_at<const cpu::ActRec>(xq.rec)};
  float* yp = host_at<float>(y) + y_offset;
  const cpu::Isa isa = cd.isa();
  // weight groups from a shared counter: the threads finish together however memory serves them
  cd.record(
      "matmul", layout->groups, 1,
      [=](int64_t g0, int64_t g1) {
        cpu::MatmulInput in;
        in.n = n;
        in.x = xp;
        in.xq = is_float ? nullptr : &act;
        cpu::matmul(pw, in, g0, g1, yp, ldy, isa);
      },
      cpu::Program::Schedule::kDynamic);
}

void cpu_embedding_lookup(device::Device& dev, const DeviceWeight& w, const device::Buffer& ids,
                          int64_t n, device::Buffer& out, float scale) {
  const cpu::PackedWeight pw{&w.layout, host_at<const uint8_t>(w.buffer)};
  const int32_t* ip = host_at<const int32_t>(ids);
  float* op = host_at<float>(out);
  device::cpu_of(dev).record("embedding_lookup", n, 1, [=](int64_t t0, int64_t t1) {
    cpu::embedding(pw, ip, t0, t1, op, scale);
  });
}

}  // namespace specdec::quant
