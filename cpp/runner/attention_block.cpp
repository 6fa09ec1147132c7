// The GQA attention block (runner/blocks.h): llama, qwen2 (QKV bias), qwen3 / gemma3 (QK norm),
// sliding-window, chunked-local and KV-sharing layers differ only in the config and in the
// layer's KV-cache group and attention backend.
#include <cmath>
#include <cstdlib>
#include <string>

#include "common/errors.h"
#include "kv/cache_ops.h"
#include "ops/elementwise.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "ops/rows.h"
#include "runner/blocks.h"

namespace specdec::runner {

bool fused_qkv_epilogue() {
  static const bool on = [] {
    const char* env = std::getenv("SPECDEC_FUSED_QKV");
    return env == nullptr || std::string(env) != "0";
  }();
  return on;
}

namespace {

// A layer's q, k and v widths (elements per token).
struct QkvWidths {
  int q, k, v;
};

// What the q / k / v projections leave for the attention: the query, the new K and V rows, and
// whether QK norm and RoPE were already applied.
struct Projected {
  const device::Buffer* query;
  kv::KvRows k_rows, v_rows;
  bool normed = false, rotated = false;
};

// q | k | v rows [t, q + k + v] into s.fused: one launch (wqkv), or two (wqk, then wv).
void project_qkv(const LayerStep& st, const LayerWeights& w, QkvWidths n) {
  StepBuffers& s = st.s;
  const int row = n.q + n.k + n.v;
  if (w.wqkv) {
    quant::matmul_reusing(st.dev, *w.wqkv, s.h, s.xq, st.num_tokens, s.fused);
  } else {
    quant::matmul_reusing(st.dev, *w.wqk, s.h, s.xq, st.num_tokens, s.fused, {0, row});
    quant::matmul_reusing(st.dev, w.wv, s.h, s.xq, st.num_tokens, s.fused, {n.q + n.k, row});
  }
}

bool stacked_qkv(const LayerWeights& w) { return w.wqkv.has_value() || w.wqk.has_value(); }

// Whether the layer takes the one-launch epilogue after its q | k | v matmul.
bool fused_epilogue_fits(const LayerStep& st, int il, const LayerWeights& w) {
  const model::ModelConfig& c = st.config;
  const int rope_index = st.s.layer_rope[il];
  return stacked_qkv(w) && !c.qk_norm && c.layers[il].kv_sharing_target < 0 &&
         c.head_size == c.head_size_v && fused_qkv_epilogue() &&
         (rope_index < 0 || st.s.rope_tables[rope_index].rope_dim() == c.head_size) &&
         kv::qkv_epilogue_fits(*st.layers[static_cast<size_t>(il)].view, c.num_kv_heads, c.head_size);
}

// Two launches before attention (three with wqk + wv): the q | k | v matmul, then bias + RoPE + the
// K/V cache write + q for attention in one epilogue (kernels/fused_qkv.cl); then attention.
void attend_fused(const LayerStep& st, int il, const LayerWeights& w, QkvWidths n, float scale) {
  const model::ModelConfig& c = st.config;
  StepBuffers& s = st.s;
  const int rope_index = s.layer_rope[il];
  const LayerBinding& b = st.layers[static_cast<size_t>(il)];
  project_qkv(st, w, n);
  kv::QkvEpilogue e;
  e.x = &s.fused;
  e.x_stride = n.q + n.k + n.v;
  e.bias = present(w.bqkv) ? &w.bqkv : nullptr;
  e.positions = &s.positions;
  if (rope_index >= 0) {
    e.inv_freq = &s.rope_tables[rope_index].buffer();
    e.neox = s.rope_tables[rope_index].type() == model::RopeType::kNeox;
  }
  e.q_out = &s.qb;
  e.q_stride = n.q;
  e.q_heads = c.num_q_heads;
  e.kv_heads = c.num_kv_heads;
  e.head_size = c.head_size;
  const attn::AttentionMetadata& md = st.metadata[static_cast<size_t>(b.attention_group)];
  kv::kv_cache_write_qkv(st.dev, *b.tensor, *b.view, e, md.slot_mapping, static_cast<int>(st.num_tokens));
  write_kv_and_attend(st, il, nullptr, nullptr, s.qb, scale, s.attn, &w.wo);  // K/V written
}

// One launch for q, k and v (two with wqk + wv; and one for their biases); a decode token reads
// q, k and v in place in the fused row, a longer step splits it.
Projected project_stacked(const LayerStep& st, int il, const LayerWeights& w, QkvWidths n) {
  const model::ModelConfig& c = st.config;
  StepBuffers& s = st.s;
  device::Device& dev = st.dev;
  const int64_t t = st.num_tokens;
  const float eps = static_cast<float>(c.norm_eps), off = static_cast<float>(c.norm_weight_offset);
  const int rope_index = s.layer_rope[il];
  Projected p{&s.qb, {&s.kb, 0, 0}, {&s.vb, 0, 0}};
  project_qkv(st, w, n);
  if (present(w.bqkv)) ops::add_bias(dev, s.fused, w.bqkv, t, n.q + n.k + n.v);
  if (t == 1) {  // one token (decode): q, k and v lie contiguous in the fused row, no split
    if (c.qk_norm) {
      ops::rms_norm(dev, s.fused, w.q_norm, s.fused, c.num_q_heads, c.head_size, eps, off);
      ops::rms_norm(dev, ops::Slice(s.fused, n.q), w.k_norm, ops::Slice(s.fused, n.q), c.num_kv_heads,
                    c.head_size, eps, off);
      p.normed = true;
    }
    p.query = &s.fused;
    p.k_rows = {&s.fused, n.q, 0};
    p.v_rows = {&s.fused, n.q + n.k, 0};
  }
  if ((t == 1 || !c.qk_norm) && rope_index >= 0) {  // q and k heads adjacent: one launch
    ops::rope(dev, s.fused, s.positions, t, c.num_q_heads + c.num_kv_heads, c.head_size,
              s.rope_tables[rope_index], n.q + n.k + n.v);
    p.rotated = true;
  }
  if (t > 1) ops::split_columns(dev, s.fused, s.qb, s.kb, s.vb, t, n.q, n.k, n.v);
  return p;
}

// q, k and v each by its own matmul and bias (k and v not at all in a KV-sharing layer).
Projected project_separate(const LayerStep& st, int il, const LayerWeights& w, QkvWidths n) {
  StepBuffers& s = st.s;
  device::Device& dev = st.dev;
  const int64_t t = st.num_tokens;
  quant::matmul_reusing(dev, w.wq, s.h, s.xq, t, s.qb);
  if (present(w.bq)) ops::add_bias(dev, s.qb, w.bq, t, n.q);
  if (st.config.layers[il].kv_sharing_target < 0) {
    quant::matmul_reusing(dev, w.wk, s.h, s.xq, t, s.kb);
    quant::matmul_reusing(dev, w.wv, s.h, s.xq, t, s.vb);
    if (present(w.bk)) ops::add_bias(dev, s.kb, w.bk, t, n.k);
    if (present(w.bv)) ops::add_bias(dev, s.vb, w.bv, t, n.v);
  }
  return {&s.qb, {&s.kb, 0, 0}, {&s.vb, 0, 0}};
}

}  // namespace

void gqa_write_context(const LayerStep& st, int il, const LayerWeights& w) {
  const model::ModelConfig& c = st.config;
  StepBuffers& s = st.s;
  device::Device& dev = st.dev;
  const int64_t t = st.num_tokens;
  SPECDEC_CHECK(c.layers[il].kv_sharing_target < 0, str_cat("layers.", il), "a KV-sharing layer",
               "a layer with its own cache (a DFlash drafter's context)");
  const QkvWidths n{c.num_q_heads * c.head_size, c.num_kv_heads * c.head_size, c.num_kv_heads * c.head_size_v};
  if (stacked_qkv(w)) {  // q comes along (unused)
    project_qkv(st, w, n);
    if (present(w.bqkv)) ops::add_bias(dev, s.fused, w.bqkv, t, n.q + n.k + n.v);
    ops::split_columns(dev, s.fused, s.qb, s.kb, s.vb, t, n.q, n.k, n.v);
  } else {
    quant::matmul_reusing(dev, w.wk, s.h, s.xq, t, s.kb);
    quant::matmul_reusing(dev, w.wv, s.h, s.xq, t, s.vb);
    if (present(w.bk)) ops::add_bias(dev, s.kb, w.bk, t, n.k);
    if (present(w.bv)) ops::add_bias(dev, s.vb, w.bv, t, n.v);
  }
  if (c.qk_norm) {
    const float eps = static_cast<float>(c.norm_eps), off = static_cast<float>(c.norm_weight_offset);
    ops::rms_norm(dev, s.kb, w.k_norm, s.kb, t * c.num_kv_heads, c.head_size, eps, off);
  }
  const int rope_index = s.layer_rope[il];
  if (rope_index >= 0) ops::rope(dev, s.kb, s.positions, t, c.num_kv_heads, c.head_size, s.rope_tables[rope_index]);
  const LayerBinding& b = st.layers[static_cast<size_t>(il)];
  const attn::AttentionMetadata& md = st.metadata[static_cast<size_t>(b.attention_group)];
  const kv::KvRows k{&s.kb, 0, 0}, v{&s.vb, 0, 0};
  kv::kv_cache_write_kv(dev, *b.tensor, *b.view, k, v, md.slot_mapping, static_cast<int>(t));
}

void gqa_attention(const LayerStep& st, int il, const LayerWeights& w) {
  const model::ModelConfig& c = st.config;
  StepBuffers& s = st.s;
  device::Device& dev = st.dev;
  const int64_t t = st.num_tokens;
  const bool owns_kv = c.layers[il].kv_sharing_target < 0;
  const QkvWidths n{c.num_q_heads * c.head_size, c.num_kv_heads * c.head_size,
                    c.num_kv_heads * c.head_size_v};
  // YaRN's mscale multiplies cos and sin of q and k: q . k by mscale^2 (every dim rotates).
  const float qk_scale = s.layer_rope[il] >= 0 ? s.rope_qk_scale[s.layer_rope[il]] : 1.0f;
  const float base_scale = c.attention_scale > 0
                               ? static_cast<float>(c.attention_scale)
                               : 1.0f / std::sqrt(static_cast<float>(c.head_size));
  const float scale = qk_scale * base_scale;
  if (fused_epilogue_fits(st, il, w)) {
    attend_fused(st, il, w, n, scale);
  } else {
    Projected p = stacked_qkv(w) ? project_stacked(st, il, w, n) : project_separate(st, il, w, n);
    const float eps = static_cast<float>(c.norm_eps), off = static_cast<float>(c.norm_weight_offset);
    if (c.qk_norm && !p.normed) {
      ops::rms_norm(dev, s.qb, w.q_norm, s.qb, t * c.num_q_heads, c.head_size, eps, off);
      if (owns_kv) ops::rms_norm(dev, s.kb, w.k_norm, s.kb, t * c.num_kv_heads, c.head_size, eps, off);
    }
    const int rope_index = s.layer_rope[il];
    if (rope_index >= 0 && !p.rotated) {
      const ops::RopeTable& table = s.rope_tables[rope_index];
      ops::rope(dev, s.qb, s.positions, t, c.num_q_heads, c.head_size, table);
      if (owns_kv) ops::rope(dev, s.kb, s.positions, t, c.num_kv_heads, c.head_size, table);
    }
    write_kv_and_attend(st, il, owns_kv ? &p.k_rows : nullptr, &p.v_rows, *p.query, scale, s.attn, &w.wo);
  }
  project(st, w.wo, s.attn, s.proj);
  if (present(w.bo)) ops::add_bias(dev, s.proj, w.bo, t, c.hidden_size);
}

}  // namespace specdec::runner
