// Paged attention of the native CPU device on host memory: attn::attention_ref's math (the same
// visible keys, scale, softcap, sinks, GQA and MLA rules, cpp/attention/reference.h) in f32, for
// any KV layout the cache views describe (kv_major, block_major, mla_latent) and any cache dtype
// (f32, f16, bf16). Work is split into items (token, kv head): an item computes every q head of
// its kv head for its token, reading each key and value row once for the group, so a thread pool
// can hand out item ranges; an item's result never depends on the others (batch invariant).
// Arguments are checked by the caller (attn::check_layer_call and the backend's buffer checks).
#pragma once

#include <cstdint>

#include "attention/backend.h"
#include "attention/metadata.h"
#include "kv/layout.h"

namespace specdec::cpu {

struct AttentionCall {
  const attn::CommonAttentionMetadata* md = nullptr;
  const attn::AttentionLayerParams* params = nullptr;  // params->sinks is ignored: `sinks` below
  const kv::LayerKvView* view = nullptr;
  const uint8_t* cache = nullptr;  // the layer's raw cache tensor (view offsets are into it)
  const float* sinks = nullptr;    // [num_q_heads] or null
  const float* query = nullptr;    // [num_tokens, num_q_heads, head_size]
  float* out = nullptr;            // [num_tokens, num_q_heads, head_size_v]
};

// num_actual_tokens * num_kv_heads (MLA: one latent head, so num_actual_tokens).
int64_t attention_items(const AttentionCall& c);

// Items [i0, i1): item i = (token i / kv heads, kv head i % kv heads).
void attention(const AttentionCall& c, int64_t i0, int64_t i1);

}  // namespace specdec::cpu
