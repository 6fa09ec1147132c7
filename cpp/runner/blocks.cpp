// StepBuffers, the projection helper and the gated FFN block (runner/blocks.h).
#include <algorithm>
#include <cstdlib>
#include <string>

#include "common/errors.h"
#include "ops/elementwise.h"
#include "quant/formats.h"
#include "ops/rows.h"
#include "runner/blocks.h"

namespace specdec::runner {

StepBuffers::StepBuffers(device::Device& dev, const model::ModelConfig& c, int64_t t, int64_t max_logits) {
  auto f32 = [&](int64_t n) { return dev.allocate(static_cast<size_t>(std::max<int64_t>(n, 1)) * 4); };
  const int64_t heads = c.num_q_heads;
  int64_t q = heads * c.head_size, k = int64_t{c.num_kv_heads} * c.head_size;
  int64_t v = int64_t{c.num_kv_heads} * c.head_size_v, o = heads * c.head_size_v;
  int64_t fused = std::max(q + k + v, 2 * int64_t{c.intermediate_size});
  int64_t o_v = 0;
  if (c.architecture == "deepseek2") {
    const auto& m = c.mla;
    const int64_t row = int64_t{m.kv_lora_rank} + m.qk_rope_head_dim;
    fused = std::max({fused, heads * (m.qk_nope_head_dim + m.qk_rope_head_dim), row, int64_t{m.q_lora_rank}});
    q = std::max(q, heads * row);
    k = std::max(k, int64_t{m.kv_lora_rank});
    v = std::max(v, int64_t{m.qk_rope_head_dim});
    // attn holds the raw queries first ([t, heads, nope + rope], rotated in place from offset
    // nope: the rope op's span then ends nope elements past the last head), later the latent
    // output [t, heads, lora].
    o = std::max({o, heads * m.kv_lora_rank, heads * (m.qk_nope_head_dim + m.qk_rope_head_dim)});
    o_v = heads * m.v_head_dim;
  }
  x = f32(t * c.hidden_size);
  h = f32(t * c.hidden_size);
  proj = f32(t * c.hidden_size);
  this->fused = f32(t * fused);
  qb = f32(t * q);
  kb = f32(t * k);
  vb = f32(t * v);
  attn = f32(t * o + (c.architecture == "deepseek2" ? c.mla.qk_nope_head_dim : 0));
  attn_v = f32(t * o_v);
  gate = f32(t * c.intermediate_size);
  up = f32(t * c.intermediate_size);
  xs = f32(max_logits * c.hidden_size);
  logits = f32(max_logits * c.vocab_size);
  reduced = f32(6 * max_logits);  // two parts with extra logit tokens (ModelRunner)
}

std::vector<LayerBinding> bind_layers(const model::ModelConfig& c, const attn::AttentionSetup& setup,
                                      const kv::KvCacheAllocation& cache) {
  std::vector<LayerBinding> out;
  for (int il = 0; il < c.num_layers; ++il) {
    const std::string name = str_cat("layers.", il);
    LayerBinding b;
    b.attention_group = setup.layer_to_attention_group.at(name);
    b.group = &setup.attention_groups[static_cast<size_t>(b.attention_group)];
    b.view = &cache.view(name);
    b.tensor = &cache.tensor_of(name);
    b.params = attn::AttentionLayerParams::from_spec(b.group->spec, c.num_q_heads, 1.0f);
    b.params.logit_softcap = static_cast<float>(c.attn_logit_softcap);
    out.push_back(b);
  }
  return out;
}

namespace {

bool fused_attention_quantisation() {
  static const bool on = [] {
    const char* env = std::getenv("SPECDEC_FUSED_ATTN_QUANT");
    return env == nullptr || std::string(env) != "0";
  }();
  return on;
}

}  // namespace

void write_kv_and_attend(const LayerStep& st, int il, const kv::KvRows* k, const kv::KvRows* v,
                         const device::Buffer& query, float scale, device::Buffer& out,
                         const quant::DeviceWeight* then_project) {
  const LayerBinding& b = st.layers[static_cast<size_t>(il)];
  const attn::AttentionMetadata& md = st.metadata[static_cast<size_t>(b.attention_group)];
  if (k != nullptr) kv::kv_cache_write_kv(st.dev, *b.tensor, *b.view, *k, *v, md.slot_mapping, static_cast<int>(st.num_tokens));
  attn::AttentionLayerParams params = b.params;
  params.scale = scale;
  // The output's int8 activations for the projection after it, written by the attention kernel.
  // s.xq is taken over only now: the matmuls that read the layer input's quantisation from it
  // were enqueued before, so they run first (the ordering contract's rule 1, device/device.h; a
  // regrown xq buffer stays alive for them by its rule 2).
  StepBuffers& s = st.s;
  const int64_t width = int64_t{params.num_q_heads} * params.head_size_v;
  const int scale_block = then_project != nullptr ? quant::activation_scale_block(then_project->type()) : 0;
  const bool quantise = scale_block != 0 && b.group->backend->capabilities().quantized_output &&
                        fused_attention_quantisation() && params.head_size_v % scale_block == 0 &&
                        then_project->cols() == width &&
                        quant::prepare_activations(st.dev, st.num_tokens, width, s.xq, scale_block);
  if (quantise) {
    s.xq_out = {&s.xq.q8, &s.xq.q16, &s.xq.rec, scale_block};
    params.quantized_output = &s.xq_out;
  }
  b.group->backend->forward(st.dev, md, params, *b.view, *b.tensor, query, out);
  // the backend wrote out and its quantisation into s.xq in the same launch
  if (quantise) quant::set_source(s.xq, out);
}

void project(const LayerStep& st, const quant::DeviceWeight& w, const device::Buffer& x, device::Buffer& y) {
  quant::matmul_reusing(st.dev, w, x, st.s.xq, st.num_tokens, y);
}

void gated_ffn(const LayerStep& st, const LayerWeights& w) {
  StepBuffers& s = st.s;
  device::Device& dev = st.dev;
  const int64_t t = st.num_tokens;
  const int ff = st.config.intermediate_size;
  // the activation also quantises its output for the down projection (one launch fewer); s.xq
  // is reused for it only after the gate / up matmuls were enqueued, so they read it before the
  // activation overwrites it (the ordering contract's rule 1, device/device.h)
  auto quantize_gate = [&]() -> const ops::QuantizedOut* {
    const int scale_block = quant::activation_scale_block(w.down.type());
    if (scale_block == 0 || !quant::prepare_activations(dev, t, ff, s.xq, scale_block)) {
      return nullptr;
    }
    s.xq_out = {&s.xq.q8, &s.xq.q16, &s.xq.rec, scale_block};
    return &s.xq_out;
  };
  const ops::QuantizedOut* q = nullptr;
  if (w.gate_up) {  // one launch for both, then the activation reads the halves where they lie
    quant::matmul_reusing(dev, *w.gate_up, s.h, s.xq, t, s.fused);
    q = quantize_gate();
    ops::gated_activation(dev, s.fused, ops::Slice(s.fused, ff), s.gate, t, ff, st.config.activation,
                          2 * int64_t{ff}, q);
  } else {
    quant::matmul_reusing(dev, w.gate, s.h, s.xq, t, s.gate);
    quant::matmul_reusing(dev, w.up, s.h, s.xq, t, s.up);
    q = quantize_gate();
    ops::gated_activation(dev, s.gate, s.up, s.gate, t, ff, st.config.activation, 0, q);
  }
  // with q, the activation wrote s.gate and its quantisation into s.xq in the same launch;
  // without, xq holds no quantisation of s.gate (the down projection makes its own if it needs one)
  if (q != nullptr) {
    quant::set_source(s.xq, s.gate);
  } else {
    quant::clear_source(s.xq);
  }
  project(st, w.down, s.gate, s.proj);
}

}  // namespace specdec::runner
