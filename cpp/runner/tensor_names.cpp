#include "runner/tensor_names.h"

#include "common/errors.h"
#include "model/config.h"
#include "model/gguf.h"

namespace specdec::runner {
namespace {

std::string blk(int il, const char* name) { return str_cat("blk.", il, ".", name, ".weight"); }
std::string bias(int il, const char* name) { return str_cat("blk.", il, ".", name, ".bias"); }

std::string shape(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

void mla_tensors(const model::ModelConfig& c, int il, std::vector<TensorRef>& out) {
  const int64_t d = c.hidden_size, h = c.num_q_heads;
  const auto& m = c.mla;
  const int64_t qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
  if (m.q_lora_rank > 0) {
    out.push_back({blk(il, "attn_q_a"), {d, m.q_lora_rank}});
    out.push_back({blk(il, "attn_q_a_norm"), {m.q_lora_rank}});
    out.push_back({blk(il, "attn_q_b"), {m.q_lora_rank, h * qk}});
  } else {
    out.push_back({blk(il, "attn_q"), {d, h * qk}});
  }
  out.push_back({blk(il, "attn_kv_a_mqa"), {d, m.kv_lora_rank + m.qk_rope_head_dim}});
  out.push_back({blk(il, "attn_kv_a_norm"), {m.kv_lora_rank}});
  // Older files hold W_UK and W_UV in one attn_kv_b; current converters split it per head into
  // attn_k_b and attn_v_b. One of the two forms must be there (load_weights checks which).
  out.push_back({blk(il, "attn_kv_b"), {m.kv_lora_rank, h * (m.qk_nope_head_dim + m.v_head_dim)}, false});
  out.push_back({blk(il, "attn_k_b"), {m.qk_nope_head_dim, m.kv_lora_rank, h}, false});
  out.push_back({blk(il, "attn_v_b"), {m.kv_lora_rank, m.v_head_dim, h}, false});
  out.push_back({blk(il, "attn_output"), {h * m.v_head_dim, d}});
}

}  // namespace

std::vector<TensorRef> layer_tensors(const model::ModelConfig& c, int il) {
  const int64_t d = c.hidden_size, ff = c.intermediate_size;
  const int64_t q = static_cast<int64_t>(c.num_q_heads) * c.head_size;
  const int64_t kv = static_cast<int64_t>(c.num_kv_heads) * c.head_size;
  const int64_t v = static_cast<int64_t>(c.num_kv_heads) * c.head_size_v;
  const int64_t o = static_cast<int64_t>(c.num_q_heads) * c.head_size_v;
  std::vector<TensorRef> out = {{blk(il, "attn_norm"), {d}}};
  if (c.architecture == "deepseek2") {
    mla_tensors(c, il, out);
  } else {
    if (c.fused_qkv) {  // Phi-3: q, k and v rows in one tensor
      out.push_back({blk(il, "attn_qkv"), {d, q + kv + v}});
      out.push_back({bias(il, "attn_qkv"), {q + kv + v}, c.qkv_bias});
    } else {
      out.push_back({blk(il, "attn_q"), {d, q}});
      out.push_back({blk(il, "attn_k"), {d, kv}});
      out.push_back({blk(il, "attn_v"), {d, v}});
      out.push_back({bias(il, "attn_q"), {q}, c.qkv_bias});
      out.push_back({bias(il, "attn_k"), {kv}, c.qkv_bias});
      out.push_back({bias(il, "attn_v"), {v}, c.qkv_bias});
    }
    out.push_back({blk(il, "attn_output"), {o, d}});
    out.push_back({bias(il, "attn_output"), {d}, c.output_bias});
    if (c.qk_norm) {
      out.push_back({blk(il, "attn_q_norm"), {c.head_size}});
      out.push_back({blk(il, "attn_k_norm"), {c.head_size}});
    }
  }
  if (c.post_norms) {
    out.push_back({blk(il, "post_attention_norm"), {d}});
    out.push_back({blk(il, "post_ffw_norm"), {d}});
  }
  out.push_back({blk(il, "ffn_norm"), {d}});
  if (c.fused_gate_up) {  // Phi-3: gate rows then up rows in ffn_up
    out.push_back({blk(il, "ffn_up"), {d, 2 * ff}});
  } else {
    out.push_back({blk(il, "ffn_gate"), {d, ff}});
    out.push_back({blk(il, "ffn_up"), {d, ff}});
  }
  out.push_back({blk(il, "ffn_down"), {ff, d}});
  return out;
}

std::vector<TensorRef> global_tensors(const model::ModelConfig& c) {
  if (c.is_dflash()) {  // the target's embedding and head; its own context projection
    const int n = static_cast<int>(c.dflash_target_layers.size());
    return {{"output_norm.weight", {c.hidden_size}},
            {"dflash_fc.weight", {int64_t{n} * c.hidden_size, c.hidden_size}},
            {"dflash_hidden_norm.weight", {c.hidden_size}}};
  }
  return {{"token_embd.weight", {c.hidden_size, c.vocab_size}},
          {"output_norm.weight", {c.hidden_size}},
          {"output.weight", {c.hidden_size, c.vocab_size}, !c.tied_embeddings},
          {"rope_freqs.weight", {c.rope_dim / 2}, false},  // Llama 3: per-pair divisors
          {"rope_factors_long.weight", {c.rope_dim / 2}, c.rope_long_short_factors},  // LongRoPE
          {"rope_factors_short.weight", {c.rope_dim / 2}, c.rope_long_short_factors}};
}

const model::GgufTensor* find(const model::GgufFile& file, const TensorRef& ref) {
  const model::GgufTensor* t = file.find_tensor(ref.name);
  if (t == nullptr && ref.required) {
    throw FormatError(str_cat("GGUF tensor '", ref.name, "' is missing; the ", "model needs it with shape ",
                              shape(ref.dims), " (file ", file.source(), ")"));
  }
  return t;
}

void check_model_tensors(const model::GgufFile& file, const model::ModelConfig& config) {
  std::vector<TensorRef> refs = global_tensors(config);
  for (int il = 0; il < config.num_layers; ++il) {
    for (auto& r : layer_tensors(config, il)) refs.push_back(std::move(r));
  }
  for (const TensorRef& ref : refs) {
    const model::GgufTensor* t = find(file, ref);
    if (t != nullptr && t->dims != ref.dims) {
      throw FormatError(str_cat("GGUF tensor '", ref.name, "' has shape ", shape(t->dims),
                                "; the model config implies ", shape(ref.dims), " (file ",
                                file.source(), ")"));
    }
  }
}

}  // namespace specdec::runner
