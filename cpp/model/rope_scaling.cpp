#include "model/rope_scaling.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "common/errors.h"

namespace specdec::model {
namespace {

// ggml_rope_yarn_corr_dim (in float, as ggml computes it).
float corr_dim(int rope_dim, int64_t n_ctx_orig, double beta, double base) {
  return static_cast<float>(rope_dim) *
         std::log(static_cast<float>(n_ctx_orig) /
                  (static_cast<float>(beta) * 2 * static_cast<float>(std::numbers::pi))) /
         (2 * std::log(static_cast<float>(base)));
}

// rope_yarn_ramp: 1 below low, 0 above high, linear between (pair index i).
double yarn_ramp(double low, double high, int i) {
  const double y = (i - low) / std::max(0.001, high - low);
  return 1 - std::min(1.0, std::max(0.0, y));
}

bool is_local(const ModelConfig& c, const LayerConfig& l) {
  return c.rope_base_local > 0 && l.attention != LayerAttention::kFull;
}

}  // namespace

std::array<double, 2> yarn_corr_dims(int rope_dim, int64_t n_ctx_orig, double base,
                                     double beta_fast, double beta_slow) {
  const double start = std::floor(corr_dim(rope_dim, n_ctx_orig, beta_fast, base));
  const double end = std::ceil(corr_dim(rope_dim, n_ctx_orig, beta_slow, base));
  return {std::max(0.0, start), std::min(static_cast<double>(rope_dim - 1), end)};
}

double rope_mscale(const ModelConfig& c) {
  const double f = c.rope_scaling_factor;
  const bool yarn = c.rope_scaling_type == "yarn" && c.rope_yarn_ext_factor != 0;
  return c.rope_attn_factor * (yarn && f > 1 ? 1 + 0.1 * std::log(f) : 1.0);
}

std::vector<float> llama3_rope_factors(const ModelConfig& c) {
  const double old_len = static_cast<double>(c.rope_original_context_length);
  const double low = c.rope_llama3_low_freq_factor, high = c.rope_llama3_high_freq_factor;
  const double low_wavelen = old_len / low, high_wavelen = old_len / high;
  std::vector<float> out(static_cast<size_t>(c.rope_dim / 2));
  for (int i = 0; i < c.rope_dim / 2; ++i) {
    const double wavelen = 2 * std::numbers::pi * std::pow(c.rope_base, 2.0 * i / c.rope_dim);
    double f = 1;
    if (wavelen > low_wavelen) {
      f = c.rope_scaling_factor;
    } else if (wavelen >= high_wavelen) {
      const double smooth = (old_len / wavelen - low) / (high - low);
      f = 1 / ((1 - smooth) / c.rope_scaling_factor + smooth);
    }
    out[static_cast<size_t>(i)] = static_cast<float>(f);
  }
  return out;
}

RopeFrequencies rope_frequencies(const ModelConfig& c, int il, std::span<const float> rope_freqs) {
  const LayerConfig& l = c.layers.at(static_cast<size_t>(il));
  const int half = c.rope_dim / 2;
  SPECDEC_CHECK(rope_freqs.empty() || static_cast<int>(rope_freqs.size()) == half,
                "rope_freqs.size", rope_freqs.size(), str_cat("0 or rope_dim / 2 = ", half));
  RopeFrequencies out;
  out.base = l.rope_base;
  out.factors.assign(rope_freqs.begin(), rope_freqs.end());
  if (c.rope_scaling_type == "llama3" && out.factors.empty()) out.factors = llama3_rope_factors(c);
  if (is_local(c, l)) return out;
  out.mscale = rope_mscale(c);
  const double freq_scale = 1.0 / c.rope_scaling_factor;
  if (c.rope_scaling_type == "linear") out.freq_scale = freq_scale;
  if (c.rope_scaling_type != "yarn") return out;
  const int64_t n_ctx_orig =
      c.rope_original_context_length > 0 ? c.rope_original_context_length : c.context_length;
  const auto dims = yarn_corr_dims(c.rope_dim, n_ctx_orig, l.rope_base, c.rope_yarn_beta_fast,
                                   c.rope_yarn_beta_slow);
  if (out.factors.empty()) out.factors.assign(static_cast<size_t>(half), 1.0f);
  for (int i = 0; i < half; ++i) {
    const double mix = yarn_ramp(dims[0], dims[1], i) * c.rope_yarn_ext_factor;
    out.factors[static_cast<size_t>(i)] =
        static_cast<float>(out.factors[static_cast<size_t>(i)] / (freq_scale * (1 - mix) + mix));
  }
  return out;
}

}  // namespace specdec::model
