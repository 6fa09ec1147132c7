// A model's weights on the device: matrices in their block format (quant::DeviceWeight), norm
// weights and biases as f32 vectors. Loaded once from a GGUF file, checked against the config.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "device/device.h"
#include "model/config.h"
#include "quant/device_weight.h"

namespace specdec::model {
class GgufFile;
struct GgufTensor;
}

namespace specdec::runner {

struct LayerWeights {
  device::Buffer attn_norm, ffn_norm;             // [hidden]
  device::Buffer q_norm, k_norm;                  // [head_size] (QK norm), else empty
  device::Buffer post_attn_norm, post_ffn_norm;   // [hidden] (Gemma 3), else empty

  // Attention (GQA). q, k and v of one weight type are stacked into wqkv ([q + k + v, hidden],
  // one launch) and the separate wq / wk / wv stay empty. When only q and k share a type (a
  // Q4_K_M file's Q6_K attn_v layers), q | k are stacked into wqk and v stays in wv: two launches
  // that write one q | k | v row (quant::OutputColumns). Otherwise they are apart. A layer
  // reading another layer's KV loads wq only.
  std::optional<quant::DeviceWeight> wqkv;
  std::optional<quant::DeviceWeight> wqk;      // [q + k, hidden] beside wv, else empty
  quant::DeviceWeight wq, wk, wv, wo;          // [q, hidden], [kv, hidden], [v, hidden], [hidden, o]
  device::Buffer bq, bk, bv, bo;                  // biases, else empty
  device::Buffer bqkv;                            // [q + k + v] with wqkv or wqk and biases, else empty

  // Attention (MLA, DeepSeek-V2). wq is attn_q_b after wq_a / q_a_norm (q LoRA) or attn_q.
  quant::DeviceWeight wq_a, wkv_a;             // [q_lora, hidden] (or empty), [lora + rope, hidden]
  device::Buffer q_a_norm, kv_a_norm;             // [q_lora], [kv_lora]
  device::Buffer w_uk;  // f32 [heads, kv_lora, nope]: q_nope -> latent (absorbed into the query)
  device::Buffer w_uv;  // f32 [heads, v, kv_lora]: latent attention output -> v

  // Gated FFN: gate and up of one type stacked into gate_up ([2 ff, hidden]), else apart.
  std::optional<quant::DeviceWeight> gate_up;
  quant::DeviceWeight gate, up, down;          // [ff, hidden], [ff, hidden], [hidden, ff]
};

struct ModelWeights {
  quant::DeviceWeight token_embd;              // [vocab, hidden]
  std::optional<quant::DeviceWeight> output;   // [vocab, hidden]; empty when tied
  device::Buffer output_norm;                     // [hidden]
  std::vector<LayerWeights> layers;
  int64_t device_bytes = 0;
  // A DFlash drafter (ModelConfig::is_dflash): the context projection [hidden, n * hidden] and
  // its norm; token_embd and output stay empty (the target's are used).
  std::optional<quant::DeviceWeight> dflash_fc;
  device::Buffer dflash_hidden_norm;

  const quant::DeviceWeight& lm_head() const { return output ? *output : token_embd; }
};

// (bytes done, bytes total): called after every tensor.
using LoadProgress = std::function<void(int64_t, int64_t)>;

// Everything load_weights checks before it uploads: the architecture's features (no MoE, no YaRN
// yet), every tensor present with its shape (runner/tensor_names.h) and in a weight format the
// device kernels read. FormatError / UnsupportedError naming the tensor. `specdec inspect` runs it
// too, so that it accepts exactly the files a runner loads.
void check_loadable(const model::GgufFile& file, const model::ModelConfig& config);

// Checks the tensors (check_loadable) and uploads them. UnsupportedError for an
// architecture or weight type without a device path here.
ModelWeights load_weights(device::Device& dev, const model::GgufFile& file,
                          const model::ModelConfig& config, const LoadProgress& progress = {});

// A GGUF tensor's bytes as quant's uploads take them (a view: valid while the GgufFile lives).
quant::WeightBytes weight_bytes(const model::GgufTensor& tensor);

// Whether a buffer was loaded (optional tensors leave it empty).
inline bool present(const device::Buffer& b) { return !b.empty(); }

}  // namespace specdec::runner
