// The sampling reductions on the native CPU device (cpu/ops.h), rows over the pool.
#include <memory>
#include <vector>

#include "ops/cpu_common.h"
#include "ops/impl.h"

namespace specdec::ops {

// A large vocabulary is reduced in chunks (every thread busy on a decode's one row), then the
// chunks' parts combined per row (cpu/ops.h: the same result for any batch and thread count).
void cpu_argmax(device::Device& dev, Slice logits, Slice ids, int64_t rows, int vocab) {
  const float* lp = host_of<const float>(logits);
  int32_t* ip = host_of<int32_t>(ids);
  device::CpuDevice& cd = device::cpu_of(dev);
  const cpu::Isa isa = cd.isa();
  const int64_t chunks = cpu::vocab_chunks(vocab);
  if (chunks == 1) {
    cd.record("argmax", rows, 1, [=](int64_t r0, int64_t r1) { cpu::argmax(lp, ip, r0, r1, vocab, isa); });
    return;
  }
  auto parts = std::make_shared<std::vector<cpu::ArgmaxPart>>(static_cast<size_t>(rows * chunks));
  cd.record("argmax", rows * chunks, 1, [=](int64_t i0, int64_t i1) {
    cpu::argmax_parts(lp, parts->data(), i0, i1, vocab, isa);
  });
  cd.record("argmax_combine", rows, 1, [=](int64_t r0, int64_t r1) {
    cpu::argmax_combine(parts->data(), ip, r0, r1, vocab);
  });
}

void cpu_top_k(device::Device& dev, Slice logits, Slice values, Slice ids, int64_t rows, int vocab,
               int k) {
  const float* lp = host_of<const float>(logits);
  float* vp = host_of<float>(values);
  int32_t* ip = host_of<int32_t>(ids);
  device::cpu_of(dev).record(
      "top_k", rows, 1, [=](int64_t r0, int64_t r1) { cpu::top_k(lp, vp, ip, r0, r1, vocab, k); });
}

void cpu_logsumexp(device::Device& dev, Slice logits, Slice lse, Slice out, int64_t rows, int vocab,
                   bool write_out) {
  device::CpuDevice& cd = device::cpu_of(dev);
  const float* lp = host_of<const float>(logits);
  float* sp = host_of<float>(lse);
  float* op = write_out ? host_of<float>(out) : nullptr;
  const cpu::Isa isa = cd.isa();
  const int64_t chunks = cpu::vocab_chunks(vocab);
  if (write_out || chunks == 1) {
    cd.record(write_out ? "log_softmax" : "logsumexp", rows, 1,
              [=](int64_t r0, int64_t r1) { cpu::logsumexp(lp, sp, op, r0, r1, vocab, isa); });
    return;
  }
  auto parts = std::make_shared<std::vector<cpu::LsePart>>(static_cast<size_t>(rows * chunks));
  cd.record("logsumexp", rows * chunks, 1, [=](int64_t i0, int64_t i1) {
    cpu::logsumexp_parts(lp, parts->data(), i0, i1, vocab, isa);
  });
  cd.record("logsumexp_combine", rows, 1, [=](int64_t r0, int64_t r1) {
    cpu::logsumexp_combine(parts->data(), sp, r0, r1, vocab);
  });
}

}  // namespace specdec::ops
