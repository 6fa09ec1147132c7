// A Hugging Face directory's safetensors weights under llama.cpp's tensor names (what the
// runner's GGUF path loads), as views into the mapped files.
#include <cstring>
#include <map>
#include <set>

#include "common/dtype.h"
#include "common/errors.h"
#include "common/json.h"
#include "model/hf_parts.h"
#include "model/rope_scaling.h"
#include "model/safetensors.h"

namespace specdec::model {
namespace fs = std::filesystem;

GgmlType ggml_type_of(const SafetensorsTensor& t, const std::string& source) {
  switch (t.dtype) {
    case SafetensorsDType::kF32:
      return GgmlType::kF32;
    case SafetensorsDType::kF16:
      return GgmlType::kF16;
    case SafetensorsDType::kBF16:
      return GgmlType::kBF16;
    default:
      throw UnsupportedError(
          str_cat(source, ": tensor ", t.name, " is stored as ", safetensors_dtype_name(t.dtype),
                  "; F32, F16 and BF16 weights are supported (quantize through GGUF)"));
  }
}

namespace {

struct Owner {
  std::vector<SafetensorsFile> files;
  std::vector<std::vector<uint8_t>> buffers;  // tensors whose bytes were changed
};

// Every tensor of the directory's safetensors files by name.
class Shards {
 public:
  explicit Shards(const fs::path& dir) : owner_(std::make_shared<Owner>()) {
    const fs::path index = dir / "model.safetensors.index.json";
    const fs::path single = dir / "model.safetensors";
    std::error_code ec;
    if (fs::is_regular_file(index, ec)) {
      open_index(dir, index);
    } else if (fs::is_regular_file(single, ec)) {
      open_file(single);
      for (const auto& t : owner_->files.back().tensors()) by_name_[t.name] = &t;
    } else {
      throw ConfigError(
          "path", dir.string(),
          "a Hugging Face directory with model.safetensors, or "
          "shards named by model.safetensors.index.json (PyTorch .bin weights are not read)");
    }
  }

  const SafetensorsTensor* find(const std::string& name) const {
    const auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : it->second;
  }
  const std::shared_ptr<Owner>& owner() const { return owner_; }

 private:
  void open_file(const fs::path& file) {
    owner_->files.push_back(SafetensorsFile::open(file.string()));
  }

  void open_index(const fs::path& dir, const fs::path& index) {
    const nlohmann::json j = read_json_file(index, kMaxLargeJsonFileBytes);
    const std::string where = index.string() + " weight_map";
    const auto map = j.is_object() ? j.find("weight_map") : j.end();
    SPECDEC_CHECK(map != j.end() && map->is_object() && !map->empty(), where,
                  map == j.end() ? "missing" : json_summary(*map),
                  "an object: tensor name -> shard file name");
    std::map<std::string, size_t> file_index;
    for (const auto& [name, file] : map->items()) {
      const std::string f = file.is_string() ? file.get<std::string>() : "";
      SPECDEC_CHECK(!f.empty() && f.find('/') == std::string::npos &&
                        f.find('\\') == std::string::npos && f != "." && f != "..",
                    str_cat(where, "[\"", name, "\"]"), json_summary(file),
                    "a file name in the model's directory");
      auto [it, added] = file_index.emplace(f, owner_->files.size());
      if (added) open_file(dir / f);
      const SafetensorsFile& shard = owner_->files[it->second];
      if (!shard.contains(name)) {
        throw FormatError(str_cat(index.string(), ": tensor ", name, " is mapped to ", f,
                                  ", which does not hold it"));
      }
      by_name_[name] = &shard.tensor(name);
    }
  }

  std::shared_ptr<Owner> owner_;
  std::map<std::string, const SafetensorsTensor*> by_name_;
};

GgufTensor view(const SafetensorsTensor& t, const std::string& name, const std::string& source) {
  GgufTensor g;
  g.name = name;
  g.type = ggml_type_of(t, source);
  for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it)
    g.dims.push_back(static_cast<int64_t>(*it));
  g.num_elements = static_cast<int64_t>(t.num_elements);
  g.size_bytes = t.size_bytes;
  g.data = t.data;
  return g;
}

float element(const GgufTensor& t, int64_t i) {
  uint16_t bits = 0;
  switch (t.type) {
    case GgmlType::kF32: {
      float f = 0;
      std::memcpy(&f, t.data + i * 4, 4);
      return f;
    }
    case GgmlType::kF16:
      std::memcpy(&bits, t.data + i * 2, 2);
      return half_bits_to_float(bits);
    default:
      std::memcpy(&bits, t.data + i * 2, 2);
      return bf16_bits_to_float(bits);
  }
}

// Gemma 3's RMSNorm multiplies by (1 + w): llama.cpp's converter stores w + 1 (F32), and the
// GGUF form the runner reads has no offset. The sum is taken in F32, as transformers computes
// 1 + w.float(); llama.cpp's converter adds in the checkpoint's dtype, so from a BF16 checkpoint
// its GGUF norms can differ from these by BF16 rounding (F32 checkpoints: identical).
void add_one(GgufTensor& t, Owner& owner) {
  std::vector<uint8_t> bytes(static_cast<size_t>(t.num_elements) * 4);
  for (int64_t i = 0; i < t.num_elements; ++i) {
    const float v = element(t, i) + 1.0f;
    std::memcpy(bytes.data() + i * 4, &v, 4);
  }
  t.type = GgmlType::kF32;
  t.size_bytes = bytes.size();
  t.data = bytes.data();
  owner.buffers.push_back(std::move(bytes));
}

// llama.cpp's permute for Llama q/k: within each head, rows in rotate-half order (the first
// half, then the second) become interleaved pairs (row j of the first half, row j of the second).
void permute_rows(GgufTensor& t, int64_t heads, Owner& owner) {
  if (t.dims.empty() || t.dims.size() > 2 || t.dims.back() <= 0 || t.size_bytes == 0) {
    throw FormatError(str_cat(t.name,
                              ": a projection (or its bias) must have 1 or 2 dimensions "
                              "and rows; it has ",
                              t.dims.size(), " dimensions"));
  }
  const int64_t rows = t.dims.back();
  SPECDEC_CHECK(heads > 0 && rows % (2 * heads) == 0, t.name + " rows", rows,
                str_cat("a multiple of 2 x ", heads, " heads"));
  const size_t row_bytes = static_cast<size_t>(t.size_bytes / static_cast<uint64_t>(rows));
  const int64_t half = rows / heads / 2;
  std::vector<uint8_t> bytes(t.size_bytes);
  for (int64_t h = 0; h < heads; ++h) {
    for (int64_t j = 0; j < half; ++j) {
      for (int64_t i = 0; i < 2; ++i) {
        const int64_t dst = h * 2 * half + j * 2 + i, src = h * 2 * half + i * half + j;
        std::memcpy(bytes.data() + dst * row_bytes, t.data + src * row_bytes, row_bytes);
      }
    }
  }
  t.data = bytes.data();
  owner.buffers.push_back(std::move(bytes));
}

// A 1-D F32 tensor holding `values`, its bytes kept by `owner`.
GgufTensor f32_tensor(const std::string& name, const std::vector<float>& values, Owner& owner) {
  std::vector<uint8_t> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  GgufTensor t;
  t.name = name;
  t.dims = {static_cast<int64_t>(values.size())};
  t.num_elements = static_cast<int64_t>(values.size());
  t.size_bytes = bytes.size();
  t.data = bytes.data();
  owner.buffers.push_back(std::move(bytes));
  return t;
}

// HF layer tensor suffix -> llama.cpp name (without "blk.N." and ".weight"/".bias").
std::vector<std::pair<std::string, std::string>> layer_names(const std::string& arch) {
  std::vector<std::pair<std::string, std::string>> names = {
      {"input_layernorm", "attn_norm"},    {"self_attn.q_proj", "attn_q"},
      {"self_attn.k_proj", "attn_k"},      {"self_attn.v_proj", "attn_v"},
      {"self_attn.o_proj", "attn_output"}, {"self_attn.q_norm", "attn_q_norm"},
      {"self_attn.k_norm", "attn_k_norm"}, {"mlp.gate_proj", "ffn_gate"},
      {"mlp.up_proj", "ffn_up"},           {"mlp.down_proj", "ffn_down"}};
  if (arch == "phi3") {  // kept fused, as llama.cpp's converter keeps them: q | k | v, gate | up
    names.push_back({"self_attn.qkv_proj", "attn_qkv"});
    names.push_back({"mlp.gate_up_proj", "ffn_up"});
  }
  if (arch == "gemma3") {  // four norms per layer
    names.push_back({"post_attention_layernorm", "post_attention_norm"});
    names.push_back({"pre_feedforward_layernorm", "ffn_norm"});
    names.push_back({"post_feedforward_layernorm", "post_ffw_norm"});
  } else {
    names.push_back({"post_attention_layernorm", "ffn_norm"});
  }
  return names;
}

// The prefix of the language model's tensors: "model." (most), or a multimodal wrapper's.
std::string model_prefix(const Shards& s, const fs::path& dir) {
  for (const char* p : {"model.", "model.language_model.", "language_model.model.", ""}) {
    if (s.find(std::string(p) + "embed_tokens.weight") != nullptr) return p;
  }
  throw FormatError(str_cat(dir.string(),
                            ": no embedding tensor (model.embed_tokens.weight) in the "
                            "safetensors files"));
}

// The embedding must be [vocab_size, hidden_size] of config.json: checked before anything is
// sized from vocab_size (the tokenizer's padding, the runner's logits).
void check_embedding(const Shards& s, const std::string& prefix, const ModelConfig& c,
                     const fs::path& dir) {
  const std::string name = prefix + "embed_tokens.weight";
  const SafetensorsTensor& t = *s.find(name);
  ggml_type_of(t, dir.string());  // a dtype the engine cannot read is said first
  const std::vector<uint64_t> want = {static_cast<uint64_t>(c.vocab_size),
                                      static_cast<uint64_t>(c.hidden_size)};
  if (t.shape == want) return;
  const bool rows = t.shape.size() != 2 || t.shape[0] != want[0];
  throw FormatError(str_cat((dir / "config.json").string(), ": ",
                            rows ? "vocab_size = " : "hidden_size = ", want[rows ? 0 : 1],
                            ": expected the ", rows ? "rows" : "columns", " of ", name,
                            ", whose shape is ", json_summary(nlohmann::json(t.shape))));
}

bool has_weights(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "model.safetensors.index.json", ec) ||
         fs::is_regular_file(dir / "model.safetensors", ec);
}

}  // namespace

void check_hf_embedding(const fs::path& dir, const ModelConfig& c) {
  if (!has_weights(dir)) return;
  const Shards shards(dir);
  check_embedding(shards, model_prefix(shards, dir), c, dir);
}

HfTensors read_hf_tensors(const fs::path& dir, const ModelConfig& c) {
  const Shards shards(dir);
  Owner& owner = *shards.owner();
  const std::string source = dir.string();
  const std::string prefix = model_prefix(shards, dir);
  check_embedding(shards, prefix, c, dir);
  HfTensors out;
  auto add = [&](const std::string& from, const std::string& to) -> GgufTensor* {
    const SafetensorsTensor* t = shards.find(from);
    if (t == nullptr) return nullptr;
    out.tensors.push_back(view(*t, to, source));
    GgufTensor& g = out.tensors.back();
    if (c.architecture == "gemma3" && to.size() > 11 &&
        to.compare(to.size() - 11, 11, "norm.weight") == 0) {
      add_one(g, owner);
    }
    return &g;
  };
  add(prefix + "embed_tokens.weight", "token_embd.weight");
  add(prefix + "norm.weight", "output_norm.weight");
  if (!c.tied_embeddings) {
    const bool wrapped = prefix != "model." && prefix != "";
    const std::string head = wrapped && shards.find("language_model.lm_head.weight")
                                 ? "language_model.lm_head.weight"
                                 : "lm_head.weight";
    SPECDEC_CHECK(add(head, "output.weight") != nullptr,
                  source + "/config.json tie_word_embeddings", "false",
                  "true, or lm_head.weight present in the safetensors files (it is not)");
  }
  const auto names = layer_names(c.architecture);
  for (int il = 0; il < c.num_layers; ++il) {
    for (const auto& [hf, gg] : names) {
      for (const char* kind : {".weight", ".bias"}) {
        GgufTensor* t =
            add(str_cat(prefix, "layers.", il, ".", hf, kind), str_cat("blk.", il, ".", gg, kind));
        if (t == nullptr || c.architecture != "llama") continue;
        if (gg == "attn_q") permute_rows(*t, c.num_q_heads, owner);
        if (gg == "attn_k") permute_rows(*t, c.num_kv_heads, owner);
      }
    }
  }
  // llama.cpp's converter writes RoPE factors as F32 tensors: Llama 3's rope_freqs (and no type
  // key), Phi-3's LongRoPE rope_factors_long / _short.
  if (c.rope_scaling_type == "llama3") {
    out.tensors.push_back(f32_tensor("rope_freqs.weight", llama3_rope_factors(c), owner));
  }
  if (c.rope_scaling_type == "longrope") {
    out.tensors.push_back(f32_tensor("rope_factors_long.weight", c.rope_long_factors, owner));
    out.tensors.push_back(f32_tensor("rope_factors_short.weight", c.rope_short_factors, owner));
  }
  out.owner = shards.owner();
  return out;
}

}  // namespace specdec::model
