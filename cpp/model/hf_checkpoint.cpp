#include "model/hf_checkpoint.h"

#include <cmath>
#include <filesystem>
#include <optional>

#include "common/errors.h"
#include "model/config.h"
#include "model/dflash.h"
#include "model/gguf_writer.h"
#include "model/hf_parts.h"

namespace specdec::model {
namespace fs = std::filesystem;
namespace {

// The architecture keys llama.cpp's converter writes for `c` (config_from_gguf reads them back).
void add_model_keys(const ModelConfig& c, GgufWriter& w) {
  const std::string a = c.architecture + ".";
  auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  w.set_string("general.architecture", c.architecture);
  w.set_u32(a + "block_count", u32(c.num_layers));
  w.set_u32(a + "context_length", u32(c.context_length));
  w.set_u32(a + "embedding_length", u32(c.hidden_size));
  w.set_u32(a + "feed_forward_length", u32(c.intermediate_size));
  w.set_u32(a + "attention.head_count", u32(c.num_q_heads));
  w.set_u32(a + "attention.head_count_kv", u32(c.num_kv_heads));
  w.set_u32(a + "attention.key_length", u32(c.head_size));
  w.set_u32(a + "attention.value_length", u32(c.head_size_v));
  w.set_f32(a + "attention.layer_norm_rms_epsilon", static_cast<float>(c.norm_eps));
  w.set_f32(a + "rope.freq_base", static_cast<float>(c.rope_base));
  w.set_u32(a + "rope.dimension_count", u32(c.rope_dim));
  w.set_u32(a + "vocab_size", u32(c.vocab_size));
  // Llama 3's scaling is a rope_freqs tensor and no type key (read_hf_tensors), as llama.cpp's
  // converter writes it; Phi-3's LongRoPE two factor tensors, attn_factor and the original
  // context (written with or without scaling), no type; the others as keys, YaRN's tuning included
  if (c.architecture == "phi3") {
    if (c.rope_original_context_length > 0) {
      w.set_u32(a + "rope.scaling.original_context_length", u32(c.rope_original_context_length));
    }
    if (c.rope_scaling_type == "longrope") {
      w.set_f32(a + "rope.scaling.attn_factor", static_cast<float>(c.rope_attn_factor));
    }
  } else if (!c.rope_scaling_type.empty() && c.rope_scaling_type != "llama3") {
    w.set_string(a + "rope.scaling.type", c.rope_scaling_type);
    w.set_f32(a + "rope.scaling.factor", static_cast<float>(c.rope_scaling_factor));
    if (c.rope_original_context_length > 0) {
      w.set_u32(a + "rope.scaling.original_context_length", u32(c.rope_original_context_length));
    }
    w.set_f32(a + "rope.scaling.attn_factor", static_cast<float>(c.rope_attn_factor));
    w.set_f32(a + "rope.scaling.yarn_ext_factor", static_cast<float>(c.rope_yarn_ext_factor));
    w.set_f32(a + "rope.scaling.yarn_beta_fast", static_cast<float>(c.rope_yarn_beta_fast));
    w.set_f32(a + "rope.scaling.yarn_beta_slow", static_cast<float>(c.rope_yarn_beta_slow));
  }
  if (c.rope_base_local > 0)
    w.set_f32(a + "rope.freq_base_swa", static_cast<float>(c.rope_base_local));
  if (c.attn_logit_softcap != 0)
    w.set_f32(a + "attn_logit_softcapping", static_cast<float>(c.attn_logit_softcap));
  if (c.final_logit_softcap != 0)
    w.set_f32(a + "final_logit_softcapping", static_cast<float>(c.final_logit_softcap));
  int window = 0;
  GgufArray pattern;
  pattern.type = GgufType::kBool;
  for (const auto& l : c.layers) {
    if (l.attention == LayerAttention::kSliding) {
      SPECDEC_CHECK(window == 0 || window == l.sliding_window, "sliding_window", l.sliding_window,
                    str_cat("one window for every sliding layer (", window, ")"));
      window = l.sliding_window;
    }
    pattern.values.emplace_back(l.attention == LayerAttention::kSliding);
  }
  if (window > 0) {
    w.set_u32(a + "attention.sliding_window", u32(window));
    w.set(a + "attention.sliding_window_pattern", GgufValue(std::move(pattern)));
  }
}

// The GGUF form keeps what llama.cpp's does; a config it cannot say is refused, not changed.
void check_round_trip(const ModelConfig& hf, const ModelConfig& g, const std::string& source) {
  auto differ = [&](const char* field, double a, double b) {
    if (std::abs(a - b) > 1e-6 * std::max(1.0, std::abs(a))) {
      throw UnsupportedError(str_cat(source, ": ", field, " = ", a,
                                     " cannot be run here (the GGUF form "
                                     "llama.cpp's converter writes has ",
                                     b, ")"));
    }
  };
  differ("attention scale (query_pre_attn_scalar)", hf.attention_scale, g.attention_scale);
  differ("embedding scale", hf.embedding_scale, g.embedding_scale);
  differ("activation", static_cast<int>(hf.activation), static_cast<int>(g.activation));
  differ("num_hidden_layers", hf.num_layers, g.num_layers);
  if (hf.rope_scaling_type != g.rope_scaling_type) {
    throw UnsupportedError(str_cat(source, ": RoPE scaling '", hf.rope_scaling_type,
                                   "' cannot be run here (its GGUF form reads as '",
                                   g.rope_scaling_type, "')"));
  }
  if (hf.rope_scaling_type != "llama3") {  // Llama 3's factors are the rope_freqs tensor
    differ("RoPE scaling factor", hf.rope_scaling_factor, g.rope_scaling_factor);
    differ("RoPE attn_factor", hf.rope_attn_factor, g.rope_attn_factor);
    differ("YaRN extrapolation_factor", hf.rope_yarn_ext_factor, g.rope_yarn_ext_factor);
    differ("YaRN beta_fast", hf.rope_yarn_beta_fast, g.rope_yarn_beta_fast);
    differ("YaRN beta_slow", hf.rope_yarn_beta_slow, g.rope_yarn_beta_slow);
    differ("original_max_position_embeddings", static_cast<double>(hf.rope_original_context_length),
           static_cast<double>(g.rope_original_context_length));
  }
  differ("rotated dims (partial_rotary_factor)", hf.rope_dim, g.rope_dim);
  for (size_t i = 0; i < hf.layers.size(); ++i) {
    differ(str_cat("layer ", i, " RoPE base").c_str(), hf.layers[i].rope_base,
           g.layers[i].rope_base);
  }
}

ModelConfig read_config(const fs::path& dir) {
  const fs::path file = dir / "config.json";
  ModelConfig c = config_from_hf_json(read_json_file(file), file.string());
  if (c.architecture == "deepseek2") {
    throw UnsupportedError(
        str_cat(file.string(),
                ": model_type deepseek_v2 runs from GGUF only (convert it "
                "with llama.cpp's convert_hf_to_gguf.py); Hugging Face directories run "
                "for llama, mistral, qwen2, qwen3, gemma3 and phi3"));
  }
  if (c.name.empty())
    c.name =
        dir.filename().empty() ? dir.parent_path().filename().string() : dir.filename().string();
  return c;
}

}  // namespace

bool is_hf_checkpoint(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  return fs::is_directory(p, ec) && fs::is_regular_file(p / "config.json", ec) &&
         !is_dflash_checkpoint(path);
}

GgufFile hf_to_gguf(const std::string& dir, bool with_tensors) {
  const fs::path root(dir);
  const ModelConfig hf = read_config(root);
  // The embedding's shape is checked against vocab_size (read_hf_tensors does) before the
  // tokenizer pads its vocabulary to vocab_size.
  std::optional<HfTensors> t;
  if (with_tensors) {
    t = read_hf_tensors(root, hf);
  } else {
    check_hf_embedding(root, hf);
  }
  GgufWriter w;
  add_model_keys(hf, w);
  w.set_string("general.name", hf.name);
  add_hf_tokenizer(root, hf.vocab_size, w);
  GgufFile meta = GgufFile::from_bytes(w.to_bytes());
  if (!with_tensors) return meta;
  GgufFile file =
      GgufFile::from_views(std::move(meta), std::move(t->tensors), std::move(t->owner), dir);
  check_round_trip(hf, config_from_gguf(file), dir);
  return file;
}

}  // namespace specdec::model
