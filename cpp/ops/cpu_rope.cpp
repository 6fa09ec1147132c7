// RoPE on the native CPU device (cpu/ops.h), tokens split over the pool.
#include "ops/cpu_common.h"
#include "ops/impl.h"

namespace specdec::ops {

void cpu_rope(device::Device& dev, Slice x, Slice positions, int64_t num_tokens, int num_heads,
              int head_size, const RopeTable& table, int64_t token_stride) {
  float* xp = host_of<float>(x);
  const int32_t* pp = host_of<const int32_t>(positions);
  // the table's device copy: a table gone before the op ran (a temporary) keeps its memory until then
  const float* inv_freq = reinterpret_cast<const float*>(table.buffer().host());
  const int rope_dim = table.rope_dim();
  const RopeType type = table.type();
  device::cpu_of(dev).record(
      "rope", num_tokens, row_grain(int64_t{num_heads} * head_size), [=](int64_t t0, int64_t t1) {
        cpu::rope(xp, pp, t0, t1, num_heads, head_size, inv_freq, rope_dim, type, token_stride);
      });
}

}  // namespace specdec::ops
