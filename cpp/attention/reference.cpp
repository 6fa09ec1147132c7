#include "attention/reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/errors.h"
#include "kv/cache_ops.h"

namespace specdec::attn {

std::vector<float> attention_ref(const CommonAttentionMetadata& md, const AttentionLayerParams& p,
                                 const std::vector<float>& sinks, const kv::LayerKvView& view,
                                 const std::vector<uint8_t>& raw, const std::vector<float>& query) {
  md.validate();
  const bool mla = view.spec.kind == kv::KvSpecKind::kMla;
  const int hq = p.num_q_heads, hkv = p.num_kv_heads, d = p.head_size, dv = p.head_size_v;
  SPECDEC_CHECK(hq >= 1 && hkv >= 1 && hq % hkv == 0, "num_q_heads", hq,
               str_cat("must be a positive multiple of num_kv_heads = ", hkv));
  SPECDEC_CHECK(query.size() == static_cast<size_t>(md.num_actual_tokens) * hq * d, "query",
               str_cat(query.size(), " floats"), str_cat("must be num_tokens * num_q_heads * head_size"));
  SPECDEC_CHECK(sinks.empty() || sinks.size() == static_cast<size_t>(hq), "sinks", str_cat(sinks.size(), " floats"),
               str_cat("must be empty or num_q_heads = ", hq));
  const DType dt = view.spec.dtype;
  const int bs = view.spec.block_size;
  // Element index of (key j of request r, kv head h, dim i) in K and in V.
  auto k_at = [&](int r, int j, int h, int i) {
    const int64_t block = md.block_table[static_cast<size_t>(r) * md.max_blocks_per_req + j / bs];
    return mla ? view.k.index(block, j % bs, 0, 0) + i : view.k.index(block, j % bs, h, i);
  };
  auto v_at = [&](int r, int j, int h, int i) {
    const int64_t block = md.block_table[static_cast<size_t>(r) * md.max_blocks_per_req + j / bs];
    return mla ? view.k.index(block, j % bs, 0, i) : view.v.index(block, j % bs, h, i);
  };
  std::vector<float> out(static_cast<size_t>(md.num_actual_tokens) * hq * dv, 0.0f);
  std::vector<double> scores;
  for (int r = 0; r < md.num_reqs; ++r) {
    for (int t = md.query_start_loc[r]; t < md.query_start_loc[r + 1]; ++t) {
      const int pos = md.num_computed_tokens[r] + (t - md.query_start_loc[r]);
      const int hi = md.causal ? pos : md.seq_lens[r] - 1;
      int lo = 0;
      if (p.sliding_window > 0) lo = std::max(lo, pos - p.sliding_window + 1);
      if (p.attention_chunk_size > 0) lo = std::max(lo, pos / p.attention_chunk_size * p.attention_chunk_size);
      if (hi < lo) continue;
      for (int h = 0; h < hq; ++h) {
        const int kvh = h / (hq / hkv);
        const float* q = query.data() + (static_cast<size_t>(t) * hq + h) * d;
        scores.assign(static_cast<size_t>(hi - lo + 1), 0.0);
        double m = sinks.empty() ? -std::numeric_limits<double>::infinity() : sinks[h];
        for (int j = lo; j <= hi; ++j) {
          double s = 0.0;
          for (int i = 0; i < d; ++i) s += double{q[i]} * kv::load_element(raw, dt, k_at(r, j, kvh, i));
          s *= p.scale;
          if (p.logit_softcap > 0) s = p.logit_softcap * std::tanh(s / p.logit_softcap);
          scores[j - lo] = s;
          m = std::max(m, s);
        }
        double denom = sinks.empty() ? 0.0 : std::exp(sinks[h] - m);
        std::vector<double> acc(static_cast<size_t>(dv), 0.0);
        for (int j = lo; j <= hi; ++j) {
          const double w = std::exp(scores[j - lo] - m);
          denom += w;
          for (int i = 0; i < dv; ++i) acc[i] += w * kv::load_element(raw, dt, v_at(r, j, kvh, i));
        }
        float* o = out.data() + (static_cast<size_t>(t) * hq + h) * dv;
        for (int i = 0; i < dv; ++i) o[i] = static_cast<float>(acc[i] / denom);
      }
    }
  }
  return out;
}

}  // namespace specdec::attn
