#include "runner/model_weights.h"

#include <optional>

#include "common/errors.h"
#include "model/gguf.h"
#include "model/rope_scaling.h"
#include "quant/dequantize.h"
#include "quant/formats.h"
#include "runner/tensor_names.h"

namespace specdec::runner {

quant::WeightBytes weight_bytes(const model::GgufTensor& tensor) {
  return {tensor.name, tensor.type, tensor.dims, tensor.data,
          static_cast<size_t>(tensor.size_bytes)};
}

namespace {

class Loader {
 public:
  Loader(device::Device& dev, const model::GgufFile& file, const LoadProgress& progress)
      : dev_(dev), file_(file), progress_(progress), arena_(dev) {
    for (const auto& t : file.tensors()) total_ += static_cast<int64_t>(t.size_bytes);
  }

  quant::DeviceWeight matrix(const std::string& name) {
    const model::GgufTensor& t = file_.tensor(name);
    quant::DeviceWeight w = quant::upload_weight(dev_, weight_bytes(t), &arena_);
    done(t);
    return w;
  }

  // Several matrices stacked into one (quant::upload_weight_stacked) when they share a weight
  // type; nothing (and nothing uploaded) otherwise.
  std::optional<quant::DeviceWeight> stacked(const std::vector<std::string>& names, const std::string& name) {
    std::vector<const model::GgufTensor*> parts;
    for (const auto& n : names) parts.push_back(&file_.tensor(n));
    for (const auto* t : parts) {
      if (t->type != parts[0]->type) return std::nullopt;
    }
    std::vector<quant::WeightBytes> views;
    for (const auto* t : parts) views.push_back(weight_bytes(*t));
    quant::DeviceWeight w = quant::upload_weight_stacked(dev_, views, name, &arena_);
    for (const auto* t : parts) done(*t);
    return w;
  }

  // The whole tensor dequantized to f32 on the host.
  std::vector<float> floats(const std::string& name) {
    const model::GgufTensor& t = file_.tensor(name);
    std::vector<float> v(static_cast<size_t>(t.num_elements));
    quant::dequantize_row(t.type, t.data, v.data(), t.num_elements);
    return v;
  }

  // f32 data uploaded as one buffer; `sources` are counted as loaded.
  // (A plain buffer, kWorkspace: vectors and biases are small, and never took huge pages.)
  device::Buffer upload(const std::vector<float>& v, const std::vector<std::string>& sources) {
    device::Buffer b = dev_.allocate(v.size() * sizeof(float));
    dev_.write(b, v.data(), v.size() * sizeof(float));
    for (const auto& n : sources) done(file_.tensor(n), false);
    device_ += static_cast<int64_t>(v.size() * sizeof(float));
    return b;
  }

  // A tensor the model does not need (a KV-sharing layer's k and v): counted as done.
  void skip(const std::string& name) {
    if (const model::GgufTensor* t = file_.find_tensor(name)) done(*t, false);
  }

  // A 1-D f32 vector (norm weight, bias), dequantized on the host when stored otherwise;
  // empty when the tensor is absent.
  device::Buffer vector(const std::string& name) {
    const model::GgufTensor* t = file_.find_tensor(name);
    if (t == nullptr) return {};
    std::vector<float> v(static_cast<size_t>(t->num_elements));
    quant::dequantize_row(t->type, t->data, v.data(), t->num_elements);
    device::Buffer b = dev_.allocate(v.size() * sizeof(float));  // plain, as upload() above
    dev_.write(b, v.data(), v.size() * sizeof(float));
    done(*t);
    return b;
  }

  int64_t device_bytes() const { return device_; }

 private:
  // Progress over the file's bytes; device bytes only for what was uploaded as stored.
  void done(const model::GgufTensor& t, bool uploaded = true) {
    (void)file_.release_pages(t);  // the device holds its own copy: the file's pages need not stay resident
    done_ += static_cast<int64_t>(t.size_bytes);
    if (uploaded) device_ += static_cast<int64_t>(t.size_bytes);
    if (progress_) progress_(done_, total_);
  }

  device::Device& dev_;
  const model::GgufFile& file_;
  const LoadProgress& progress_;
  device::Arena arena_;  // the small matrices share huge pages
  int64_t total_ = 0;
  int64_t done_ = 0;
  int64_t device_ = 0;
};

std::string blk(int il, const char* name) { return str_cat("blk.", il, ".", name); }

}  // namespace

namespace {

std::vector<float> concat(std::initializer_list<const std::vector<float>*> parts) {
  std::vector<float> out;
  for (const auto* p : parts) out.insert(out.end(), p->begin(), p->end());
  return out;
}

void load_gqa_attention(Loader& load, const model::ModelConfig& c, int il, LayerWeights& l) {
  const std::string q = blk(il, "attn_q.weight"), k = blk(il, "attn_k.weight"),
                    v = blk(il, "attn_v.weight");
  const bool owns_kv = c.layers[il].kv_sharing_target < 0;
  if (c.fused_qkv) {  // stored stacked (Phi-3): the same rows upload_weight_stacked would give
    l.wqkv = load.matrix(blk(il, "attn_qkv.weight"));
    l.bqkv = load.vector(blk(il, "attn_qkv.bias"));
  } else if (owns_kv) {
    l.wqkv = load.stacked({q, k, v}, blk(il, "attn_qkv.weight"));
  }
  if (owns_kv && !l.wqkv) {
    l.wqk = load.stacked({q, k}, blk(il, "attn_qk.weight"));
    if (l.wqk) l.wv = load.matrix(v);
  }
  if (l.wqkv || l.wqk) {
    if (c.qkv_bias && !c.fused_qkv) {
      const auto bq = load.floats(blk(il, "attn_q.bias")), bk = load.floats(blk(il, "attn_k.bias")),
                 bv = load.floats(blk(il, "attn_v.bias"));
      l.bqkv = load.upload(concat({&bq, &bk, &bv}),
                           {blk(il, "attn_q.bias"), blk(il, "attn_k.bias"), blk(il, "attn_v.bias")});
    }
  } else {
    l.wq = load.matrix(q);
    l.bq = load.vector(blk(il, "attn_q.bias"));
    if (owns_kv) {
      l.wk = load.matrix(k);
      l.wv = load.matrix(v);
      l.bk = load.vector(blk(il, "attn_k.bias"));
      l.bv = load.vector(blk(il, "attn_v.bias"));
    } else {
      for (const char* n : {"attn_k.weight", "attn_v.weight", "attn_k.bias", "attn_v.bias"})
        load.skip(blk(il, n));
    }
  }
  l.wo = load.matrix(blk(il, "attn_output.weight"));
  l.bo = load.vector(blk(il, "attn_output.bias"));
  if (c.qk_norm) {
    l.q_norm = load.vector(blk(il, "attn_q_norm.weight"));
    l.k_norm = load.vector(blk(il, "attn_k_norm.weight"));
  }
}

// W_UK and W_UV per head, f32 (small: heads x kv_lora x (nope + v)), from attn_k_b / attn_v_b or
// from the older attn_kv_b [heads * (nope + v), kv_lora] (rows of a head: nope k rows, v rows).
void load_mla_up_projections(Loader& load, const model::GgufFile& file, const model::ModelConfig& c,
                             int il, LayerWeights& l) {
  const auto& m = c.mla;
  const int64_t heads = c.num_q_heads, lora = m.kv_lora_rank, nope = m.qk_nope_head_dim,
                dv = m.v_head_dim;
  const std::string kv_b = blk(il, "attn_kv_b.weight"), k_b = blk(il, "attn_k_b.weight"),
                    v_b = blk(il, "attn_v_b.weight");
  if (file.find_tensor(k_b) != nullptr && file.find_tensor(v_b) != nullptr) {
    l.w_uk = load.upload(load.floats(k_b), {k_b});  // [heads, lora, nope] already
    l.w_uv = load.upload(load.floats(v_b), {v_b});  // [heads, dv, lora] already
    load.skip(kv_b);
    return;
  }
  if (file.find_tensor(kv_b) == nullptr) {
    throw FormatError(str_cat("GGUF tensors '", k_b, "' and '", v_b, "' (or the older '", kv_b,
                              "') are missing; an MLA layer needs them (file ", file.source(), ")"));
  }
  const std::vector<float> w = load.floats(kv_b);  // [heads * (nope + dv), lora]
  std::vector<float> uk(static_cast<size_t>(heads * lora * nope)), uv(static_cast<size_t>(heads * dv * lora));
  for (int64_t h = 0; h < heads; ++h) {
    const float* head = w.data() + h * (nope + dv) * lora;
    for (int64_t j = 0; j < nope; ++j)
      for (int64_t r = 0; r < lora; ++r) uk[static_cast<size_t>((h * lora + r) * nope + j)] = head[j * lora + r];
    for (int64_t v = 0; v < dv; ++v)
      for (int64_t r = 0; r < lora; ++r)
        uv[static_cast<size_t>((h * dv + v) * lora + r)] = head[(nope + v) * lora + r];
  }
  l.w_uk = load.upload(uk, {kv_b});
  l.w_uv = load.upload(uv, {});
  load.skip(k_b);
  load.skip(v_b);
}

void load_mla_attention(Loader& load, const model::GgufFile& file, const model::ModelConfig& c,
                        int il, LayerWeights& l) {
  if (c.mla.q_lora_rank > 0) {
    l.wq_a = load.matrix(blk(il, "attn_q_a.weight"));
    l.q_a_norm = load.vector(blk(il, "attn_q_a_norm.weight"));
    l.wq = load.matrix(blk(il, "attn_q_b.weight"));
  } else {
    l.wq = load.matrix(blk(il, "attn_q.weight"));
  }
  l.wkv_a = load.matrix(blk(il, "attn_kv_a_mqa.weight"));
  l.kv_a_norm = load.vector(blk(il, "attn_kv_a_norm.weight"));
  load_mla_up_projections(load, file, c, il, l);
  l.wo = load.matrix(blk(il, "attn_output.weight"));
}

void load_ffn(Loader& load, const model::ModelConfig& c, int il, LayerWeights& l) {
  const std::string gate = blk(il, "ffn_gate.weight"), up = blk(il, "ffn_up.weight");
  if (c.fused_gate_up) {  // Phi-3: ffn_up is [gate; up] as gate_up is stacked
    l.gate_up = load.matrix(up);
    l.down = load.matrix(blk(il, "ffn_down.weight"));
    return;
  }
  l.gate_up = load.stacked({gate, up}, blk(il, "ffn_gate_up.weight"));
  if (!l.gate_up) {
    l.gate = load.matrix(gate);
    l.up = load.matrix(up);
  }
  l.down = load.matrix(blk(il, "ffn_down.weight"));
}

// YaRN's mscale (and rope.scaling.attn_factor) is applied as mscale^2 on the softmax scale, which
// equals scaling cos and sin only when every dim of q and k rotates; Gemma 3's local layers keep
// their own frequencies, which llama.cpp scales differently under YaRN.
void check_rope_scaling(const model::GgufFile& file, const model::ModelConfig& c) {
  const std::string what = str_cat("rope scaling '", c.rope_scaling_type, "' (mscale ",
                                   model::rope_mscale(c), ") of ", file.source());
  const bool partial = c.architecture == "deepseek2" || c.rope_dim != c.head_size;
  if (model::rope_mscale(c) != 1.0 && partial) {
    throw UnsupportedError(str_cat(what, ": a cos / sin scale with partial rotation (rope_dim ",
                                   c.rope_dim, " < head_size ", c.head_size, ", or MLA) is not "
                                   "supported; supported: YaRN and attn_factor on fully rotated "
                                   "heads (llama, qwen2, qwen3, phi3)"));
  }
  if (c.rope_scaling_type == "yarn" && c.rope_base_local > 0) {
    throw UnsupportedError(str_cat(what, ": YaRN with local layers of their own RoPE base (gemma3) "
                                   "is not supported; supported: none, linear there"));
  }
}

}  // namespace

void check_loadable(const model::GgufFile& file, const model::ModelConfig& config) {
  check_rope_scaling(file, config);
  for (int il = 0; il < config.num_layers && config.fused_qkv; ++il) {
    if (config.layers[il].kv_sharing_target >= 0) {
      throw UnsupportedError(str_cat("layer ", il, " of ", file.source(), " reads another "
                                     "layer's KV but holds a fused attn_qkv; supported: KV sharing "
                                     "with separate attn_q / attn_k / attn_v"));
    }
  }
  for (int il = 0; il < config.num_layers; ++il) {
    if (file.find_tensor(blk(il, "ffn_gate_inp.weight")) != nullptr) {
      throw UnsupportedError(str_cat("layer ", il, " of ", file.source(), " is a mixture-of-experts "
                                     "FFN (", config.num_experts, " experts); specdec runs dense FFNs only"));
    }
  }
  check_model_tensors(file, config);
  std::vector<TensorRef> refs = global_tensors(config);
  for (int il = 0; il < config.num_layers; ++il) {
    for (auto& r : layer_tensors(config, il)) refs.push_back(std::move(r));
  }
  for (const TensorRef& r : refs) {
    const model::GgufTensor* t = find(file, r);
    if (t != nullptr && !quant::is_weight_type_supported(t->type)) {
      throw UnsupportedError(str_cat("tensor '", t->name, "' of ", file.source(), " is stored as ",
                                     quant::weight_type_name(t->type), ", a weight format specdec "
                                     "cannot read (supported: specdec.quant.supported_weight_types())"));
    }
  }
}

ModelWeights load_weights(device::Device& dev, const model::GgufFile& file,
                          const model::ModelConfig& config, const LoadProgress& progress) {
  check_loadable(file, config);
  Loader load(dev, file, progress);
  ModelWeights w;
  if (config.is_dflash()) {
    w.dflash_fc = load.matrix("dflash_fc.weight");
    w.dflash_hidden_norm = load.vector("dflash_hidden_norm.weight");
  } else {
    w.token_embd = load.matrix("token_embd.weight");
    if (!config.tied_embeddings) w.output = load.matrix("output.weight");
  }
  w.output_norm = load.vector("output_norm.weight");
  for (int il = 0; il < config.num_layers; ++il) {
    LayerWeights l;
    l.attn_norm = load.vector(blk(il, "attn_norm.weight"));
    if (config.layers[il].attention == model::LayerAttention::kMla) {
      load_mla_attention(load, file, config, il, l);
    } else {
      load_gqa_attention(load, config, il, l);
    }
    if (config.post_norms) {
      l.post_attn_norm = load.vector(blk(il, "post_attention_norm.weight"));
      l.post_ffn_norm = load.vector(blk(il, "post_ffw_norm.weight"));
    }
    l.ffn_norm = load.vector(blk(il, "ffn_norm.weight"));
    load_ffn(load, config, il, l);
    w.layers.push_back(std::move(l));
  }
  w.device_bytes = load.device_bytes();
  return w;
}

}  // namespace specdec::runner
