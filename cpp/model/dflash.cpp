#include "model/dflash.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>

#include "common/errors.h"
#include "common/json.h"
#include "model/gguf_writer.h"
#include "model/hf_checkpoint.h"
#include "model/hf_parts.h"
#include "model/safetensors.h"

namespace specdec::model {
namespace {

// dflash_config's value, else the top level's (z-lab's reader does the same), else null.
const nlohmann::json* draft_value(const nlohmann::json& c, const std::string& key) {
  const auto dc = c.find("dflash_config");
  if (dc != c.end() && dc->is_object() && dc->contains(key)) return &(*dc)[key];
  if (c.contains(key)) return &c[key];
  return nullptr;
}

int64_t get_int(const nlohmann::json& c, const std::string& key, const std::string& where,
                std::optional<int64_t> fallback = std::nullopt, int64_t lo = 1) {
  const auto it = c.find(key);
  if (it == c.end() || it->is_null()) {
    if (fallback) return *fallback;
    throw ConfigError(where + "." + key, "missing", "an integer");
  }
  if (!it->is_number_integer() || it->get<int64_t>() < lo ||
      it->get<int64_t>() > (int64_t{1} << 31)) {
    throw ConfigError(where + "." + key, json_summary(*it), str_cat("an integer >= ", lo));
  }
  return it->get<int64_t>();
}

double get_real(const nlohmann::json& c, const std::string& key, const std::string& where,
                double fallback) {
  const auto it = c.find(key);
  if (it == c.end() || it->is_null()) return fallback;
  if (!it->is_number() || !std::isfinite(it->get<double>())) {
    throw ConfigError(where + "." + key, json_summary(*it), "a finite number");
  }
  return it->get<double>();
}


}  // namespace

bool is_dflash_checkpoint(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p(path);
  if (!fs::is_directory(p, ec) || !fs::is_regular_file(p / "config.json", ec)) return false;
  try {
    const nlohmann::json c = read_json_file(p / "config.json");
    return c.is_object() && c.contains("dflash_config");
  } catch (const std::exception&) {
    return false;  // not a DFlash checkpoint's config: load_model_config reports it
  }
}

GgufFile dflash_to_gguf(const std::string& dir, bool with_matrices) {
  namespace fs = std::filesystem;
  const fs::path root(dir);
  const nlohmann::json c = read_json_file(root / "config.json");
  const std::string where = (root / "config.json").string();
  SPECDEC_CHECK(c.is_object(), where, json_summary(c), "a JSON object");
  const auto dfc = c.find("dflash_config");
  SPECDEC_CHECK(dfc != c.end() && dfc->is_object(), where + ".dflash_config", "missing",
                "an object with target_layer_ids, mask_token_id and block_size");

  const int64_t layers = get_int(c, "num_hidden_layers", where);
  const int64_t hidden = get_int(c, "hidden_size", where);
  const int64_t heads = get_int(c, "num_attention_heads", where);
  const int64_t kv_heads = get_int(c, "num_key_value_heads", where, heads);
  const int64_t head_dim = get_int(c, "head_dim", where, hidden / heads);
  const int64_t ff = get_int(c, "intermediate_size", where);
  const int64_t vocab = get_int(c, "vocab_size", where);
  const int64_t context = get_int(c, "max_position_embeddings", where, 32768);
  const double eps = get_real(c, "rms_norm_eps", where, 1e-6);
  const double theta = get_real(c, "rope_theta", where, 1e6);
  const std::string act = c.value("hidden_act", std::string("silu"));
  if (act != "silu")
    throw UnsupportedError(
        str_cat(where, ".hidden_act = '", act, "': only silu DFlash drafters run"));
  if (c.contains("rope_scaling") && !c["rope_scaling"].is_null()) {
    throw UnsupportedError(
        str_cat(where, ".rope_scaling: a DFlash drafter with rope scaling does not run yet"));
  }
  // layer_types: "full_attention" layers attend both ways; "sliding_attention" layers are causal
  // with a window (z-lab's rule when is_causal is unset); their K/V stay whole (the drafter plans
  // its cache with the hybrid manager off)
  std::vector<bool> sliding(static_cast<size_t>(layers), false);
  int64_t window = 0;
  if (c.contains("layer_types") && !c["layer_types"].is_null()) {
    const auto& types = c["layer_types"];
    SPECDEC_CHECK(types.is_array() && static_cast<int64_t>(types.size()) == layers,
                  where + ".layer_types", json_summary(types),
                  str_cat("a list of ", layers, " layer types"));
    for (size_t i = 0; i < types.size(); ++i) {
      const std::string t = types[i].is_string() ? types[i].get<std::string>() : "";
      SPECDEC_CHECK(t == "full_attention" || t == "sliding_attention",
                    str_cat(where, ".layer_types[", i, "]"), json_summary(types[i]),
                    "'full_attention' or 'sliding_attention'");
      sliding[i] = t == "sliding_attention";
    }
    if (std::find(sliding.begin(), sliding.end(), true) != sliding.end()) {
      window = get_int(c, "sliding_window", where);
    }
  }
  if (const auto* causal = draft_value(c, "is_causal");
      causal != nullptr && causal->is_boolean() && causal->get<bool>()) {
    throw UnsupportedError(
        str_cat(where, ".is_causal = true: DFlash drafters here are non-causal"));
  }
  if (const auto* m = draft_value(c, "output_multiplier");
      m != nullptr && !m->is_null() && (!m->is_number() || m->get<double>() != 1.0)) {
    throw UnsupportedError(
        str_cat(where, ".output_multiplier = ", json_summary(*m), ": only 1 is supported"));
  }
  if (const auto* s = draft_value(c, "final_logit_softcapping");
      s != nullptr && !s->is_null() && (!s->is_number() || s->get<double>() != 0.0)) {
    throw UnsupportedError(
        str_cat(where, ".final_logit_softcapping = ", json_summary(*s), ": not supported"));
  }
  const auto* ids = draft_value(c, "target_layer_ids");
  SPECDEC_CHECK(ids != nullptr && ids->is_array() && !ids->empty(),
                where + ".dflash_config.target_layer_ids",
                ids != nullptr ? json_summary(*ids) : "missing",
                "a non-empty list of the target's layer indices");
  std::vector<int32_t> target_layers;
  for (const auto& v : *ids) {
    SPECDEC_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < (1 << 20),
                  where + ".dflash_config.target_layer_ids", json_summary(*ids),
                  "layer indices >= 0");
    target_layers.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  const auto* mask = draft_value(c, "mask_token_id");
  SPECDEC_CHECK(mask != nullptr && mask->is_number_integer() && mask->get<int64_t>() >= 0 &&
                    mask->get<int64_t>() < vocab,
                where + ".dflash_config.mask_token_id",
                mask != nullptr ? json_summary(*mask) : "missing",
                str_cat("a token id in [0, vocab_size = ", vocab, ")"));
  const auto* block = draft_value(c, "block_size");
  const bool nested = dfc->contains("block_size") && !(*dfc)["block_size"].is_null();
  const int64_t block_size = block != nullptr && !block->is_null()
                                 ? get_int(nested ? *dfc : c, "block_size",
                                           nested ? where + ".dflash_config" : where, 16, 2)
                                 : 16;
  double embedding_scale = 1.0;
  if (const auto* s = draft_value(c, "input_embedding_scale"); s != nullptr && !s->is_null()) {
    SPECDEC_CHECK(s->is_number() && std::isfinite(s->get<double>()),
                  where + ".input_embedding_scale", json_summary(*s), "a finite number");
    embedding_scale = s->get<double>();
  }

  const fs::path weights = root / "model.safetensors";
  // the tensors are views into the mapped file, which the GgufFile keeps open
  const auto file =
      std::make_shared<const SafetensorsFile>(SafetensorsFile::open(weights.string()));
  const SafetensorsFile& st = *file;
  std::vector<GgufTensor> views;
  std::string prefix;
  if (!st.contains("fc.weight") && st.contains("model.fc.weight")) prefix = "model.";
  GgufWriter w;
  const std::string a = "qwen3.";
  w.set_string("general.architecture", "qwen3");
  w.set_string("general.name", root.filename().string().empty()
                                   ? root.parent_path().filename().string()
                                   : root.filename().string());
  w.set_u32(a + "block_count", static_cast<uint32_t>(layers));
  w.set_u32(a + "embedding_length", static_cast<uint32_t>(hidden));
  w.set_u32(a + "feed_forward_length", static_cast<uint32_t>(ff));
  w.set_u32(a + "attention.head_count", static_cast<uint32_t>(heads));
  w.set_u32(a + "attention.head_count_kv", static_cast<uint32_t>(kv_heads));
  w.set_u32(a + "attention.key_length", static_cast<uint32_t>(head_dim));
  w.set_u32(a + "attention.value_length", static_cast<uint32_t>(head_dim));
  w.set_f32(a + "attention.layer_norm_rms_epsilon", static_cast<float>(eps));
  w.set_f32(a + "rope.freq_base", static_cast<float>(theta));
  w.set_u32(a + "context_length", static_cast<uint32_t>(context));
  w.set_u32(a + "vocab_size", static_cast<uint32_t>(vocab));
  w.set_i32s(a + "dflash.target_layer_ids", target_layers);
  w.set_u32(a + "dflash.mask_token_id", static_cast<uint32_t>(mask->get<int64_t>()));
  w.set_u32(a + "dflash.block_size", static_cast<uint32_t>(block_size));
  w.set_f32(a + "dflash.input_embedding_scale", static_cast<float>(embedding_scale));
  if (window > 0) {
    w.set_u32(a + "attention.sliding_window", static_cast<uint32_t>(window));
    GgufArray pattern;
    pattern.type = GgufType::kBool;
    for (bool s : sliding) pattern.values.emplace_back(s);
    w.set(a + "attention.sliding_window_pattern", GgufValue(std::move(pattern)));
  }

  auto add = [&](const std::string& from, const std::string& to, std::vector<int64_t> want) {
    const std::string name = prefix + from;
    SPECDEC_CHECK(st.contains(name), str_cat(weights.string(), ": tensor"), name,
                  "present in a DFlash checkpoint (layers.N.self_attn.*, layers.N.mlp.*, norm, fc, "
                  "hidden_norm)");
    const SafetensorsTensor& t = st.tensor(name);
    std::vector<int64_t> dims(t.shape.rbegin(), t.shape.rend());  // GGUF: innermost first
    if (dims != want) {
      std::string got, exp;
      for (auto d : dims) got += (got.empty() ? "" : ", ") + std::to_string(d);
      for (auto d : want) exp += (exp.empty() ? "" : ", ") + std::to_string(d);
      throw FormatError(str_cat(weights.string(), ": tensor ", name,
                                " has shape (innermost first) [", got, "]; the config implies [",
                                exp, "]"));
    }
    if (!with_matrices && dims.size() > 1) return;  // the config reads only which tensors exist
    GgufTensor g;
    g.name = to;
    g.type = ggml_type_of(t, "DFlash drafter");
    g.dims = std::move(dims);
    g.num_elements = static_cast<int64_t>(t.num_elements);
    g.size_bytes = t.size_bytes;
    g.data = t.data;
    views.push_back(std::move(g));
  };
  for (int64_t i = 0; i < layers; ++i) {
    const std::string l = str_cat("layers.", i, ".");
    const std::string b = str_cat("blk.", i, ".");
    add(l + "input_layernorm.weight", b + "attn_norm.weight", {hidden});
    add(l + "self_attn.q_proj.weight", b + "attn_q.weight", {hidden, heads * head_dim});
    add(l + "self_attn.k_proj.weight", b + "attn_k.weight", {hidden, kv_heads * head_dim});
    add(l + "self_attn.v_proj.weight", b + "attn_v.weight", {hidden, kv_heads * head_dim});
    add(l + "self_attn.o_proj.weight", b + "attn_output.weight", {heads * head_dim, hidden});
    add(l + "self_attn.q_norm.weight", b + "attn_q_norm.weight", {head_dim});
    add(l + "self_attn.k_norm.weight", b + "attn_k_norm.weight", {head_dim});
    add(l + "post_attention_layernorm.weight", b + "ffn_norm.weight", {hidden});
    add(l + "mlp.gate_proj.weight", b + "ffn_gate.weight", {hidden, ff});
    add(l + "mlp.up_proj.weight", b + "ffn_up.weight", {hidden, ff});
    add(l + "mlp.down_proj.weight", b + "ffn_down.weight", {ff, hidden});
    if (st.contains(prefix + l + "self_attn.q_proj.bias")) {
      throw UnsupportedError(
          str_cat(weights.string(), ": attention biases (", prefix, l,
                  "self_attn.q_proj.bias) in a DFlash drafter are not supported"));
    }
  }
  add("norm.weight", "output_norm.weight", {hidden});
  add("fc.weight", "dflash_fc.weight",
      {static_cast<int64_t>(target_layers.size()) * hidden, hidden});
  add("hidden_norm.weight", "dflash_hidden_norm.weight", {hidden});
  return GgufFile::from_views(GgufFile::from_bytes(w.to_bytes()), std::move(views), file, dir);
}

GgufFile open_model_file(const std::string& path) {
  if (is_dflash_checkpoint(path)) return dflash_to_gguf(path);
  if (is_hf_checkpoint(path)) return hf_to_gguf(path);
  return GgufFile::open(path);
}

}  // namespace specdec::model
