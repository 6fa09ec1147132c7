// Paged attention of the native CPU device on host memory: attn::attention_ref's math (the same
// visible keys, scale, softcap, sinks, GQA and MLA rules, cpp/attention/reference.h) in f32, for
// any KV layout the cache views describe (kv_major, block_major, mla_latent) and any cache dtype
// (f32, f16, bf16). Work is split into items (up to 8 query tokens of one request, kv head): an
// item computes every q head of its kv head for its tokens, reading each key and value row once
// for all of them (a verify's k + 1 rows share the loads), so a thread pool can hand out item
// ranges; a token's result never depends on the tokens or requests beside it (batch invariant).
// Arguments are checked by the caller (attn::check_layer_call and the backend's buffer checks).
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "attention/backend.h"
#include "attention/metadata.h"
#include "cpu/isa.h"
#include "cpu/ops.h"
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
// Every (token block, kv head) has at least one item (an empty key range [0, -1] when none of its
// tokens sees a key), so that its combine always runs.
struct AttentionPlan {
  struct Item {
    int r, t0, t1, g, k0, k1;  // request, tokens [t0, t1), kv head, keys [k0, k1]
    int64_t partial;           // its partial results at partials + partial ([row][2 + dv])
    int64_t out;               // the Out it belongs to
  };
  struct Out {
    int r, t0, t1, g;
    int64_t first_item, num_items;  // its items, consecutive
  };
  int key_chunk = 0;
  std::vector<Item> items;
  std::vector<Out> outs;
  // The items in the order attention_fused runs them: the most work (tokens x keys) first, so
  // that threads taking them from a shared counter finish close together.
  std::vector<int64_t> order;
  int64_t partial_floats = 0;  // the partials buffer's size
};
AttentionPlan plan_attention(const AttentionCall& c, int key_chunk = 128);
void attention_partial(const AttentionCall& c, const AttentionPlan& plan, float* partials, int64_t i0, int64_t i1);
void attention_combine(const AttentionCall& c, const AttentionPlan& plan, const float* partials, int64_t o0,
                       int64_t o1);

// Partials and combine in one op (no barrier between them): items plan.order[i0 .. i1) write
// their partial results; the thread that stores an Out's last part (pending[out] counts its parts
// still to come: set every entry to the Out's num_items before the op) combines that Out, so each
// Out is combined exactly once, after all of its parts, in the order attention_combine uses
// (bitwise its result). With q, the combined rows are also written quantised (QuantOut's records,
// as quantize_activations writes the whole row): every Out's columns must be whole scale blocks,
// i.e. (num_q_heads / num_kv_heads) * head_size_v % q->scale_block == 0.
void attention_fused(const AttentionCall& c, const AttentionPlan& plan, float* partials,
                     std::atomic<int32_t>* pending, const QuantOut* q, int64_t i0, int64_t i1);
// pending[i] = plan.outs[i].num_items for every Out.
void reset_pending(const AttentionPlan& plan, std::atomic<int32_t>* pending);

}  // namespace specdec::cpu
