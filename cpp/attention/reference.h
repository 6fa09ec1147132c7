// Plain C++ attention on host data: the oracle every OpenCL backend is tested against, and the
// REFERENCE backend's implementation.
//
// For query token t of request r (position p = num_computed_tokens[r] + t - query_start_loc[r])
// and q head h (kv head h / (num_q_heads / num_kv_heads)), keys j in [lo, hi] are visible:
//   hi = p if causal else seq_lens[r] - 1
//   lo = max(0, p - sliding_window + 1) with a window, floor(p / chunk) * chunk with a chunk
// scores s_j = scale * q.k_j, then s_j = softcap * tanh(s_j / softcap) when softcap > 0;
// out = sum_j exp(s_j - m) v_j / (sum_j exp(s_j - m) + [exp(sink_h - m) with sinks]).
// Keys and values are read through the layer's view (any layout, f32/f16/bf16). MLA: k_j is
// the whole latent row (kv_lora_rank + qk_rope_head_dim), v_j its first kv_lora_rank elements.
// A query with no visible key (impossible for well-formed metadata) gets zeros.
#pragma once

#include <cstdint>
#include <vector>

#include "attention/backend.h"
#include "attention/metadata.h"
#include "kv/layout.h"

namespace specdec::attn {

// query: [num_tokens, num_q_heads, head_size]; returns [num_tokens, num_q_heads, head_size_v].
// sinks: [num_q_heads] or empty. raw: the bytes of the layer's cache tensor.
std::vector<float> attention_ref(const CommonAttentionMetadata& md, const AttentionLayerParams& params,
                                 const std::vector<float>& sinks, const kv::LayerKvView& view,
                                 const std::vector<uint8_t>& raw, const std::vector<float>& query);

}  // namespace specdec::attn
