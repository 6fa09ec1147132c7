#include "ops/rope.h"

#include <cmath>

#include "common/errors.h"
#include "common/math.h"
#include "ops/impl.h"

namespace specdec::ops {

std::vector<float> rope_inv_freq(int rope_dim, double base, double freq_scale,
                                 std::span<const float> freq_factors) {
  std::vector<float> out(static_cast<size_t>(rope_dim / 2));
  for (int i = 0; i < rope_dim / 2; ++i) {
    double f = freq_scale * std::pow(base, -2.0 * i / rope_dim);
    if (!freq_factors.empty()) f /= freq_factors[static_cast<size_t>(i)];
    out[static_cast<size_t>(i)] = static_cast<float>(f);
  }
  return out;
}

RopeTable::RopeTable(device::Device& dev, RopeType type, int rope_dim, double base,
                     double freq_scale, std::span<const float> freq_factors)
    : type_(type), rope_dim_(rope_dim) {
  SPECDEC_CHECK(type != RopeType::kNone, "rope_type", rope_type_name(type),
               "must be norm or neox (a model without RoPE skips the op)");
  SPECDEC_CHECK(rope_dim > 0 && rope_dim % 2 == 0, "rope_dim", rope_dim, "must be even and > 0");
  SPECDEC_CHECK(std::isfinite(base) && base > 1.0, "rope_base", base, "must be finite and > 1");
  SPECDEC_CHECK(std::isfinite(freq_scale) && freq_scale > 0.0, "rope_freq_scale", freq_scale,
               "must be finite and > 0");
  SPECDEC_CHECK(freq_factors.empty() || freq_factors.size() == static_cast<size_t>(rope_dim / 2),
               "rope_freqs.size", freq_factors.size(),
               str_cat("must be 0 or rope_dim / 2 = ", rope_dim / 2));
  for (size_t i = 0; i < freq_factors.size(); ++i) {
    SPECDEC_CHECK(std::isfinite(freq_factors[i]) && freq_factors[i] > 0.0f,
                 str_cat("rope_freqs[", i, "]"), freq_factors[i], "must be finite and > 0");
  }
  inv_freq_ = rope_inv_freq(rope_dim, base, freq_scale, freq_factors);
  buffer_ = dev.allocate(inv_freq_.size() * sizeof(float), device::Lifetime::kWorkspace,
                         device::Access::kReadOnly);
  dev.write(buffer_, inv_freq_.data(), inv_freq_.size() * sizeof(float));
}

void rope(device::Device& dev, Slice x, Slice positions, int64_t num_tokens, int num_heads,
          int head_size, const RopeTable& table, int64_t token_stride) {
  const int rope_dim = table.rope_dim();
  check_at_least(num_tokens, 0, "rope.num_tokens");
  check_at_least(num_heads, 1, "rope.num_heads");
  SPECDEC_CHECK(head_size >= rope_dim, "rope.head_size", head_size,
               str_cat("must be >= rope_dim = ", rope_dim));
  const int64_t row = checked_mul(num_heads, head_size, "rope.num_heads * head_size");
  if (token_stride == 0) token_stride = row;
  SPECDEC_CHECK(token_stride >= row, "rope.token_stride", token_stride,
               str_cat("must be 0 or >= num_heads * head_size = ", row));
  if (num_tokens == 0) return;
  check_slice(x, checked_add(checked_mul(num_tokens - 1, token_stride, "rope.x"), row, "rope.x"),
              "rope.x");
  check_slice(positions, num_tokens, "rope.positions");
  switch (dev.kind()) {
    case device::Kind::kOpenCL: return ocl_rope(dev, x, positions, num_tokens, num_heads, head_size, table, token_stride);
    case device::Kind::kCpu: return cpu_rope(dev, x, positions, num_tokens, num_heads, head_size, table, token_stride);
  }
}

void rope(device::Device& dev, Slice x, Slice positions, int64_t num_tokens, int num_heads,
          int head_size, int rope_dim, RopeType type, double base, double freq_scale) {
  const RopeTable table(dev, type, rope_dim, base, freq_scale);
  rope(dev, x, positions, num_tokens, num_heads, head_size, table);
}

}  // namespace specdec::ops
