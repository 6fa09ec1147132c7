#include "model/config.h"

#include "model/dflash.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "common/json.h"
#include "model/gguf.h"
#include "model/rope_scaling.h"

namespace specdec::model {

const char* layer_attention_name(LayerAttention kind) {
  switch (kind) {
    case LayerAttention::kFull: return "full";
    case LayerAttention::kSliding: return "sliding";
    case LayerAttention::kChunked: return "chunked";
    case LayerAttention::kMla: return "mla";
  }
  return "unknown";
}

const std::vector<std::string>& supported_architectures() {
  static const std::vector<std::string> names = {"llama", "qwen2", "qwen3", "gemma3", "deepseek2",
                                                 "phi3"};
  return names;
}

const std::vector<std::string>& supported_rope_scaling_types() {
  static const std::vector<std::string> names = {"none", "linear", "yarn", "longrope"};
  return names;
}

std::vector<kv::LayerKvSpec> ModelConfig::layer_kv_specs(int block_size, DType dtype,
                                                         int64_t max_model_len) const {
  std::vector<kv::LayerKvSpec> out;
  out.reserve(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    LayerConfig l = layers[i];
    const bool covers = max_model_len > 0 &&
                        ((l.attention == LayerAttention::kSliding && l.sliding_window >= max_model_len) ||
                         (l.attention == LayerAttention::kChunked && l.attention_chunk_size >= max_model_len));
    if (covers) l.attention = LayerAttention::kFull;
    kv::LayerKvSpec s;
    s.layer_name = str_cat("layers.", i);
    switch (l.attention) {
      case LayerAttention::kFull:
        s.spec = kv::KvCacheSpec::full_attention(block_size, num_kv_heads, head_size, dtype,
                                                 head_size_v);
        break;
      case LayerAttention::kSliding:
        s.spec = kv::KvCacheSpec::sliding(block_size, num_kv_heads, head_size, dtype,
                                          l.sliding_window, head_size_v);
        break;
      case LayerAttention::kChunked:
        s.spec = kv::KvCacheSpec::chunked_local(block_size, num_kv_heads, head_size, dtype,
                                                l.attention_chunk_size, head_size_v);
        break;
      case LayerAttention::kMla:
        s.spec = kv::KvCacheSpec::mla(block_size, mla.kv_lora_rank, mla.qk_rope_head_dim, dtype);
        break;
    }
    if (l.kv_sharing_target >= 0) s.kv_sharing_target = str_cat("layers.", l.kv_sharing_target);
    out.push_back(std::move(s));
  }
  return out;
}

int ModelConfig::num_sliding_layers() const {
  int n = 0;
  for (const auto& l : layers) n += l.attention == LayerAttention::kSliding ? 1 : 0;
  return n;
}

int64_t max_model_size(std::string_view key) {
  struct Limit {
    std::string_view key;
    int64_t max;
  };
  static constexpr Limit kLimits[] = {
      {"num_hidden_layers", 1024},           {"block_count", 1024},
      {"vocab_size", int64_t{1} << 21},      {"hidden_size", int64_t{1} << 17},
      {"embedding_length", int64_t{1} << 17}, {"intermediate_size", int64_t{1} << 20},
      {"feed_forward_length", int64_t{1} << 20}, {"expert_feed_forward_length", int64_t{1} << 20},
      {"num_attention_heads", 4096},         {"num_key_value_heads", 4096},
      {"attention.head_count", 4096},        {"attention.head_count_kv", 4096},
      {"head_dim", 16384},                   {"attention.key_length", 16384},
      {"attention.value_length", 16384},     {"rope.dimension_count", 16384},
      {"max_position_embeddings", int64_t{1} << 27}, {"context_length", int64_t{1} << 27},
      {"n_routed_experts", 65536},           {"expert_count", 65536},
  };
  for (const Limit& l : kLimits) {
    if (l.key == key) return l.max;
  }
  return int64_t{1} << 30;
}

namespace {

void check_positive(int64_t value, const char* field) {
  SPECDEC_CHECK(value > 0, field, value, "must be > 0");
}

// `a` x `b` at most `max` (a weight matrix's elements, a projection's width): each size passed its
// own bound, but their product is what is allocated.
void check_product(int64_t a, int64_t b, int64_t max, const char* what, const char* fields) {
  SPECDEC_CHECK(a * b <= max, what, str_cat(a, " x ", b, " = ", a * b),
                str_cat("at most ", max, " (", fields, "); no model is that large"));
}

}  // namespace

void ModelConfig::validate() const {
  check_positive(num_layers, "num_layers");
  check_positive(hidden_size, "hidden_size");
  check_positive(intermediate_size, "intermediate_size");
  check_positive(num_q_heads, "num_q_heads");
  check_positive(num_kv_heads, "num_kv_heads");
  check_positive(head_size, "head_size");
  check_positive(head_size_v, "head_size_v");
  check_positive(vocab_size, "vocab_size");
  check_positive(context_length, "context_length");
  check_product(vocab_size, hidden_size, int64_t{1} << 36, "embedding elements",
                "vocab_size x hidden_size");
  check_product(hidden_size, intermediate_size, int64_t{1} << 36, "feed-forward elements",
                "hidden_size x intermediate_size");
  check_product(num_q_heads, head_size, int64_t{1} << 18, "query width",
                "num_q_heads x head_size");
  SPECDEC_CHECK(num_q_heads % num_kv_heads == 0, "num_kv_heads", num_kv_heads,
               str_cat("must divide num_q_heads = ", num_q_heads));
  SPECDEC_CHECK(static_cast<int>(layers.size()) == num_layers, "layers", layers.size(),
               str_cat("one entry per layer (num_layers = ", num_layers, ")"));
  SPECDEC_CHECK(rope_type == RopeType::kNone || (rope_dim > 0 && rope_dim <= head_size &&
                                                 rope_dim % 2 == 0),
               "rope_dim", rope_dim, str_cat("an even number in [2, head_size = ", head_size, "]"));
  SPECDEC_CHECK(norm_eps > 0 && norm_eps < 1, "norm_eps", norm_eps, "must be in (0, 1)");
  SPECDEC_CHECK(rope_scaling_factor > 0, "rope_scaling_factor", rope_scaling_factor, "must be > 0");
  SPECDEC_CHECK(rope_original_context_length >= 0, "rope_original_context_length",
               rope_original_context_length, "must be >= 0 (0: context_length)");
  SPECDEC_CHECK(rope_attn_factor > 0, "rope_attn_factor", rope_attn_factor, "must be > 0");
  SPECDEC_CHECK(rope_yarn_ext_factor >= 0 && rope_yarn_ext_factor <= 1, "rope_yarn_ext_factor",
               rope_yarn_ext_factor, "must be in [0, 1]");
  SPECDEC_CHECK(rope_yarn_beta_fast > 0 && rope_yarn_beta_slow > 0 &&
                    rope_yarn_beta_slow < rope_yarn_beta_fast,
               "rope_yarn_beta_slow", rope_yarn_beta_slow,
               str_cat("must be > 0 and < rope_yarn_beta_fast = ", rope_yarn_beta_fast));
  SPECDEC_CHECK(rope_llama3_low_freq_factor > 0 &&
                    rope_llama3_high_freq_factor > rope_llama3_low_freq_factor,
               "rope_llama3_high_freq_factor", rope_llama3_high_freq_factor,
               str_cat("must be > rope_llama3_low_freq_factor = ", rope_llama3_low_freq_factor,
                       " > 0"));
  for (size_t i = 0; i < layers.size(); ++i) {
    const LayerConfig& l = layers[i];
    const std::string prefix = str_cat("layers.", i, ".");
    SPECDEC_CHECK(l.attention != LayerAttention::kSliding || l.sliding_window > 0,
                 prefix + "sliding_window", l.sliding_window, "must be > 0 on a sliding layer");
    SPECDEC_CHECK(l.attention != LayerAttention::kChunked || l.attention_chunk_size > 0,
                 prefix + "attention_chunk_size", l.attention_chunk_size,
                 "must be > 0 on a chunked layer");
    SPECDEC_CHECK(!l.use_rope || rope_type == RopeType::kNone || l.rope_base > 0,
                 prefix + "rope_base", l.rope_base, "must be > 0");
    SPECDEC_CHECK(l.kv_sharing_target < static_cast<int>(i), prefix + "kv_sharing_target",
                 l.kv_sharing_target, "an earlier layer (or -1)");
    if (l.kv_sharing_target >= 0) {
      const LayerConfig& t = layers[static_cast<size_t>(l.kv_sharing_target)];
      SPECDEC_CHECK(t.attention == l.attention && t.kv_sharing_target < 0,
                   prefix + "kv_sharing_target", l.kv_sharing_target,
                   "a layer of the same attention kind that owns its cache");
    }
    SPECDEC_CHECK((l.attention == LayerAttention::kMla) == (architecture == "deepseek2"),
                 prefix + "attention", layer_attention_name(l.attention),
                 "mla exactly for the deepseek2 architecture");
  }
  if (architecture == "deepseek2") {
    check_positive(mla.kv_lora_rank, "mla.kv_lora_rank");
    check_positive(mla.qk_rope_head_dim, "mla.qk_rope_head_dim");
    check_positive(mla.qk_nope_head_dim, "mla.qk_nope_head_dim");
    check_positive(mla.v_head_dim, "mla.v_head_dim");
  }
}

nlohmann::json ModelConfig::to_json() const {
  nlohmann::json layer_list = nlohmann::json::array();
  for (const auto& l : layers) {
    nlohmann::json j = {{"attention", layer_attention_name(l.attention)},
                        {"rope_base", l.rope_base}, {"use_rope", l.use_rope}};
    if (l.attention == LayerAttention::kSliding) j["sliding_window"] = l.sliding_window;
    if (l.attention == LayerAttention::kChunked) j["attention_chunk_size"] = l.attention_chunk_size;
    if (l.kv_sharing_target >= 0) j["kv_sharing_target"] = l.kv_sharing_target;
    layer_list.push_back(std::move(j));
  }
  nlohmann::json j = {
      {"architecture", architecture}, {"name", name}, {"source_format", source_format},
      {"num_layers", num_layers}, {"hidden_size", hidden_size},
      {"intermediate_size", intermediate_size}, {"num_q_heads", num_q_heads},
      {"num_kv_heads", num_kv_heads}, {"head_size", head_size}, {"head_size_v", head_size_v},
      {"vocab_size", vocab_size}, {"context_length", context_length}, {"norm_eps", norm_eps},
      {"norm_weight_offset", norm_weight_offset}, {"qk_norm", qk_norm},
      {"post_norms", post_norms}, {"rope_type", rope_type_name(rope_type)},
      {"rope_dim", rope_dim}, {"rope_base", rope_base}, {"rope_base_local", rope_base_local},
      {"rope_scaling_type", rope_scaling_type}, {"rope_scaling_factor", rope_scaling_factor},
      {"rope_original_context_length", rope_original_context_length},
      {"rope_attn_factor", rope_attn_factor}, {"rope_yarn_ext_factor", rope_yarn_ext_factor},
      {"rope_yarn_beta_fast", rope_yarn_beta_fast}, {"rope_yarn_beta_slow", rope_yarn_beta_slow},
      {"rope_llama3_low_freq_factor", rope_llama3_low_freq_factor},
      {"rope_llama3_high_freq_factor", rope_llama3_high_freq_factor},
      {"rope_freq_factors", rope_freq_factors},
      {"rope_long_short_factors", rope_long_short_factors}, {"fused_qkv", fused_qkv},
      {"fused_gate_up", fused_gate_up}, {"qkv_bias", qkv_bias},
      {"output_bias", output_bias}, {"tied_embeddings", tied_embeddings},
      {"activation", activation_name(activation)}, {"embedding_scale", embedding_scale},
      {"attention_scale", attention_scale}, {"attn_logit_softcap", attn_logit_softcap},
      {"final_logit_softcap", final_logit_softcap}, {"num_experts", num_experts},
      {"layers", std::move(layer_list)}};
  if (rope_scaling_type == "yarn") {  // what the runner derives (model/rope_scaling.h)
    const int64_t orig =
        rope_original_context_length > 0 ? rope_original_context_length : context_length;
    const auto dims =
        yarn_corr_dims(rope_dim, orig, rope_base, rope_yarn_beta_fast, rope_yarn_beta_slow);
    j["rope_yarn_corr_dims"] = {dims[0], dims[1]};
  }
  j["rope_mscale"] = rope_mscale(*this);
  if (is_dflash()) {
    j["dflash"] = {{"target_layer_ids", dflash_target_layers}, {"mask_token_id", dflash_mask_token_id},
                   {"block_size", dflash_block_size}, {"input_embedding_scale", dflash_embedding_scale}};
  }
  if (architecture == "deepseek2") {
    j["mla"] = {{"q_lora_rank", mla.q_lora_rank}, {"kv_lora_rank", mla.kv_lora_rank},
                {"qk_nope_head_dim", mla.qk_nope_head_dim},
                {"qk_rope_head_dim", mla.qk_rope_head_dim}, {"v_head_dim", mla.v_head_dim}};
  }
  return j;
}

ModelConfig load_model_config(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p(path);
  if (is_dflash_checkpoint(path)) {  // read as the runner loads it
    ModelConfig config = config_from_gguf(dflash_to_gguf(path, false));
    config.source_format = "hf";
    return config;
  }
  if (fs::is_directory(p, ec)) p /= "config.json";
  if (!fs::is_regular_file(p, ec)) {
    throw ConfigError("path", path, "an existing GGUF file, config.json, or a directory with "
                                    "config.json");
  }
  if (p.filename() == "config.json" || p.extension() == ".json") {
    const nlohmann::json j = read_json_file(p);  // at most kMaxSmallJsonFileBytes
    ModelConfig config = config_from_hf_json(j, p.string());
    if (config.name.empty()) config.name = p.parent_path().filename().string();
    return config;
  }
  return config_from_gguf(GgufFile::open(p.string()));
}

}  // namespace specdec::model
