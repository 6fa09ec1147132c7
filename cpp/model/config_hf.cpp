// ModelConfig from a Hugging Face config.json: llama, mistral, qwen2, qwen3, gemma3 / gemma3_text,
// deepseek_v2 (MLA), phi3 (LongRoPE). Defaults follow the transformers configuration classes of
// each model type.
#include <cmath>

#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "common/json.h"
#include "model/config.h"

namespace specdec::model {
namespace {

using Json = nlohmann::json;

class Fields {
 public:
  Fields(const Json& j, std::string source) : j_(j), source_(std::move(source)) {}

  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }

  [[noreturn]] void fail(const char* key, const std::string& value,
                         const std::string& allowed) const {
    throw ConfigError(key, value, str_cat(allowed, " (in ", source_, ")"));
  }

  double number(const char* key, double fallback, bool required = false) const {
    if (!has(key)) {
      if (required) fail(key, "missing", "a number is required");
      return fallback;
    }
    const Json& v = j_.at(key);
    if (!v.is_number()) fail(key, json_summary(v), "must be a number");
    const double x = v.get<double>();
    if (!std::isfinite(x)) fail(key, json_summary(v), "must be finite");
    return x;
  }

  int size(const char* key, int fallback = 0, bool required = true) const {
    if (!has(key)) {
      if (required) fail(key, "missing", "a positive integer is required");
      return fallback;
    }
    const Json& v = j_.at(key);
    const int64_t max = max_model_size(key);  // before anything is sized from it
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > max) {
      fail(key, json_summary(v), str_cat("must be an integer in [0, ", max, "]"));
    }
    return static_cast<int>(v.get<int64_t>());
  }

  bool flag(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const Json& v = j_.at(key);
    if (!v.is_boolean()) fail(key, json_summary(v), "must be true or false");
    return v.get<bool>();
  }

  std::string string(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const Json& v = j_.at(key);
    if (!v.is_string()) fail(key, json_summary(v), "must be a string");
    return v.get<std::string>();
  }

  const Json& json() const { return j_; }
  const std::string& source() const { return source_; }

 private:
  const Json& j_;
  std::string source_;
};

// Phi-3's LongRoPE factors: `key` of rope_scaling, rope_dim / 2 positive numbers (errors name
// the file of `f`).
std::vector<float> longrope_factors(const Fields& f, const Fields& rs, const std::string& where,
                                    const char* key, int rope_dim) {
  const std::string field = where + "." + key;
  const size_t half = static_cast<size_t>(rope_dim / 2);
  const std::string allowed =
      str_cat("a list of rope_dim / 2 = ", half, " positive numbers (LongRoPE's divisors)");
  if (!rs.has(key)) f.fail(field.c_str(), "missing", allowed);
  const Json& v = rs.json().at(key);
  if (!v.is_array() || v.size() != half) {
    f.fail(field.c_str(), v.is_array() ? str_cat(v.size(), " values") : json_summary(v), allowed);
  }
  std::vector<float> out;
  for (const Json& x : v) {
    const double d = x.is_number() ? x.get<double>() : 0;
    if (!(d > 0) || !std::isfinite(d)) f.fail(field.c_str(), json_summary(x), allowed);
    out.push_back(static_cast<float>(d));
  }
  return out;
}

// LongRoPE ("longrope", transformers' older name "su"; Phi-3): long_factor / short_factor become
// the rope_factors_long / _short tensors of llama.cpp's converter (read_hf_tensors); the original
// context (top-level original_max_position_embeddings, as Phi-3's configs hold it, or in
// rope_scaling) picks between them. The cos / sin scale is rope_scaling's attention_factor, else
// sqrt(1 + ln s / ln original) for s = max_position_embeddings / original > 1 (else 1), as
// transformers and llama.cpp's converter compute it. No type key and scaling factor 1 in the
// GGUF form, as the converter writes it.
void read_longrope(const Fields& f, const Fields& rs, const std::string& where, ModelConfig& c) {
  const char* orig_key = "original_max_position_embeddings";
  const int64_t orig = f.has(orig_key) ? f.size(orig_key) : rs.size(orig_key, 0, false);
  if (orig <= 1) {  // ln(original) divides: 1 would make the attention factor infinite
    f.fail(orig_key, f.has(orig_key) || rs.has(orig_key) ? str_cat(orig) : "missing",
           "an integer > 1 is required: LongRoPE (rope_scaling.rope_type longrope) uses "
           "long_factor past it and short_factor within it");
  }
  c.rope_original_context_length = orig;
  c.rope_long_factors = longrope_factors(f, rs, where, "long_factor", c.rope_dim);
  c.rope_short_factors = longrope_factors(f, rs, where, "short_factor", c.rope_dim);
  c.rope_long_short_factors = true;
  const double scale = static_cast<double>(c.context_length) / static_cast<double>(orig);
  const double computed =
      scale > 1 ? std::sqrt(1 + std::log(scale) / std::log(static_cast<double>(orig))) : 1.0;
  c.rope_attn_factor = rs.number("attention_factor", computed);
  if (!(c.rope_attn_factor > 0)) {
    f.fail((where + ".attention_factor").c_str(), str_cat(c.rope_attn_factor), "must be > 0");
  }
}

// rope_scaling (or rope_parameters): linear, yarn (factor, original_max_position_embeddings,
// beta_fast / beta_slow, extrapolation_factor) and llama3 (factor, low / high_freq_factor,
// original_max_position_embeddings); for phi3 only longrope / su (read_longrope), as llama.cpp's
// converter writes no other scaling for it. Anything else is an UnsupportedError naming these.
// transformers v5 writes rope_parameters, with rope_theta inside, and per layer type for Gemma 3
// ({"full_attention": {...}, "sliding_attention": {...}}): the full layers' entry is the scaling.
void read_rope_scaling(const Fields& f, ModelConfig& c) {
  const char* key = f.has("rope_scaling") ? "rope_scaling" : "rope_parameters";
  if (!f.has(key)) return;
  const Json* node = &f.json().at(key);
  if (!node->is_object()) f.fail(key, json_summary(*node), "must be an object or null");
  std::string where = key;
  if (node->contains("full_attention")) {
    if (const auto it = node->find("sliding_attention");
        it != node->end() && it->is_object() && it->contains("rope_theta") && !f.has("rope_local_base_freq")) {
      c.rope_base_local = Fields(*it, where + ".sliding_attention").number("rope_theta", 10000);
    }
    node = &node->at("full_attention");
    where += ".full_attention";
    if (!node->is_object()) f.fail(where.c_str(), json_summary(*node), "must be an object");
  }
  const Fields rs(*node, str_cat(f.source(), " ", where));
  if (!f.has("rope_theta") && node->contains("rope_theta")) c.rope_base = rs.number("rope_theta", c.rope_base);
  std::string type = rs.string("rope_type", rs.string("type", ""));
  if (type == "default") type.clear();
  if (c.architecture == "phi3") {
    if (type != "" && type != "longrope" && type != "su") {
      throw UnsupportedError(str_cat(where, ".rope_type = '", type,
                                     "' is not supported for model_type phi3; supported: default, "
                                     "longrope (or su)"));
    }
    if (!type.empty()) {
      c.rope_scaling_type = "longrope";
      read_longrope(f, rs, where, c);
    }
    return;
  }
  if (type != "" && type != "linear" && type != "yarn" && type != "llama3") {
    throw UnsupportedError(str_cat(where, ".rope_type = '", type,
                                   "' is not supported; supported: default, linear, yarn, llama3 "
                                   "(longrope: model_type phi3)"));
  }
  c.rope_scaling_type = type;
  if (type.empty()) return;
  c.rope_scaling_factor = rs.number("factor", type == "llama3" ? 8 : 1);
  c.rope_original_context_length = rs.size("original_max_position_embeddings",
                                           type == "llama3" ? 8192 : 0, false);
  c.rope_yarn_ext_factor = rs.number("extrapolation_factor", 1);
  c.rope_yarn_beta_fast = rs.number("beta_fast", 32);
  c.rope_yarn_beta_slow = rs.number("beta_slow", 1);
  c.rope_llama3_low_freq_factor = rs.number("low_freq_factor", 1);
  c.rope_llama3_high_freq_factor = rs.number("high_freq_factor", 4);
}

// Phi-3's rotated dims as transformers computes them: int(partial_rotary_factor x head size) (the
// factor at the top level or in rope_scaling; 1 if absent). llama.cpp's converter takes
// int(factor x hidden_size) / num_attention_heads, the same for Phi-3's head size hidden / heads.
int phi3_rope_dim(const Fields& f, const ModelConfig& c) {
  const char* key = "partial_rotary_factor";
  double p = f.number(key, 1);
  for (const char* node : {"rope_scaling", "rope_parameters"}) {
    if (!f.has(key) && f.has(node) && f.json().at(node).is_object()) {
      p = Fields(f.json().at(node), str_cat(f.source(), " ", node)).number(key, p);
    }
  }
  if (!(p > 0 && p <= 1)) f.fail(key, str_cat(p), "must be in (0, 1]");
  return static_cast<int>(p * c.head_size);
}

void read_common(const Fields& f, ModelConfig& c, double default_eps, double default_theta,
                 bool default_tied) {
  c.num_layers = f.size("num_hidden_layers");
  c.hidden_size = f.size("hidden_size");
  c.intermediate_size = f.size("intermediate_size");
  c.num_q_heads = f.size("num_attention_heads");
  c.num_kv_heads = f.size("num_key_value_heads", c.num_q_heads, false);
  c.head_size = f.size("head_dim", c.num_q_heads > 0 ? c.hidden_size / c.num_q_heads : 0, false);
  c.head_size_v = c.head_size;
  c.vocab_size = f.size("vocab_size");
  c.context_length = f.size("max_position_embeddings");
  c.norm_eps = f.number("rms_norm_eps", default_eps);
  c.rope_base = f.number("rope_theta", default_theta);
  c.rope_dim = c.architecture == "phi3" ? phi3_rope_dim(f, c) : c.head_size;
  c.tied_embeddings = f.flag("tie_word_embeddings", default_tied);
  read_rope_scaling(f, c);
  const std::string act = f.string("hidden_act", f.string("hidden_activation", "silu"));
  if (act == "silu" || act == "swish") {
    c.activation = Activation::kSilu;
  } else if (act == "gelu_pytorch_tanh" || act == "gelu_tanh") {
    c.activation = Activation::kGeluTanh;
  } else {
    f.fail("hidden_act", act, "supported: silu, gelu_pytorch_tanh");
  }
}

// Qwen 2/3: with use_sliding_window, layers from max_window_layers on slide.
void qwen_windows(const Fields& f, ModelConfig& c) {
  if (!f.flag("use_sliding_window", false)) return;
  const int window = f.size("sliding_window");
  const int first = f.size("max_window_layers", 0, false);
  for (int i = first; i < c.num_layers; ++i) {
    c.layers[i].attention = LayerAttention::kSliding;
    c.layers[i].sliding_window = window;
  }
}

void gemma3_layers(const Fields& f, ModelConfig& c) {
  const int window = f.size("sliding_window", 4096, false);
  std::vector<bool> sliding(static_cast<size_t>(c.num_layers));
  if (f.has("layer_types")) {
    const Json& t = f.json().at("layer_types");
    if (!t.is_array() || static_cast<int>(t.size()) != c.num_layers) {
      f.fail("layer_types", json_summary(t), "one entry per layer");
    }
    for (int i = 0; i < c.num_layers; ++i) {
      const std::string s = t[i].is_string() ? t[i].get<std::string>() : "";
      if (s != "sliding_attention" && s != "full_attention") {
        f.fail("layer_types", json_summary(t[i]),
               "entries are sliding_attention or full_attention");
      }
      sliding[i] = s == "sliding_attention";
    }
  } else {
    const int period = f.size("sliding_window_pattern", 6, false);
    for (int i = 0; i < c.num_layers; ++i) sliding[i] = period <= 1 || i % period != period - 1;
  }
  for (int i = 0; i < c.num_layers; ++i) {
    if (!sliding[i]) continue;
    c.layers[i].attention = LayerAttention::kSliding;
    c.layers[i].sliding_window = window;
    c.layers[i].rope_base = c.rope_base_local;
  }
}

ModelConfig from_fields(const Fields& f, const std::string& model_type) {
  ModelConfig c;
  c.source_format = "hf";
  if (model_type == "llama" || model_type == "mistral") {  // Mistral: llama with a window
    c.architecture = "llama";
    read_common(f, c, 1e-6, 10000, false);
    c.rope_type = RopeType::kNorm;
    c.qkv_bias = c.output_bias = f.flag("attention_bias", false);
  } else if (model_type == "qwen2" || model_type == "qwen3") {
    c.architecture = model_type;
    read_common(f, c, 1e-6, 10000, false);
    c.rope_type = RopeType::kNeox;
    c.qkv_bias = model_type == "qwen2" || f.flag("attention_bias", false);
    c.output_bias = model_type == "qwen3" && c.qkv_bias;
    c.qk_norm = model_type == "qwen3";
  } else if (model_type == "gemma3_text") {
    c.architecture = "gemma3";
    read_common(f, c, 1e-6, 1000000, true);
    c.rope_type = RopeType::kNeox;
    if (f.has("rope_local_base_freq") || c.rope_base_local == 0) {
      c.rope_base_local = f.number("rope_local_base_freq", 10000);
    }
    c.norm_weight_offset = 1;  // RMSNorm multiplies by (1 + w)
    c.qk_norm = c.post_norms = true;
    c.embedding_scale = std::sqrt(static_cast<double>(c.hidden_size));
    c.attention_scale = 1.0 / std::sqrt(f.number("query_pre_attn_scalar", c.head_size));
    c.attn_logit_softcap = f.number("attn_logit_softcapping", 0);
    c.final_logit_softcap = f.number("final_logit_softcapping", 0);
    c.qkv_bias = c.output_bias = f.flag("attention_bias", false);
  } else if (model_type == "phi3") {
    // llama.cpp's phi3: q | k | v in one qkv_proj, gate | up in one gate_up_proj, NEOX RoPE, no
    // biases; its sliding_window is not applied (llama.cpp disables Phi-3's SWA), as from GGUF.
    c.architecture = "phi3";
    read_common(f, c, 1e-5, 10000, false);
    c.rope_type = RopeType::kNeox;
    c.fused_qkv = c.fused_gate_up = true;
    if (c.rope_original_context_length == 0) {  // the converter writes it with or without scaling
      c.rope_original_context_length = f.size("original_max_position_embeddings", 0, false);
    }
  } else if (model_type == "deepseek_v2") {
    c.architecture = "deepseek2";
    read_common(f, c, 1e-6, 10000, false);
    c.rope_type = RopeType::kNorm;
    c.mla.q_lora_rank = f.size("q_lora_rank", 0, false);
    c.mla.kv_lora_rank = f.size("kv_lora_rank");
    c.mla.qk_nope_head_dim = f.size("qk_nope_head_dim");
    c.mla.qk_rope_head_dim = f.size("qk_rope_head_dim");
    c.mla.v_head_dim = f.size("v_head_dim");
    c.head_size = c.mla.qk_nope_head_dim + c.mla.qk_rope_head_dim;
    c.head_size_v = c.mla.v_head_dim;
    c.rope_dim = c.mla.qk_rope_head_dim;
    c.num_kv_heads = c.num_q_heads;
    c.num_experts = f.size("n_routed_experts", 0, false);
    c.attention_scale = 1.0 / std::sqrt(static_cast<double>(c.head_size));
  } else {
    f.fail("model_type", "\"" + model_type + "\"",
           "supported: llama, mistral, qwen2, qwen3, gemma3, gemma3_text, deepseek_v2, phi3");
  }
  c.layers.assign(static_cast<size_t>(c.num_layers), LayerConfig{});
  for (auto& l : c.layers) {
    l.rope_base = c.rope_base;
    if (c.architecture == "deepseek2") l.attention = LayerAttention::kMla;
  }
  if (c.architecture == "qwen2" || c.architecture == "qwen3") qwen_windows(f, c);
  // Mistral: every layer slides; transformers' MistralConfig defaults to 4096, null: no window.
  const bool window_null =
      f.json().contains("sliding_window") && f.json().at("sliding_window").is_null();
  if (model_type == "mistral" && !window_null) {
    const int window = f.size("sliding_window", 4096, false);
    for (auto& l : c.layers) {
      l.attention = LayerAttention::kSliding;
      l.sliding_window = window;
    }
  }
  if (c.architecture == "gemma3") gemma3_layers(f, c);
  return c;
}

}  // namespace

ModelConfig config_from_hf_json(const nlohmann::json& config, const std::string& source) {
  if (!config.is_object()) throw ConfigError("config.json", "not an object", "a JSON object");
  const Fields top(config, source);
  std::string model_type = top.string("model_type", "");
  ModelConfig c;
  if (model_type == "gemma3") {  // multimodal wrapper: the text model is in text_config
    if (!config.contains("text_config") || !config.at("text_config").is_object()) {
      top.fail("text_config", "missing", "gemma3 configs hold the text model in text_config");
    }
    c = from_fields(Fields(config.at("text_config"), source + " text_config"), "gemma3_text");
  } else {
    c = from_fields(top, model_type);
  }
  if (config.contains("_name_or_path") && config.at("_name_or_path").is_string()) {
    c.name = config.at("_name_or_path").get<std::string>();
  }
  try {
    c.validate();
  } catch (const ConfigError& e) {
    throw ConfigError(e.field(), e.value(), str_cat(e.allowed(), " (in ", source, ")"));
  }
  return c;
}

}  // namespace specdec::model
