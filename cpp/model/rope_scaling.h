// RoPE scaling as llama.cpp applies it (ggml's rope_yarn, llama_context's attn_factor, the Llama 3
// converter's rope_freqs), in the form ops::RopeTable takes: a layer's frequencies are
// freq_scale * base^(-2i / rope_dim) / factors[i], and cos and sin are multiplied by mscale.
//
//   linear  freq_scale = 1 / factor.
//   yarn    pair i's angle is freq_scale * theta (1 - mix_i) + theta mix_i with
//           mix_i = ramp(i) * ext_factor, ramp 1 below the correction range [low, high] of
//           yarn_corr_dims, 0 above it, linear between: as a per-pair divisor,
//           factors[i] = 1 / (freq_scale (1 - mix_i) + mix_i). mscale = yarn_mscale.
//   llama3  factors = the file's rope_freqs (or llama3_rope_factors of a config.json).
// A rope_freqs tensor divides the frequencies under any type (llama.cpp's freq_factors).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "model/config.h"

namespace specdec::model {

struct RopeFrequencies {
  double base = 10000;
  double freq_scale = 1;       // every angle times it
  std::vector<float> factors;  // [rope_dim / 2] divisors of each pair's frequency, or empty
  double mscale = 1;           // cos and sin times it: q . k carries mscale^2
  bool operator==(const RopeFrequencies&) const = default;
};

// ggml_rope_yarn_corr_dims: the pairs [low, high] (as dimension-pair indices, clamped to
// [0, rope_dim - 1]) between which YaRN blends: floor / ceil of
// rope_dim * ln(n_ctx_orig / (beta * 2 pi)) / (2 ln base) for beta_fast / beta_slow.
std::array<double, 2> yarn_corr_dims(int rope_dim, int64_t n_ctx_orig, double base,
                                     double beta_fast, double beta_slow);

// What cos and sin end up multiplied by in llama.cpp: rope_attn_factor, times 1 + 0.1 ln(factor)
// for YaRN with ext_factor != 0 and factor > 1 (llama_context cancels its own get_mscale and
// ggml's rope_yarn applies 1 + 0.1 ln(1 / freq_scale)).
double rope_mscale(const ModelConfig& c);

// Llama 3's per-pair divisors from a config.json's llama3 scaling (factor, low / high_freq_factor,
// original context), as llama.cpp's converter writes them into rope_freqs: 1 for wavelengths
// below original / high_freq_factor, factor above original / low_freq_factor, smooth between.
std::vector<float> llama3_rope_factors(const ModelConfig& c);

// The RoPE of layer il: its base, the scaling of its type (linear and YaRN apply to global layers
// only when local layers have a base of their own, as Gemma 3's), and rope_freqs ([rope_dim / 2]
// from the file, or empty). ConfigError naming the field for rope_freqs of the wrong size.
RopeFrequencies rope_frequencies(const ModelConfig& c, int il, std::span<const float> rope_freqs);

}  // namespace specdec::model
