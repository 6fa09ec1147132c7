// The building blocks of a decoder layer, shared by every architecture (an architecture is the
// ModelConfig's choice among them: biases, QK norm, post norms, activation, MLA or GQA):
//   gqa_attention   q/k/v projections (stacked when their types agree, q | k stacked beside v when
//                   only theirs do) + biases, QK norm, RoPE,
//                   K/V written through the layer's KV-cache group, the layer's attention
//                   backend, output projection (llama, qwen2, qwen3, gemma3, chunked, KV-sharing)
//   mla_attention   DeepSeek-V2 multi-head latent attention in absorbed form on the mla_latent
//                   cache: one latent row (c_kv, k_rope) per token shared by all heads
//   gated_ffn       SwiGLU / GELU-tanh FFN (gate and up stacked when their types agree)
// Each reads the normed input in StepBuffers::h and leaves its output in StepBuffers::proj; the
// runner does the norms and residual adds around them. Internal to the runner.
#pragma once

#include <cstdint>
#include <vector>

#include "attention/groups.h"
#include "device/device.h"
#include "kv/allocator.h"
#include "kv/cache_ops.h"
#include "model/config.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "quant/matmul.h"
#include "runner/model_weights.h"

namespace specdec::runner {

// Device buffers of one step, sized for max_num_batched_tokens tokens (f32 unless noted;
// Lifetime::kWorkspace, except ids / positions / rows: kStep).
struct StepBuffers {
  StepBuffers(device::Device& dev, const model::ModelConfig& c, int64_t max_tokens, int64_t max_logits);

  device::Buffer x;          // [t, hidden] residual stream
  device::Buffer h;          // [t, hidden] normed input of the next block
  device::Buffer proj;       // [t, hidden] output of a block
  device::Buffer fused;      // [t, widest stacked projection] (qkv, gate_up, MLA's q / kv_a)
  device::Buffer qb, kb, vb; // [t, q], [t, k], [t, v] (MLA: query [t, heads, lora + rope], c_kv, k_rope)
  device::Buffer attn;       // [t, heads * head_size_v] attention output (MLA: latent output)
  device::Buffer attn_v;     // MLA: [t, heads * v_head_dim]
  device::Buffer gate, up;   // [t, ff]
  device::Buffer ids, positions;  // int32 [t]: created with their contents by each step
  device::Buffer rows;       // int32 [logit rows]: likewise
  device::Buffer xs;         // [max_logits, hidden]
  device::Buffer logits;     // [max_logits, vocab]
  device::Buffer reduced;    // [2][3, max_logits]: argmax (int32), logsumexp, logit at argmax
  quant::QuantizedActivations xq;
  ops::QuantizedOut xq_out;  // xq's buffers, for a norm that quantises its output (into_h)
  std::vector<ops::RopeTable> rope_tables;  // one per distinct model::RopeFrequencies
  std::vector<float> rope_qk_scale;         // per table: mscale^2, on the softmax scale (YaRN)
  std::vector<int> layer_rope;              // table index per layer, -1: NoPE
};

// The RoPE tables of every layer (model/rope_scaling.h; rope_freqs, or LongRoPE's long factors
// when max_model_len > rope_original_context_length and its short ones otherwise, read from the
// file) into s.rope_tables, s.rope_qk_scale and s.layer_rope.
void build_rope_tables(device::Device& dev, const model::GgufFile& file, const model::ModelConfig& c,
                       int64_t max_model_len, StepBuffers& s);

// A layer's attention as resolved once at load (layer -> attention group -> KV view, cache tensor,
// backend and parameters): a step does no name look-ups.
struct LayerBinding {
  int attention_group = 0;
  const attn::AttentionGroup* group = nullptr;
  const kv::LayerKvView* view = nullptr;
  const device::Buffer* tensor = nullptr;
  attn::AttentionLayerParams params;  // the scale is the block's (set per call)
};

// Resolves every layer of `config` through `setup` and `cache` (which must outlive the result).
std::vector<LayerBinding> bind_layers(const model::ModelConfig& config, const attn::AttentionSetup& setup,
                                      const kv::KvCacheAllocation& cache);

// What a block needs of the step.
struct LayerStep {
  device::Device& dev;
  const model::ModelConfig& config;
  const std::vector<LayerBinding>& layers;
  const std::vector<attn::AttentionMetadata>& metadata;  // per attention group
  StepBuffers& s;
  int64_t num_tokens;
};

void gqa_attention(const LayerStep& step, int il, const LayerWeights& w);
// A DFlash drafter's context: K and V of the normed context in s.h (QK norm and RoPE on K as the
// layer's own K gets them) written through the layer's KV-cache group, no attention.
void gqa_write_context(const LayerStep& step, int il, const LayerWeights& w);
// Whether GQA layers with a fused q | k | v projection use the one-launch epilogue
// (kv::kv_cache_write_qkv); SPECDEC_FUSED_QKV=0 turns it off (read once: for measuring both).
bool fused_qkv_epilogue();
void mla_attention(const LayerStep& step, int il, const LayerWeights& w);
void gated_ffn(const LayerStep& step, const LayerWeights& w);

// The attention step shared by both attention blocks: writes the new K/V rows through the layer's
// KV-cache group slot mapping (k == nullptr: a KV-sharing layer writes nothing), then attends with
// the layer's backend: query [t, heads, head_size] -> out [t, heads, head_size_v], with `scale` and
// the model's logit softcap. With `then_project` (the output projection that reads `out` next):
// where the backend can (capabilities().quantized_output) and that matrix takes int8 activations,
// the backend also writes out's quantisation into step.s.xq, so project() launches no quantisation
// of its own; SPECDEC_FUSED_ATTN_QUANT=0 turns it off (read once: for measuring both).
void write_kv_and_attend(const LayerStep& step, int il, const kv::KvRows* k, const kv::KvRows* v,
                         const device::Buffer& query, float scale, device::Buffer& out,
                         const quant::DeviceWeight* then_project = nullptr);

// y [t, w.rows()] = x [t, w.cols()] . W^T with x quantised first (one launch more for quantised
// weights; F32 / F16 / BF16 weights read x directly).
void project(const LayerStep& step, const quant::DeviceWeight& w, const device::Buffer& x, device::Buffer& y);

}  // namespace specdec::runner
