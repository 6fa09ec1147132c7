// The RoPE tables of a model's layers (runner/blocks.h: build_rope_tables).
#include <cstring>
#include <string>
#include <vector>

#include "common/errors.h"
#include "model/gguf.h"
#include "model/rope_scaling.h"
#include "runner/blocks.h"

namespace specdec::runner {
namespace {

// A [rope_dim / 2] f32 tensor of per-pair divisors, or empty when the file has none.
std::vector<float> read_factors(const model::GgufFile& file, const std::string& name) {
  const model::GgufTensor* t = file.find_tensor(name);
  if (t == nullptr) return {};
  SPECDEC_CHECK(t->type == GgmlType::kF32, name + " type", static_cast<int>(t->type),
                str_cat("F32 (0), as llama.cpp's converters write it (file ", file.source(), ")"));
  std::vector<float> out(static_cast<size_t>(t->num_elements));
  std::memcpy(out.data(), t->data, out.size() * sizeof(float));
  return out;
}

}  // namespace

void build_rope_tables(device::Device& dev, const model::GgufFile& file, const model::ModelConfig& c,
                       int64_t max_model_len, StepBuffers& s) {
  // llama_model::get_rope_factors: rope_freqs, else LongRoPE's long factors past the original
  // context and its short ones within it.
  std::vector<float> rope_freqs = read_factors(file, "rope_freqs.weight");
  if (rope_freqs.empty() && c.rope_long_short_factors) {
    const bool long_context = max_model_len > c.rope_original_context_length;
    rope_freqs =
        read_factors(file, long_context ? "rope_factors_long.weight" : "rope_factors_short.weight");
  }
  std::vector<model::RopeFrequencies> keys;
  for (int il = 0; il < c.num_layers; ++il) {
    if (!c.layers[il].use_rope || c.rope_type == model::RopeType::kNone) {
      s.layer_rope.push_back(-1);
      continue;
    }
    model::RopeFrequencies f = model::rope_frequencies(c, il, rope_freqs);
    size_t i = 0;
    while (i < keys.size() && !(keys[i] == f)) ++i;
    if (i == keys.size()) {
      s.rope_tables.emplace_back(dev, c.rope_type, c.rope_dim, f.base, f.freq_scale, f.factors);
      s.rope_qk_scale.push_back(static_cast<float>(f.mscale * f.mscale));
      keys.push_back(std::move(f));
    }
    s.layer_rope.push_back(static_cast<int>(i));
  }
}

}  // namespace specdec::runner
