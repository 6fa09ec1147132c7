// ModelConfig: one description of a decoder-only transformer, built from a GGUF file's metadata
// and tensor table or from a Hugging Face config.json — architecture, sizes, RoPE, norms, biases,
// output head, per-layer attention kinds, and the per-layer KV-cache specs the planner consumes.
//
// Supported architectures: llama (incl. SmolLM2, stories260K, Llama 3.x with rope_freqs, Mistral
// with its sliding window), qwen2, qwen3 (both with YaRN), gemma3 (gemma3_text), deepseek2
// (DeepSeek-V2 MLA), phi3 (fused attn_qkv and gate | up, LongRoPE). Anything else is an
// UnsupportedError naming the architecture and the supported list; a missing or out-of-range
// field is a FormatError (GGUF) or a ConfigError (config.json) naming the key and the value.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/dtype.h"
#include "common/model_types.h"
#include "kv/spec.h"

namespace specdec::model {

class GgufFile;

// RoPE pairing and gated-MLP activation (common/model_types.h), here under their model names.
using specdec::Activation;
using specdec::RopeType;
using specdec::activation_name;
using specdec::rope_type_name;

enum class LayerAttention { kFull, kSliding, kChunked, kMla };

const char* layer_attention_name(LayerAttention kind);  // "full", "sliding", "chunked", "mla"

struct LayerConfig {
  LayerAttention attention = LayerAttention::kFull;
  int sliding_window = 0;        // tokens; kSliding only
  int attention_chunk_size = 0;  // tokens; kChunked only
  double rope_base = 0;          // this layer's RoPE base (Gemma 3: local layers differ)
  bool use_rope = true;          // false for NoPE layers
  int kv_sharing_target = -1;    // >= 0: reads that earlier layer's KV cache, writes none
};

// DeepSeek-V2-style multi-head latent attention sizes.
struct MlaConfig {
  int q_lora_rank = 0;  // 0: queries are projected directly (V2-Lite)
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
};

struct ModelConfig {
  std::string architecture;  // "llama", "qwen2", "qwen3", "gemma3", "deepseek2", "phi3"
  std::string name;          // general.name or the directory name
  std::string source_format; // "gguf" or "hf"

  int num_layers = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_size = 0;     // per-head size of Q and K
  int head_size_v = 0;   // per-head size of V
  int vocab_size = 0;
  int64_t context_length = 0;

  // Normalisation: RMSNorm with weight (w + norm_weight_offset): Gemma's HF checkpoints store
  // w - 1 (offset 1); its GGUF files store the final weight (offset 0).
  double norm_eps = 1e-5;
  double norm_weight_offset = 0;
  bool qk_norm = false;     // RMSNorm over each Q and K head (Qwen 3, Gemma 3)
  bool post_norms = false;  // norms after attention and after the MLP as well (Gemma 3)

  RopeType rope_type = RopeType::kNorm;
  int rope_dim = 0;         // leading dims of each head that rotate (= head_size unless partial)
  double rope_base = 10000;        // global layers
  double rope_base_local = 0;      // sliding layers (0: same as rope_base)
  // RoPE scaling as llama.cpp applies it (model/rope_scaling.h, docs/models.md): "" none;
  // "linear" (every angle / factor); "yarn" (each dimension blended between the scaled and the
  // unscaled angle, cos and sin times an mscale); "llama3" (per-dimension divisors: the file's
  // rope_freqs tensor, or low/high_freq_factor of a config.json).
  std::string rope_scaling_type;
  double rope_scaling_factor = 1;
  int64_t rope_original_context_length = 0;  // 0: context_length
  double rope_attn_factor = 1;       // rope.scaling.attn_factor (multiplies YaRN's mscale)
  double rope_yarn_ext_factor = 1;   // rope.scaling.yarn_ext_factor (0: plain linear angles)
  double rope_yarn_beta_fast = 32;   // rope.scaling.yarn_beta_fast
  double rope_yarn_beta_slow = 1;    // rope.scaling.yarn_beta_slow
  double rope_llama3_low_freq_factor = 1;   // config.json's llama3 scaling (GGUF: rope_freqs)
  double rope_llama3_high_freq_factor = 4;
  bool rope_freq_factors = false;    // a rope_freqs tensor [rope_dim / 2] divides the frequencies
  // Phi-3's LongRoPE ("longrope"): rope_factors_long / rope_factors_short [rope_dim / 2] divide
  // the frequencies, long when the runner's max_model_len exceeds rope_original_context_length
  // (llama.cpp: n_ctx_seq > n_ctx_orig_yarn); cos and sin times rope_attn_factor.
  bool rope_long_short_factors = false;
  // A config.json's long_factor / short_factor [rope_dim / 2]; read_hf_tensors writes them as the
  // rope_factors_long / _short tensors (from a GGUF file: empty, the file holds the tensors).
  std::vector<float> rope_long_factors;
  std::vector<float> rope_short_factors;

  bool fused_qkv = false;       // one attn_qkv tensor per layer [hidden, q + k + v] (Phi-3)
  bool fused_gate_up = false;   // ffn_up holds gate then up [hidden, 2 * intermediate] (Phi-3)
  bool qkv_bias = false;
  bool output_bias = false;
  bool tied_embeddings = false;  // the output head reuses the token embedding
  Activation activation = Activation::kSilu;
  double embedding_scale = 1;       // Gemma: sqrt(hidden_size)
  double attention_scale = 0;       // softmax scale; 0: 1/sqrt(head_size)
  double attn_logit_softcap = 0;    // 0: none
  double final_logit_softcap = 0;   // 0: none
  int num_experts = 0;              // MoE routed experts (0: dense); not run yet
  MlaConfig mla;
  // A DFlash drafter (z-lab's block-diffusion drafter, as specdec.dflash converts it): no token
  // embedding or output head of its own (it reads the target's), `fc` [hidden, n * hidden] and
  // `hidden_norm` project the target's residual stream after each of dflash_target_layers into
  // every layer's context K/V, and its attention is non-causal. Empty: not a DFlash drafter.
  std::vector<int> dflash_target_layers;
  int dflash_mask_token_id = -1;
  int dflash_block_size = 0;          // tokens per drafted block (1 + the drafts)
  double dflash_embedding_scale = 1;  // on the target's raw embedding rows
  bool is_dflash() const { return !dflash_target_layers.empty(); }

  std::vector<LayerConfig> layers;

  // The KV-cache spec of every layer, named "layers.<i>", in the form the planner takes. With
  // max_model_len > 0, a sliding or chunked layer whose window / chunk covers max_model_len
  // tokens sees everything and is declared full attention.
  std::vector<kv::LayerKvSpec> layer_kv_specs(int block_size = 16, DType dtype = DType::kF16,
                                              int64_t max_model_len = 0) const;
  int num_sliding_layers() const;
  // Throws ConfigError naming the first inconsistent field, or a product of sizes (a weight
  // matrix's elements, an attention projection's width) past what any model needs.
  void validate() const;
  nlohmann::json to_json() const;
};

// From a parsed GGUF file (metadata keys "<arch>.*", and the tensor table for biases and heads).
ModelConfig config_from_gguf(const GgufFile& file);
// From a Hugging Face config.json (already parsed); `source` names it in errors.
ModelConfig config_from_hf_json(const nlohmann::json& config, const std::string& source);
// A GGUF file, a config.json, or a directory holding config.json.
ModelConfig load_model_config(const std::string& path);

const std::vector<std::string>& supported_architectures();

// The largest value a model file may give a size: config.json's key or a GGUF key without its
// "<arch>." prefix ("num_hidden_layers", "block_count", "vocab_size", ...). Far above any released
// model, and small enough that what is sized from a value before the tensors are checked against
// it (the per-layer table, the vocabulary padded to vocab_size) cannot exhaust memory; 2^30 for
// keys not listed.
int64_t max_model_size(std::string_view key);
// RoPE scaling types a GGUF file may name in <arch>.rope.scaling.type ("none" is stored as "").
const std::vector<std::string>& supported_rope_scaling_types();

}  // namespace specdec::model
