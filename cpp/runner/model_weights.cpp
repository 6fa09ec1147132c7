#include "runner/model_weights.h"

#include "common/errors.h"
#include "model/gguf.h"
#include "quant/dequantize.h"
#include "runner/tensor_names.h"

namespace specdec::runner {
namespace {

class Loader {
 public:
  Loader(ocl::Context& ctx, const model::GgufFile& file, const LoadProgress& progress)
      : ctx_(ctx), file_(file), progress_(progress) {
    for (const auto& t : file.tensors()) total_ += static_cast<int64_t>(t.size_bytes);
  }

  quant::DeviceWeight matrix(const std::string& name) {
    const model::GgufTensor& t = file_.tensor(name);
    quant::DeviceWeight w = quant::upload_weight(ctx_, t);
    done(t);
    return w;
  }

  // A 1-D f32 vector (norm weight, bias), dequantized on the host when stored otherwise;
  // empty when the tensor is absent.
  ocl::Buffer vector(const std::string& name) {
    const model::GgufTensor* t = file_.find_tensor(name);
    if (t == nullptr) return {};
    std::vector<float> v(static_cast<size_t>(t->num_elements));
    quant::dequantize_row(t->type, t->data, v.data(), t->num_elements);
    ocl::Buffer b(ctx_, v.size() * sizeof(float));
    b.write(ctx_, v.data(), v.size() * sizeof(float));
    done(*t);
    return b;
  }

  int64_t bytes_done() const { return done_; }

 private:
  void done(const model::GgufTensor& t) {
    done_ += static_cast<int64_t>(t.size_bytes);
    if (progress_) progress_(done_, total_);
  }

  ocl::Context& ctx_;
  const model::GgufFile& file_;
  const LoadProgress& progress_;
  int64_t total_ = 0;
  int64_t done_ = 0;
};

std::string blk(int il, const char* name) { return str_cat("blk.", il, ".", name); }

}  // namespace

ModelWeights load_weights(ocl::Context& ctx, const model::GgufFile& file,
                          const model::ModelConfig& config, const LoadProgress& progress) {
  if (config.architecture == "deepseek2") {
    throw UnsupportedError("the deepseek2 (MLA) forward is not implemented yet; supported: llama, "
                           "qwen2, qwen3, gemma3");
  }
  check_model_tensors(file, config);
  Loader load(ctx, file, progress);
  ModelWeights w;
  w.token_embd = load.matrix("token_embd.weight");
  if (!config.tied_embeddings) w.output = load.matrix("output.weight");
  w.output_norm = load.vector("output_norm.weight");
  for (int il = 0; il < config.num_layers; ++il) {
    LayerWeights l;
    l.attn_norm = load.vector(blk(il, "attn_norm.weight"));
    l.wq = load.matrix(blk(il, "attn_q.weight"));
    l.wk = load.matrix(blk(il, "attn_k.weight"));
    l.wv = load.matrix(blk(il, "attn_v.weight"));
    l.wo = load.matrix(blk(il, "attn_output.weight"));
    l.bq = load.vector(blk(il, "attn_q.bias"));
    l.bk = load.vector(blk(il, "attn_k.bias"));
    l.bv = load.vector(blk(il, "attn_v.bias"));
    l.bo = load.vector(blk(il, "attn_output.bias"));
    if (config.qk_norm) {
      l.q_norm = load.vector(blk(il, "attn_q_norm.weight"));
      l.k_norm = load.vector(blk(il, "attn_k_norm.weight"));
    }
    if (config.post_norms) {
      l.post_attn_norm = load.vector(blk(il, "post_attention_norm.weight"));
      l.post_ffn_norm = load.vector(blk(il, "post_ffw_norm.weight"));
    }
    l.ffn_norm = load.vector(blk(il, "ffn_norm.weight"));
    l.gate = load.matrix(blk(il, "ffn_gate.weight"));
    l.up = load.matrix(blk(il, "ffn_up.weight"));
    l.down = load.matrix(blk(il, "ffn_down.weight"));
    w.layers.push_back(std::move(l));
  }
  w.device_bytes = load.bytes_done();
  return w;
}

}  // namespace specdec::runner
