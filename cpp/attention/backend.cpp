#include "attention/backend.h"

#include <algorithm>

#include "common/errors.h"

namespace specdec::attn {

AttentionRequirements AttentionRequirements::from_spec(const kv::KvCacheSpec& spec, int num_q_heads,
                                                       bool use_non_causal, bool use_softcap,
                                                       bool use_sinks) {
  spec.validate();
  SPECDEC_CHECK(num_q_heads >= 1 && num_q_heads % spec.num_kv_heads == 0, "num_q_heads", num_q_heads,
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

void AttentionRequirements::validate() const {
  SPECDEC_CHECK(head_size >= 1, "head_size", head_size, "must be >= 1");
  SPECDEC_CHECK(head_size_v >= 1, "head_size_v", head_size_v, "must be >= 1");
  SPECDEC_CHECK(num_kv_heads >= 1, "num_kv_heads", num_kv_heads, "must be >= 1");
  SPECDEC_CHECK(num_q_heads >= 1 && num_q_heads % num_kv_heads == 0, "num_q_heads", num_q_heads,
               str_cat("must be a positive multiple of num_kv_heads = ", num_kv_heads));
  SPECDEC_CHECK(block_size >= 1, "block_size", block_size, "must be >= 1");
  SPECDEC_CHECK(!(use_sliding_window && use_chunked_local), "use_chunked_local", "true",
               "a layer has a sliding window or a chunk, not both");
}

AttentionLayerParams AttentionLayerParams::from_spec(const kv::KvCacheSpec& spec, int num_q_heads, float scale) {
  const AttentionRequirements r = AttentionRequirements::from_spec(spec, num_q_heads);
  AttentionLayerParams p;
  p.num_q_heads = r.num_q_heads;
  p.num_kv_heads = r.num_kv_heads;
  p.head_size = r.head_size;
  p.head_size_v = r.head_size_v;
  p.scale = scale;
  if (spec.kind == kv::KvSpecKind::kSlidingWindow) p.sliding_window = spec.sliding_window;
  if (spec.kind == kv::KvSpecKind::kChunkedLocal) p.attention_chunk_size = spec.attention_chunk_size;
  return p;
}

void check_layer_call(const CommonAttentionMetadata& md, const AttentionLayerParams& p, const kv::LayerKvView& view) {
  const kv::KvCacheSpec& s = view.spec;
  const bool mla = s.kind == kv::KvSpecKind::kMla;
  SPECDEC_CHECK(p.num_kv_heads == s.num_kv_heads, "num_kv_heads", p.num_kv_heads,
               str_cat("must equal the cache's ", s.num_kv_heads));
  SPECDEC_CHECK(p.num_q_heads >= 1 && p.num_q_heads % s.num_kv_heads == 0, "num_q_heads", p.num_q_heads,
               str_cat("must be a positive multiple of num_kv_heads = ", s.num_kv_heads));
  SPECDEC_CHECK(p.head_size == s.head_size, "head_size", p.head_size, str_cat("must equal the cache's ", s.head_size));
  const int head_size_v = mla ? s.kv_lora_rank : s.head_size_v;
  SPECDEC_CHECK(p.head_size_v == head_size_v, "head_size_v", p.head_size_v,
               str_cat("must equal the cache's ", head_size_v));
  SPECDEC_CHECK(md.block_size == s.block_size, "block_size", md.block_size,
               str_cat("metadata built for another block size; the cache's is ", s.block_size));
  const int window = s.kind == kv::KvSpecKind::kSlidingWindow ? s.sliding_window : 0;
  SPECDEC_CHECK(p.sliding_window == window, "sliding_window", p.sliding_window,
               str_cat("must be the layer's window ", window,
                       window > 0 ? " (blocks that left it are freed: a wider window reads freed blocks)" : ""));
  const int chunk = s.kind == kv::KvSpecKind::kChunkedLocal ? s.attention_chunk_size : 0;
  SPECDEC_CHECK(p.attention_chunk_size == 0 || p.attention_chunk_size == chunk, "attention_chunk_size",
               p.attention_chunk_size, str_cat("must be 0 or the layer's chunk ", chunk));
  SPECDEC_CHECK(p.logit_softcap >= 0.0f, "logit_softcap", p.logit_softcap, "must be >= 0");
}

void check_forward_buffers(const CommonAttentionMetadata& md, const AttentionLayerParams& p,
                           const kv::LayerKvView& view, const device::Buffer& cache,
                           const device::Buffer& query, const device::Buffer& output) {
  const size_t rows = static_cast<size_t>(md.num_actual_tokens) * static_cast<size_t>(p.num_q_heads);
  const size_t n_q = rows * static_cast<size_t>(p.head_size), n_out = rows * static_cast<size_t>(p.head_size_v);
  SPECDEC_CHECK(query.size_bytes() >= n_q * sizeof(float), "query", str_cat(query.size_bytes(), " bytes"),
               str_cat("must hold num_tokens * num_q_heads * head_size = ", n_q, " floats"));
  SPECDEC_CHECK(output.size_bytes() >= n_out * sizeof(float), "output", str_cat(output.size_bytes(), " bytes"),
               str_cat("must hold num_tokens * num_q_heads * head_size_v = ", n_out, " floats"));
  SPECDEC_CHECK(cache.size_bytes() >= static_cast<size_t>(view.size_bytes()), "cache",
               str_cat(cache.size_bytes(), " bytes"), str_cat("must hold the view's ", view.size_bytes(), " bytes"));
  if (p.sinks != nullptr) {
    SPECDEC_CHECK(p.sinks->size_bytes() >= static_cast<size_t>(p.num_q_heads) * sizeof(float), "sinks",
                 str_cat(p.sinks->size_bytes(), " bytes"), str_cat("must hold num_q_heads = ", p.num_q_heads, " floats"));
  }
}

bool AttentionBackend::can_read(kv::KvLayout layout) const {
  const BackendCapabilities& c = capabilities();
  if (layout == kv::KvLayout::kMlaLatent) return c.is_mla || c.any_mla;
  return layout == c.kv_layout || std::find(c.also_reads.begin(), c.also_reads.end(), layout) != c.also_reads.end();
}

bool AttentionBackend::runs_on(device::Kind kind) const {
  const std::vector<device::Kind>& kinds = capabilities().devices;
  return kinds.empty() || std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}

kv::KvLayout AttentionBackend::kv_layout_for(const kv::KvCacheSpec& spec, std::optional<kv::KvLayout> required) const {
  if (spec.kind == kv::KvSpecKind::kMla) return kv::KvLayout::kMlaLatent;
  if (required && can_read(*required)) return *required;
  return kv_layout();
}

std::vector<std::string> AttentionBackend::validate(const AttentionRequirements& r) const {
  const BackendCapabilities& c = capabilities();
  std::vector<std::string> reasons;
  const bool head_ok = c.head_sizes.empty()
                           ? (r.head_size >= 1 && (c.max_head_size == 0 || r.head_size <= c.max_head_size))
                           : std::find(c.head_sizes.begin(), c.head_sizes.end(), r.head_size) != c.head_sizes.end();
  const bool head_v_ok = r.use_mla || c.max_head_size == 0 || r.head_size_v <= c.max_head_size;
  if (!head_ok) {
    std::string allowed;
    for (int h : c.head_sizes) allowed += (allowed.empty() ? "" : ", ") + std::to_string(h);
    reasons.push_back(str_cat("head_size ", r.head_size, " not supported (",
                              c.head_sizes.empty() ? str_cat("at most ", c.max_head_size) : "one of " + allowed, ")"));
  }
  if (!head_v_ok) {
    reasons.push_back(str_cat("head_size_v ", r.head_size_v, " not supported (at most ", c.max_head_size, ")"));
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
  if (r.use_non_causal && r.use_chunked_local) {
    reasons.push_back("non-causal chunked local attention not supported (virtual batches are causal)");
  }
  if (r.required_layout && !can_read(*r.required_layout)) {
    reasons.push_back("cannot read the KV layout " + kv::layout_name(*r.required_layout) +
                      " of the cache this layer shares");
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
