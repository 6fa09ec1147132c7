// Rotary position embedding on the device (kernels/ops_rope.cl). Host reference: ops/reference.h.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/model_types.h"
#include "device/device.h"
#include "ops/slice.h"

namespace specdec::ops {

// inv_freq[i] = freq_scale * base^(-2i / rope_dim) / freq_factors[i] for i < rope_dim / 2,
// computed in double and rounded to f32 (freq_factors: Llama 3.1's per-dim rope_freqs, or empty).
// Host and device use this same table, so angles agree bitwise.
std::vector<float> rope_inv_freq(int rope_dim, double base, double freq_scale = 1.0,
                                 std::span<const float> freq_factors = {});

// The frequencies of one RoPE variant, uploaded once: a model holds one per distinct
// (base, freq_scale) — Gemma 3 has two, for its sliding and its global layers.
class RopeTable {
 public:
  // ConfigError naming the field for type none, an odd / non-positive rope_dim, a base <= 1,
  // a freq_scale <= 0 or freq_factors of the wrong size.
  RopeTable(device::Device& dev, RopeType type, int rope_dim, double base,
            double freq_scale = 1.0, std::span<const float> freq_factors = {});

  RopeType type() const { return type_; }
  int rope_dim() const { return rope_dim_; }
  const std::vector<float>& inv_freq() const { return inv_freq_; }  // [rope_dim / 2]
  const device::Buffer& buffer() const { return buffer_; }          // inv_freq on the device

 private:
  RopeType type_;
  int rope_dim_;
  std::vector<float> inv_freq_;
  device::Buffer buffer_;
};

// Rotates the first table.rope_dim() dims of every head of x in place by the token's position
// (NORM: adjacent pairs; NEOX: (i, i + rope_dim / 2)). token_stride is the distance between
// tokens in elements (0: num_heads * head_size), so the q or k part of a fused projection
// [num_tokens, q + k + v] can be rotated where it lies.
void rope(device::Device& dev,
          Slice x,          // [num_tokens, num_heads, head_size] (rows token_stride apart)
          Slice positions,  // int32 [num_tokens]
          int64_t num_tokens, int num_heads, int head_size, const RopeTable& table,
          int64_t token_stride = 0);

// The same with the table built for this call (one small upload each time): for tests and
// one-off use; a forward pass should hold RopeTables.
void rope(device::Device& dev, Slice x, Slice positions, int64_t num_tokens, int num_heads,
          int head_size, int rope_dim, RopeType type, double base, double freq_scale = 1.0);

}  // namespace specdec::ops
