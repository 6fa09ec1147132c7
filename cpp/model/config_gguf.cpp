// ModelConfig from GGUF metadata ("<arch>.*" keys as llama.cpp's converters write them) and the
// tensor table (biases, QK norms, a separate output head).
#include <algorithm>
#include <cmath>
#include <variant>

#include "common/errors.h"
#include "model/config.h"
#include "model/gguf.h"

namespace specdec::model {
namespace {

class Reader {
 public:
  Reader(const GgufFile& file, std::string arch) : f_(file), arch_(std::move(arch)) {}

  std::string key(const std::string& suffix) const { return arch_ + "." + suffix; }
  bool has(const std::string& suffix) const { return f_.find(key(suffix)) != nullptr; }

  // Any numeric scalar as double; nullopt-like default when absent.
  double number(const std::string& suffix, double fallback, bool required = false) const {
    const GgufValue* v = f_.find(key(suffix));
    if (v == nullptr) {
      if (required) fail(suffix, "is missing");
      return fallback;
    }
    double out = 0;
    bool ok = std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
            out = static_cast<double>(x);
            return true;
          }
          return false;
        },
        v->variant());
    if (!ok) fail(suffix, str_cat("must be a number, found ", gguf_type_name(v->type())));
    if (!std::isfinite(out)) fail(suffix, str_cat("= ", out, " must be finite"));
    return out;
  }

  // A positive integer < 2^31 (sizes, counts).
  int size(const std::string& suffix, int fallback = 0, bool required = true) const {
    const GgufValue* v = f_.find(key(suffix));
    if (v == nullptr) {
      if (required) fail(suffix, "is missing");
      return fallback;
    }
    if (v->type() == GgufType::kArray) return uniform_array(suffix, *v);
    const double x = number(suffix, 0, true);
    const int64_t max = max_model_size(suffix);  // before anything is sized from it
    if (x != std::floor(x) || x < 0 || x > static_cast<double>(max)) {
      fail(suffix, str_cat("= ", x, ": expected an integer in [0, ", max, "]"));
    }
    return static_cast<int>(x);
  }

  // Per-layer arrays (head counts) must hold one value for every layer here.
  int uniform_array(const std::string& suffix, const GgufValue& v) const {
    const auto& arr = *v.get_if<GgufArray>();
    if (arr.values.empty()) fail(suffix, "is an empty array");
    int64_t first = -1;
    for (const auto& e : arr.values) {
      int64_t x = -1;
      std::visit([&](const auto& y) {
        using T = std::decay_t<decltype(y)>;
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) x = static_cast<int64_t>(y);
      }, e.variant());
      if (x < 0 || x > max_model_size(suffix)) {
        fail(suffix, str_cat("holds a value that is not an integer in [0, ", max_model_size(suffix), "]"));
      }
      if (first >= 0 && x != first) {
        throw UnsupportedError(str_cat("GGUF metadata key '", key(suffix), "': per-layer values "
                                       "differ; only one value for every layer is supported (file ",
                                       f_.source(), ")"));
      }
      first = x;
    }
    return static_cast<int>(first);
  }

  const GgufValue* find(const std::string& suffix) const { return f_.find(key(suffix)); }
  bool has_tensor(const std::string& name) const { return f_.find_tensor(name) != nullptr; }

  [[noreturn]] void fail(const std::string& suffix, const std::string& what) const {
    throw FormatError(str_cat("GGUF metadata key '", key(suffix), "' ", what, " (file ",
                              f_.source(), ")"));
  }

  const GgufFile& file() const { return f_; }

 private:
  const GgufFile& f_;
  std::string arch_;
};

// Which layers are local (sliding or chunked): an int pattern N (layer i is global when
// i % N == N - 1) or an array of bools (true: local).
std::vector<bool> local_layers(const Reader& r, int num_layers, int default_period) {
  std::vector<bool> local(static_cast<size_t>(num_layers), true);
  const GgufValue* v = r.find("attention.sliding_window_pattern");
  if (v != nullptr && v->type() == GgufType::kArray) {
    const auto& arr = *v->get_if<GgufArray>();
    if (arr.type != GgufType::kBool || static_cast<int>(arr.values.size()) != num_layers) {
      r.fail("attention.sliding_window_pattern",
             str_cat("must be an integer or an array of ", num_layers, " bools"));
    }
    for (int i = 0; i < num_layers; ++i) local[i] = *arr.values[i].get_if<bool>();
    return local;
  }
  const int period = v != nullptr ? r.size("attention.sliding_window_pattern") : default_period;
  if (period > 1) {  // 0 or 1: every layer is local
    for (int i = 0; i < num_layers; ++i) local[i] = i % period != period - 1;
  }
  return local;
}

// rope.scaling.* as llama.cpp reads them (llama_model_base::load_hparams, llama_context): the type
// (absent: linear with factor 1), factor (0: 1), original_context_length, attn_factor and the YaRN
// keys; a rope_freqs tensor (Llama 3's converter writes it instead of a type) divides the
// frequencies per dimension.
void read_rope_scaling(const Reader& r, ModelConfig& c) {
  if (const GgufValue* t = r.find("rope.scaling.type"); t != nullptr) {
    const std::string* s = t->get_if<std::string>();
    if (s == nullptr) r.fail("rope.scaling.type", "must be a string");
    const auto& known = supported_rope_scaling_types();
    if (std::find(known.begin(), known.end(), *s) == known.end()) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      throw UnsupportedError(str_cat("GGUF metadata key '", r.key("rope.scaling.type"), "' = '", *s,
                                     "' is not supported; supported: ", list, " (and Llama 3's "
                                     "rope_freqs tensor) (file ", r.file().source(), ")"));
    }
    if (*s != "none") c.rope_scaling_type = *s;
  }
  c.rope_scaling_factor = r.number("rope.scaling.factor", r.number("rope.scale_linear", 1));
  if (c.rope_scaling_factor == 0) c.rope_scaling_factor = 1;
  // No type key: llama.cpp's default is linear (older files carry only rope.scale_linear).
  if (!r.has("rope.scaling.type") && c.rope_scaling_factor != 1) c.rope_scaling_type = "linear";
  c.rope_original_context_length = r.size("rope.scaling.original_context_length", 0, false);
  c.rope_attn_factor = r.number("rope.scaling.attn_factor", 1);
  c.rope_yarn_ext_factor = r.number("rope.scaling.yarn_ext_factor", 1);
  c.rope_yarn_beta_fast = r.number("rope.scaling.yarn_beta_fast", 32);
  c.rope_yarn_beta_slow = r.number("rope.scaling.yarn_beta_slow", 1);
  c.rope_freq_factors = r.has_tensor("rope_freqs.weight");
  if (c.rope_freq_factors && c.rope_scaling_type.empty()) c.rope_scaling_type = "llama3";
  // Phi-3's converter writes LongRoPE as two factor tensors and attn_factor, with no type.
  c.rope_long_short_factors = r.has_tensor("rope_factors_long.weight");
  if (c.rope_long_short_factors && c.rope_scaling_type.empty()) c.rope_scaling_type = "longrope";
  if (c.rope_scaling_type == "longrope" && !c.rope_long_short_factors) {
    r.fail("rope.scaling.type", "= 'longrope' needs the rope_factors_long and rope_factors_short "
                                "tensors, which the file lacks");
  }
  if (c.rope_long_short_factors && c.rope_original_context_length == 0) {
    r.fail("rope.scaling.original_context_length",
           "is missing; LongRoPE (rope_factors_long) picks its factors by it");
  }
}

void read_common(const Reader& r, ModelConfig& c) {
  c.num_layers = r.size("block_count");
  c.hidden_size = r.size("embedding_length");
  c.intermediate_size = r.size("feed_forward_length", 0, c.architecture != "deepseek2");
  c.num_q_heads = r.size("attention.head_count");
  c.num_kv_heads = r.size("attention.head_count_kv", c.num_q_heads, false);
  c.context_length = r.size("context_length");
  const int default_head = c.num_q_heads > 0 ? c.hidden_size / c.num_q_heads : 0;
  c.head_size = r.size("attention.key_length", default_head, false);
  c.head_size_v = r.size("attention.value_length", c.head_size, false);
  c.norm_eps = r.number("attention.layer_norm_rms_epsilon", 1e-5, true);
  c.rope_base = r.number("rope.freq_base", 10000);
  c.rope_dim = r.size("rope.dimension_count", c.head_size, false);
  read_rope_scaling(r, c);
  c.attn_logit_softcap = r.number("attn_logit_softcapping", 0);
  c.final_logit_softcap = r.number("final_logit_softcapping", 0);
  c.num_experts = r.size("expert_count", 0, false);
  // The vocabulary size: the key when present, else the embedding's rows.
  const GgufTensor* embd = r.file().find_tensor("token_embd.weight");
  int vocab = r.size("vocab_size", 0, false);
  if (vocab == 0 && embd != nullptr && embd->dims.size() == 2) vocab = static_cast<int>(embd->dims[1]);
  if (vocab == 0 && r.file().find("tokenizer.ggml.tokens") != nullptr) {
    vocab = static_cast<int>(r.file().get_array("tokenizer.ggml.tokens").values.size());
  }
  if (embd != nullptr && embd->dims.size() == 2 && embd->dims[1] != vocab) {
    r.fail("vocab_size", str_cat("= ", vocab, ": expected the rows of token_embd.weight (",
                                 embd->dims[1], ")"));
  }
  c.vocab_size = vocab;
  c.tied_embeddings = !r.has_tensor("output.weight");
  c.fused_qkv = r.has_tensor("blk.0.attn_qkv.weight");
  c.fused_gate_up = c.architecture == "phi3";  // ffn_up [hidden, 2 ff]: gate then up
  c.qkv_bias = r.has_tensor("blk.0.attn_q.bias") || r.has_tensor("blk.0.attn_qkv.bias");
  c.output_bias = r.has_tensor("blk.0.attn_output.bias");
  c.qk_norm = r.has_tensor("blk.0.attn_q_norm.weight");
  c.post_norms = r.has_tensor("blk.0.post_attention_norm.weight");
  if (const GgufValue* ids = r.find("dflash.target_layer_ids"); ids != nullptr) {
    if (ids->type() != GgufType::kArray) r.fail("dflash.target_layer_ids", "must be an array of layer indices");
    for (const auto& e : ids->get_if<GgufArray>()->values) {
      int64_t x = -1;
      std::visit([&](const auto& y) {
        using T = std::decay_t<decltype(y)>;
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) x = static_cast<int64_t>(y);
      }, e.variant());
      if (x < 0 || x > (1 << 20)) r.fail("dflash.target_layer_ids", "holds a value that is not a layer index");
      c.dflash_target_layers.push_back(static_cast<int>(x));
    }
    if (c.dflash_target_layers.empty()) r.fail("dflash.target_layer_ids", "is empty");
    c.dflash_mask_token_id = r.size("dflash.mask_token_id");
    c.dflash_block_size = r.size("dflash.block_size", 16, false);
    c.dflash_embedding_scale = r.number("dflash.input_embedding_scale", 1);
  }
}

void build_layers(const Reader& r, ModelConfig& c) {
  const int n = c.num_layers;
  c.layers.assign(static_cast<size_t>(n), LayerConfig{});
  for (auto& l : c.layers) l.rope_base = c.rope_base;
  if (c.architecture == "deepseek2") {
    for (auto& l : c.layers) l.attention = LayerAttention::kMla;
    return;
  }
  // Phi-3's window is written but not applied by llama.cpp (its SWA is disabled there).
  const int window = c.architecture == "phi3" ? 0 : r.size("attention.sliding_window", 0, false);
  const int chunk = r.size("attention.chunk_size", 0, false);
  if (window > 0 && chunk > 0) {
    r.fail("attention.chunk_size", "and attention.sliding_window are both set; a model has one "
                                   "kind of local attention");
  }
  if (window > 0 || chunk > 0) {
    // Gemma 3: 5 sliding layers then 1 global; Llama 4: 3 chunked then 1 global (NoPE); other
    // architectures with a window and no pattern: every layer slides (Mistral style).
    const int period = c.architecture == "gemma3" ? 6 : (chunk > 0 ? 4 : 1);
    const std::vector<bool> local = local_layers(r, n, period);
    const double local_base = c.rope_base_local > 0 ? c.rope_base_local : c.rope_base;
    for (int i = 0; i < n; ++i) {
      if (!local[i]) {
        if (chunk > 0) c.layers[i].use_rope = false;
        continue;
      }
      LayerConfig& l = c.layers[i];
      l.attention = window > 0 ? LayerAttention::kSliding : LayerAttention::kChunked;
      l.sliding_window = window;
      l.attention_chunk_size = chunk;
      l.rope_base = local_base;
    }
  }
  // KV sharing (Gemma 3n style): the last N layers read the last earlier layer of their kind.
  const int shared = r.size("attention.shared_kv_layers", 0, false);
  if (shared >= n) r.fail("attention.shared_kv_layers", str_cat("= ", shared, " must be < block_count"));
  for (int i = n - shared; i < n; ++i) {
    for (int j = n - shared - 1; j >= 0; --j) {
      if (c.layers[j].attention == c.layers[i].attention) {
        c.layers[i].kv_sharing_target = j;
        break;
      }
    }
  }
}

}  // namespace

ModelConfig config_from_gguf(const GgufFile& file) {
  const std::string& arch = file.get_string("general.architecture");
  bool known = false;
  for (const auto& a : supported_architectures()) known = known || a == arch;
  if (!known) {
    std::string list;
    for (const auto& a : supported_architectures()) list += (list.empty() ? "" : ", ") + a;
    throw UnsupportedError(str_cat("general.architecture = '", arch, "' is not supported; "
                                   "supported: ", list, " (file ", file.source(), ")"));
  }
  ModelConfig c;
  c.architecture = arch;
  c.source_format = "gguf";
  if (const GgufValue* v = file.find("general.name"); v && v->get_if<std::string>()) {
    c.name = *v->get_if<std::string>();
  }
  Reader r(file, arch);
  read_common(r, c);
  if (arch == "llama") {
    c.rope_type = RopeType::kNorm;
  } else if (arch == "qwen2" || arch == "qwen3" || arch == "phi3") {
    c.rope_type = RopeType::kNeox;
  } else if (arch == "gemma3") {
    // llama.cpp's gemma3: local layers use base 10000; softmax scale 1/sqrt(head_size);
    // embeddings scaled by sqrt(hidden); GELU-tanh; norm weights stored final (offset 0).
    c.rope_type = RopeType::kNeox;
    c.rope_base_local = r.number("rope.freq_base_swa", 10000);
    c.activation = Activation::kGeluTanh;
    c.embedding_scale = std::sqrt(static_cast<double>(c.hidden_size));
    // query_pre_attn_scalar is not stored in GGUF; llama.cpp infers the 27B's (62 layers).
    const double scalar = c.num_layers == 62 && c.num_q_heads > 0
                              ? static_cast<double>(c.hidden_size) / c.num_q_heads
                              : static_cast<double>(c.head_size);
    c.attention_scale = 1.0 / std::sqrt(scalar);
  } else if (arch == "deepseek2") {
    c.rope_type = RopeType::kNorm;
    c.mla.q_lora_rank = r.size("attention.q_lora_rank", 0, false);
    c.mla.kv_lora_rank = r.size("attention.kv_lora_rank");
    c.mla.qk_rope_head_dim = r.size("rope.dimension_count");
    // Newer converters store the MLA (absorbed) sizes in key/value_length and the per-head
    // sizes in *_mla; older ones store the per-head sizes in key/value_length.
    const int k = r.size("attention.key_length_mla", c.head_size, false);
    const int v = r.size("attention.value_length_mla", c.head_size_v, false);
    c.head_size = k;
    c.head_size_v = v;
    c.mla.qk_nope_head_dim = k - c.mla.qk_rope_head_dim;
    c.mla.v_head_dim = v;
    c.num_kv_heads = c.num_q_heads;
    if (c.intermediate_size == 0) c.intermediate_size = r.size("expert_feed_forward_length");
    c.attention_scale = 1.0 / std::sqrt(static_cast<double>(k));
  }
  build_layers(r, c);
  try {
    c.validate();
  } catch (const ConfigError& e) {
    throw FormatError(str_cat("GGUF model config: ", e.what(), " (file ", file.source(), ")"));
  }
  return c;
}

}  // namespace specdec::model
