// The MLA attention block (runner/blocks.h), DeepSeek-V2 style, in absorbed form:
//   c_kv, k_rope = split(h . W_KV_A); c_kv = rms_norm(c_kv); k_rope = rope(k_rope)
//   q = h . W_Q (or rms_norm(h . W_Q_A) . W_Q_B), per head [q_nope, q_rope]; q_rope = rope(q_rope)
//   query[h] = [W_UK[h] q_nope[h], q_rope[h]]       (W_UK[h]: [kv_lora, nope])
//   latent[h] = attention over the cached rows [c_kv, k_rope] (OCL_MLA: one row per token for all
//               heads, scale 1 / sqrt(nope + rope) as in the decompressed form)
//   out = concat_h(W_UV[h] latent[h]) . W_O          (W_UV[h]: [v, kv_lora])
// q_nope . k_nope = q_nope . (W_UK^T c_kv) = (W_UK q_nope) . c_kv, so this equals attention with
// per-head decompressed K and V, while the cache holds kv_lora + rope values per token.
#include <cmath>

#include "common/errors.h"
#include "kv/cache_ops.h"
#include "ops/heads.h"
#include "ops/norm.h"
#include "ops/rope.h"
#include "ops/rows.h"
#include "runner/blocks.h"

namespace specdec::runner {

void mla_attention(const LayerStep& st, int il, const LayerWeights& w) {
  const model::ModelConfig& c = st.config;
  const model::MlaConfig& m = c.mla;
  StepBuffers& s = st.s;
  device::Device& dev = st.dev;
  const int64_t t = st.num_tokens;
  const float eps = static_cast<float>(c.norm_eps), off = static_cast<float>(c.norm_weight_offset);
  const int heads = c.num_q_heads, nope = m.qk_nope_head_dim, rot = m.qk_rope_head_dim,
            lora = m.kv_lora_rank, dv = m.v_head_dim;
  const int qk = nope + rot, row = lora + rot;

  // the token's latent row: c_kv -> kb [t, lora], k_rope -> vb [t, rope]
  quant::matmul_reusing(dev, w.wkv_a, s.h, s.xq, t, s.fused);
  ops::split_columns(dev, s.fused, s.kb, s.vb, s.vb, t, lora, rot, 0);
  ops::rms_norm(dev, s.kb, w.kv_a_norm, s.kb, t, lora, eps, off);

  // raw queries -> attn [t, heads, nope + rope]
  if (m.q_lora_rank > 0) {
    quant::matmul_reusing(dev, w.wq_a, s.h, s.xq, t, s.fused);
    ops::rms_norm(dev, s.fused, w.q_a_norm, s.fused, t, m.q_lora_rank, eps, off);
    project(st, w.wq, s.fused, s.attn);
  } else {
    quant::matmul_reusing(dev, w.wq, s.h, s.xq, t, s.attn);
  }
  SPECDEC_CHECK(s.layer_rope[il] >= 0, "layers[" + std::to_string(il) + "].use_rope", 0,
               "true for MLA layers (their k_rope part is rotated)");
  const ops::RopeTable& table = s.rope_tables[s.layer_rope[il]];
  ops::rope(dev, ops::Slice(s.attn, nope), s.positions, t, heads, qk, table);
  ops::rope(dev, s.vb, s.positions, t, 1, rot, table);

  // query [t, heads, lora + rope] = [W_UK q_nope, q_rope]
  ops::head_matmul(dev, w.w_uk, s.attn, s.qb, t, heads, lora, nope, qk, row);
  ops::copy_2d(dev, ops::Slice(s.attn, nope), ops::Slice(s.qb, lora), t * heads, rot, qk, row);

  const kv::KvRows latent{&s.kb, 0, 0}, k_rope{&s.vb, 0, 0};  // the cache row's two parts
  const float scale = c.attention_scale > 0 ? static_cast<float>(c.attention_scale)
                                            : 1.0f / std::sqrt(static_cast<float>(qk));
  write_kv_and_attend(st, il, &latent, &k_rope, s.qb, scale, s.attn);  // latent [t, heads, lora]

  ops::head_matmul(dev, w.w_uv, s.attn, s.attn_v, t, heads, dv, lora, lora, dv);
  project(st, w.wo, s.attn_v, s.proj);
}

}  // namespace specdec::runner
