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

void gqa_attention(const LayerStep& st, int il, const LayerWeights& w) {
  const model::ModelConfig& c = st.config;
  StepBuffers& s = st.s;
  ocl::Context& ctx = st.ctx;
  const int64_t t = st.num_tokens;
  const float eps = static_cast<float>(c.norm_eps), off = static_cast<float>(c.norm_weight_offset);
  const bool owns_kv = c.layers[il].kv_sharing_target < 0;
  const int q = c.num_q_heads * c.head_size, k = c.num_kv_heads * c.head_size,
            v = c.num_kv_heads * c.head_size_v;

  const int rope_index = s.layer_rope[il];
  bool normed = false, rotated = false;
  const ocl::Buffer* query = &s.qb;
  kv::KvRows k_rows{&s.kb, 0, 0}, v_rows{&s.vb, 0, 0};
  quant::quantize_activations_of(ctx, s.h, t, c.hidden_size, s.xq);
  const float scale = c.attention_scale > 0 ? static_cast<float>(c.attention_scale)
                                            : 1.0f / std::sqrt(static_cast<float>(c.head_size));
  const LayerBinding& b = st.layers[static_cast<size_t>(il)];
  // q | k | v rows [t, q + k + v] into s.fused: one launch (wqkv), or two (wqk, then wv)
  const bool stacked = w.wqkv.has_value() || w.wqk.has_value();
  auto project_qkv = [&] {
    if (w.wqkv) {
      quant::matmul(ctx, *w.wqkv, s.h, s.xq, t, s.fused);
    } else {
      quant::matmul(ctx, *w.wqk, s.h, s.xq, t, s.fused, {0, q + k + v});
      quant::matmul(ctx, w.wv, s.h, s.xq, t, s.fused, {q + k, q + k + v});
    }
  };
  if (stacked && !c.qk_norm && owns_kv && c.head_size == c.head_size_v && fused_qkv_epilogue() &&
      (rope_index < 0 || s.rope_tables[rope_index].rope_dim() == c.head_size) &&
      kv::qkv_epilogue_fits(*b.view, c.num_kv_heads, c.head_size)) {
    // two launches before attention (three with wqk + wv): the q | k | v matmul, then bias + RoPE
    // + the K/V cache write + q for attention in one epilogue (kernels/fused_qkv.cl)
    project_qkv();
    kv::QkvEpilogue e;
    e.x = &s.fused;
    e.x_stride = q + k + v;
    e.bias = present(w.bqkv) ? &w.bqkv : nullptr;
    e.positions = &s.positions;
    if (rope_index >= 0) {
      e.inv_freq = &s.rope_tables[rope_index].buffer();
      e.neox = s.rope_tables[rope_index].type() == model::RopeType::kNeox;
    }
    e.q_out = &s.qb;
    e.q_stride = q;
    e.q_heads = c.num_q_heads;
    e.kv_heads = c.num_kv_heads;
    e.head_size = c.head_size;
    const attn::AttentionMetadata& md = st.metadata[static_cast<size_t>(b.attention_group)];
    kv::kv_cache_write_qkv(ctx, *b.tensor, *b.view, e, md.slot_mapping, static_cast<int>(t));
    write_kv_and_attend(st, il, nullptr, nullptr, s.qb, scale, s.attn, &w.wo);  // K/V written
    project(st, w.wo, s.attn, s.proj);
    if (present(w.bo)) ops::add_bias(ctx, s.proj, w.bo, t, c.hidden_size);
    return;
  }
  if (stacked) {  // one launch for q, k and v (two with wqk + wv; and one for their biases)
    project_qkv();
    if (present(w.bqkv)) ops::add_bias(ctx, s.fused, w.bqkv, t, q + k + v);
    if (t == 1) {  // one token (decode): q, k and v lie contiguous in the fused row, no split
      if (c.qk_norm) {
        ops::rms_norm(ctx, s.fused, w.q_norm, s.fused, c.num_q_heads, c.head_size, eps, off);
        ops::rms_norm(ctx, ops::Slice(s.fused, q), w.k_norm, ops::Slice(s.fused, q), c.num_kv_heads,
                      c.head_size, eps, off);
        normed = true;
      }
      query = &s.fused;
      k_rows = {&s.fused, q, 0};
      v_rows = {&s.fused, q + k, 0};
    }
    if ((t == 1 || !c.qk_norm) && rope_index >= 0) {  // q and k heads adjacent: one launch
      ops::rope(ctx, s.fused, s.positions, t, c.num_q_heads + c.num_kv_heads, c.head_size,
                s.rope_tables[rope_index], q + k + v);
      rotated = true;
    }
    if (t > 1) ops::split_columns(ctx, s.fused, s.qb, s.kb, s.vb, t, q, k, v);
  } else {
    quant::matmul(ctx, w.wq, s.h, s.xq, t, s.qb);
    if (present(w.bq)) ops::add_bias(ctx, s.qb, w.bq, t, q);
    if (owns_kv) {
      quant::matmul(ctx, w.wk, s.h, s.xq, t, s.kb);
      quant::matmul(ctx, w.wv, s.h, s.xq, t, s.vb);
      if (present(w.bk)) ops::add_bias(ctx, s.kb, w.bk, t, k);
      if (present(w.bv)) ops::add_bias(ctx, s.vb, w.bv, t, v);
    }
  }
  if (c.qk_norm && !normed) {
    ops::rms_norm(ctx, s.qb, w.q_norm, s.qb, t * c.num_q_heads, c.head_size, eps, off);
    if (owns_kv) ops::rms_norm(ctx, s.kb, w.k_norm, s.kb, t * c.num_kv_heads, c.head_size, eps, off);
  }
  if (rope_index >= 0 && !rotated) {
    const ops::RopeTable& table = s.rope_tables[rope_index];
    ops::rope(ctx, s.qb, s.positions, t, c.num_q_heads, c.head_size, table);
    if (owns_kv) ops::rope(ctx, s.kb, s.positions, t, c.num_kv_heads, c.head_size, table);
  }
  write_kv_and_attend(st, il, owns_kv ? &k_rows : nullptr, &v_rows, *query, scale, s.attn, &w.wo);

  project(st, w.wo, s.attn, s.proj);
  if (present(w.bo)) ops::add_bias(ctx, s.proj, w.bo, t, c.hidden_size);
}

}  // namespace specdec::runner
