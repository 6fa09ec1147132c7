#include "attention/backend.h"

#include <algorithm>

#include "common/errors.h"

namespace specdec::attn {

AttentionRequirements AttentionRequirements::from_spec(const kv::KvCacheSpec& spec, int num_q_heads,
                                                       bool use_non_causal, bool use_softcap,
                                                       bool use_sinks) {
  spec.validate();
  check_config(num_q_heads >= 1 && num_q_heads % spec.num_kv_heads == 0, "num_q_heads", num_q_heads,
               str_cat("must be a positive multiple of num_kv_heads = ", spec.num_kv_heads));
  AttentionRequirements r;
  r.use_mla = spec.kind == kv::KvSpecKind::kMla;
  r.head_size = spec.head_size;
  r.head_size_v = r.use_mla ? spec.kv_lora_rank : spec.head_size_v;
  r.num_q_heads = num_q_heads;
  r.num_kv_heads = spec.num_kv_heads;
  r.kv_cache_dtype = spec.dtype;
  r.block_size = spec.block_size;
  r.use_non_causal = use_non_causal;
  r.use_sliding_window = spec.kind == kv::KvSpecKind::kSlidingWindow;
  r.use_chunked_local = spec.kind == kv::KvSpecKind::kChunkedLocal;
  r.use_softcap = use_softcap;
  r.use_sinks = use_sinks;
  return r;
}

std::string AttentionRequirements::to_string() const {
  std::string out = str_cat("head_size=", head_size);
  if (head_size_v != head_size) out += str_cat(", head_size_v=", head_size_v);
  out += str_cat(", heads=", num_q_heads, "/", num_kv_heads, ", kv_cache_dtype=", dtype_name(kv_cache_dtype),
                 ", block_size=", block_size);
  if (use_mla) out += ", mla";
  out += use_non_causal ? ", non-causal" : ", causal";
  if (use_sliding_window) out += ", sliding window";
  if (use_chunked_local) out += ", chunked local";
  if (use_softcap) out += ", softcap";
  if (use_sinks) out += ", sinks";
  if (required_layout) out += ", layout " + kv::layout_name(*required_layout);
  return out;
}

AttentionLayerParams AttentionLayerParams::from_requirements(const AttentionRequirements& r, float scale) {
  AttentionLayerParams p;
  p.num_q_heads = r.num_q_heads;
  p.num_kv_heads = r.num_kv_heads;
  p.head_size = r.head_size;
  p.head_size_v = r.head_size_v;
  p.scale = scale;
  return p;
}

std::vector<std::string> AttentionBackend::validate(const AttentionRequirements& r) const {
  const BackendCapabilities& c = capabilities();
  std::vector<std::string> reasons;
  const bool head_ok = c.head_sizes.empty()
                           ? (r.head_size >= 1 && (c.max_head_size == 0 || r.head_size <= c.max_head_size))
                           : std::find(c.head_sizes.begin(), c.head_sizes.end(), r.head_size) != c.head_sizes.end();
  if (!head_ok) {
    std::string allowed;
    for (int h : c.head_sizes) allowed += (allowed.empty() ? "" : ", ") + std::to_string(h);
    reasons.push_back(str_cat("head_size ", r.head_size, " not supported (",
                              c.head_sizes.empty() ? str_cat("at most ", c.max_head_size) : "one of " + allowed, ")"));
  }
  if (!r.use_mla && r.head_size_v != r.head_size && !c.separate_head_size_v) {
    reasons.push_back(str_cat("head_size_v ", r.head_size_v, " != head_size ", r.head_size, " not supported"));
  }
  if (std::find(c.kv_cache_dtypes.begin(), c.kv_cache_dtypes.end(), r.kv_cache_dtype) == c.kv_cache_dtypes.end()) {
    reasons.push_back("kv_cache_dtype " + dtype_name(r.kv_cache_dtype) + " not supported");
  }
  if (c.max_block_size > 0 && r.block_size > c.max_block_size) {
    reasons.push_back(str_cat("block_size ", r.block_size, " not supported (at most ", c.max_block_size, ")"));
  }
  if (r.block_size % c.block_size_multiple_of != 0) {
    reasons.push_back(str_cat("block_size ", r.block_size, " not supported (must be a multiple of ",
                              c.block_size_multiple_of, ")"));
  }
  if (!c.any_mla && r.use_mla != c.is_mla) reasons.push_back(r.use_mla ? "MLA not supported" : "non-MLA not supported");
  if (!r.use_non_causal && !c.causal) reasons.push_back("causal attention not supported");
  if (r.use_non_causal && !c.non_causal) reasons.push_back("non-causal attention not supported");
  if (r.use_sliding_window && !c.sliding_window) reasons.push_back("sliding window not supported");
  if (r.use_chunked_local && !c.chunked_local) reasons.push_back("chunked local attention not supported");
  if (r.use_softcap && !c.logit_softcap) reasons.push_back("logit softcap not supported");
  if (r.use_sinks && !c.sinks) reasons.push_back("attention sinks not supported");
  const kv::KvLayout layout = r.use_mla ? kv::KvLayout::kMlaLatent : c.kv_layout;
  if (r.required_layout && *r.required_layout != layout) {
    reasons.push_back("KV layout " + kv::layout_name(layout) + " differs from the required " +
                      kv::layout_name(*r.required_layout) + " (the layer reads another layer's cache)");
  }
  return reasons;
}

std::unique_ptr<AttentionMetadataBuilder> AttentionBackend::make_builder(const kv::KvCacheSpec& spec,
                                                                       int /*num_q_heads*/) const {
  if (spec.kind == kv::KvSpecKind::kChunkedLocal) {
    return std::make_unique<LocalAttentionMetadataBuilder>(spec.attention_chunk_size);
  }
  return std::make_unique<AttentionMetadataBuilder>();
}

}  // namespace specdec::attn
