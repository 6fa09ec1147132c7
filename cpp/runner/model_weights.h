// A model's weights on the device: matrices in their block format (quant::DeviceWeight), norm
// weights and biases as f32 vectors. Loaded once from a GGUF file, checked against the config.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/config.h"
#include "ocl/context.h"
#include "quant/device_weight.h"

namespace specdec::model {
class GgufFile;
}

namespace specdec::runner {

struct LayerWeights {
  ocl::Buffer attn_norm, ffn_norm;             // [hidden]
  ocl::Buffer q_norm, k_norm;                  // [head_size] (QK norm), else empty
  ocl::Buffer post_attn_norm, post_ffn_norm;   // [hidden] (Gemma 3), else empty
  quant::DeviceWeight wq, wk, wv, wo;          // [q, hidden], [kv, hidden], [v, hidden], [hidden, o]
  ocl::Buffer bq, bk, bv, bo;                  // biases, else empty
  quant::DeviceWeight gate, up, down;          // [ff, hidden], [ff, hidden], [hidden, ff]
};

struct ModelWeights {
  quant::DeviceWeight token_embd;              // [vocab, hidden]
  std::optional<quant::DeviceWeight> output;   // [vocab, hidden]; empty when tied
  ocl::Buffer output_norm;                     // [hidden]
  std::vector<LayerWeights> layers;
  int64_t device_bytes = 0;

  const quant::DeviceWeight& lm_head() const { return output ? *output : token_embd; }
};

// (bytes done, bytes total): called after every tensor.
using LoadProgress = std::function<void(int64_t, int64_t)>;

// Checks the tensors (runner/tensor_names.h) and uploads them. UnsupportedError for an
// architecture or weight type without a device path here (MLA: not yet).
ModelWeights load_weights(ocl::Context& ctx, const model::GgufFile& file,
                          const model::ModelConfig& config, const LoadProgress& progress = {});

// Whether a buffer was loaded (optional tensors leave it empty).
inline bool present(const ocl::Buffer& b) { return b.get() != nullptr; }

}  // namespace specdec::runner
