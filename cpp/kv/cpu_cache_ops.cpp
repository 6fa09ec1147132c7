// The KV-cache ops on the native CPU device (cpu/kv_write.h), tokens split over the pool:
// distinct tokens have distinct slots, so the ranges never write the same bytes.
#include "cpu/kv_write.h"
#include "device/cpu_device.h"
#include "kv/impl.h"

namespace specdec::kv {
namespace {

template <typename T>
T* host_at(const device::Buffer& b, int64_t elem_offset = 0) {
  return reinterpret_cast<T*>(b.host()) + elem_offset;
}

constexpr int64_t kTokenGrain = 4;  // tokens per run of work
constexpr int kStepAnglesMaxTokens = 64;  // RoPE angles computed when recorded up to this many tokens

// The cache dtypes the native writes and reads store (f32, f16, bf16): the OpenCL kernels' set,
// refused with the same UnsupportedError (kv::cache_dtype_define).
void check_dtype(const LayerKvView& view, const char* who) { (void)cache_dtype_define(view.spec.dtype, who); }

}  // namespace

void cpu_kv_cache_write(device::Device& dev, const device::Buffer& cache, const LayerKvView& view,
                        const KvPartView& p, const device::Buffer& src,
                        const device::Buffer& slot_mapping, int num_tokens) {
  check_dtype(view, "kv_cache_write");
  uint8_t* c = host_at<uint8_t>(cache);
  const cpu::KvSrc s{host_at<const float>(src), int64_t{p.num_heads} * p.width};
  const int32_t* slots = host_at<const int32_t>(slot_mapping);
  device::cpu_of(dev).record(
      "kv_cache_write", num_tokens, kTokenGrain,
      [=](int64_t t0, int64_t t1) { cpu::kv_write(c, view, p, s, slots, t0, t1); });
}

void cpu_kv_cache_write_kv(device::Device& dev, const device::Buffer& cache,
                           const LayerKvView& view, const KvRows& k, const KvRows& v,
                           const device::Buffer& slot_mapping, int num_tokens) {
  check_dtype(view, "kv_cache_write_kv");
  uint8_t* c = host_at<uint8_t>(cache);
  const bool has_k = !view.k.empty(), has_v = !view.v.empty();
  const cpu::KvSrc ks =
      has_k ? cpu::KvSrc{host_at<const float>(*k.buffer, k.offset), token_stride(k, view.k)}
            : cpu::KvSrc{};
  const cpu::KvSrc vs =
      has_v ? cpu::KvSrc{host_at<const float>(*v.buffer, v.offset), token_stride(v, view.v)}
            : cpu::KvSrc{};
  const int32_t* slots = host_at<const int32_t>(slot_mapping);
  device::cpu_of(dev).record("kv_cache_write_kv", num_tokens, kTokenGrain,
                             [=](int64_t t0, int64_t t1) {
                               if (has_k) cpu::kv_write(c, view, view.k, ks, slots, t0, t1);
                               if (has_v) cpu::kv_write(c, view, view.v, vs, slots, t0, t1);
                             });
}

void cpu_kv_cache_write_qkv(device::Device& dev, const device::Buffer& cache,
                            const LayerKvView& view, const QkvEpilogue& e,
                            const device::Buffer& slot_mapping, int num_tokens) {
  check_dtype(view, "kv_cache_write_qkv");
  uint8_t* c = host_at<uint8_t>(cache);
  cpu::QkvArgs a;
  a.x = host_at<const float>(*e.x);
  a.x_stride = e.x_stride;
  a.bias = e.bias ? host_at<const float>(*e.bias) : nullptr;
  a.positions = host_at<const int32_t>(*e.positions);
  a.inv_freq = e.inv_freq ? host_at<const float>(*e.inv_freq) : nullptr;
  a.neox = e.neox;
  a.q_out = host_at<float>(*e.q_out);
  a.q_stride = e.q_stride;
  a.q_heads = e.q_heads;
  a.kv_heads = e.kv_heads;
  a.head_size = e.head_size;
  const int32_t* slots = host_at<const int32_t>(slot_mapping);
  device::CpuDevice& cd = device::cpu_of(dev);
  // a decode's or a verify's angles once for the step's layers (a long prefill's in the op, on
  // every thread)
  std::shared_ptr<const std::vector<float>> angles;
  if (a.inv_freq != nullptr && num_tokens <= kStepAnglesMaxTokens) {
    angles = cd.rope_angles(a.positions, num_tokens, a.inv_freq, e.head_size / 2);
    a.angles = angles->data();
  }
  // a token's q heads and its k and v heads as two items: a decode's one token on two threads
  cd.record("kv_cache_write_qkv", 2 * int64_t{num_tokens}, 1, [=](int64_t i0, int64_t i1) {
    (void)angles;  // kept alive while the op may run
    cpu::qkv_epilogue(c, view, a, slots, i0, i1);
  });
}

void cpu_kv_cache_gather(device::Device& dev, const device::Buffer& cache, const LayerKvView& view,
                         const KvPartView& p, const device::Buffer& slot_mapping,
                         const device::Buffer& dst, int num_tokens) {
  check_dtype(view, "kv_cache_gather");
  const uint8_t* c = host_at<const uint8_t>(cache);
  const int32_t* slots = host_at<const int32_t>(slot_mapping);
  float* d = host_at<float>(dst);
  device::cpu_of(dev).record(
      "kv_cache_gather", num_tokens, kTokenGrain,
      [=](int64_t t0, int64_t t1) { cpu::kv_gather(c, view, p, slots, d, t0, t1); });
}

}  // namespace specdec::kv
