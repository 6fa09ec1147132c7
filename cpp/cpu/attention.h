// Paged attention of the native CPU device on host memory: attn::attention_ref's math (the same
// visible keys, scale, softcap, sinks, GQA and MLA rules, cpp/attention/reference.h) in f32, for
// any KV layout the cache views describe (kv_major, block_major, mla_latent) and any cache dtype
// (f32, f16, bf16). Work is split into items (up to 8 query tokens of one request, kv head): an
// item computes every q head of its kv head for its tokens, reading each key and value row once
// for all of them (a verify's k + 1 rows share the loads), so a thread pool can hand out item
// ranges; a token's result never depends on the tokens or requests beside it (batch invariant).
// Arguments are checked by the caller (attn::check_layer_call and the backend's buffer checks).
#pragma once

#include <cstdint>
#include <vector>

#include "attention/backend.h"
#include "attention/metadata.h"
#include "cpu/isa.h"
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
  Isa isa = cpu_isa();             // the inner loops' path: portable, AVX2 or AVX-512
};

// The items of a call: (sum over requests of ceil(query tokens / 8)) * num_kv_heads.
int64_t attention_items(const AttentionCall& c);

// Items [i0, i1): item i = (token block i / kv heads, kv head i % kv heads), the blocks of the
// requests in order.
void attention(const AttentionCall& c, int64_t i0, int64_t i1);

// The same split over keys as well (flash-decoding), for steps with fewer (token block, kv head)
// pairs than threads: items (token block, kv head, key_chunk keys at absolute positions) write
// partial results, then one combine per (token block, kv head) writes out. Chunks sit at
// absolute key positions, so a token's result never depends on the batch. The plan depends on
// the metadata and the layer's heads / window / chunk only: one per step and KV-cache group.
struct AttentionPlan {
  struct Item {
    int r, t0, t1, g, k0, k1;  // request, tokens [t0, t1), kv head, keys [k0, k1]
    int64_t partial;           // its partial results at partials + partial ([row][2 + dv])
  };
  struct Out {
    int r, t0, t1, g;
    int64_t first_item, num_items;  // its items, consecutive
  };
  int key_chunk = 0;
  std::vector<Item> items;
  std::vector<Out> outs;
  int64_t partial_floats = 0;  // the partials buffer's size
};
AttentionPlan plan_attention(const AttentionCall& c, int key_chunk = 128);
void attention_partial(const AttentionCall& c, const AttentionPlan& plan, float* partials, int64_t i0, int64_t i1);
void attention_combine(const AttentionCall& c, const AttentionPlan& plan, const float* partials, int64_t o0,
                       int64_t o1);

}  // namespace specdec::cpu
