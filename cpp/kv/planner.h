// KV-cache planner: per-layer specs + a byte budget + max_model_len -> KvCacheConfig.
//
// Grouping: layers that own a cache are grouped by (kind, block_size, sliding_window,
// attention_chunk_size) in model order, so a uniform model has one group and Gemma 3 two
// (sliding + global). Layers with a kv_sharing_target join their target's group and get no
// memory. Each group has its own block pool; the budget is split between the groups in
// proportion to what one max_model_len request needs in each, so every group holds the same
// number of such requests and no page is padding. (vLLM instead aliases equal-sized groups onto
// shared tensors with unified page sizes; that needs equal group sizes, which would split
// Gemma 3's 15 sliding layers into 5 groups.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kv/config.h"
#include "kv/spec.h"

namespace specdec::kv {

struct PlannerOptions {
  int64_t max_num_batched_tokens = 2048;  // most new tokens of one request in one step
  int64_t num_blocks_override = 0;        // > 0: every group gets this many blocks
  std::string model_name;                 // shown in the plan
  // vLLM's disable_hybrid_kv_cache_manager: every attention layer in one KV-cache group managed
  // as full attention (sliding-window and chunked-local layers keep their specs, so their masks
  // and metadata, but their blocks are no longer freed early). MLA layers stay apart.
  bool disable_hybrid_kv_cache_manager = false;
};

// Validates the layers and the sharing targets (ConfigError naming "<layer>.<field>").
void validate_layers(const std::vector<LayerKvSpec>& layers, int64_t max_model_len);

// The groups only (num_blocks left 0).
std::vector<KvCacheGroup> group_layers(const std::vector<LayerKvSpec>& layers,
                                       int64_t max_model_len, int64_t max_num_batched_tokens,
                                       bool disable_hybrid_kv_cache_manager = false);

// Bytes one request of max_model_len needs (null blocks included).
int64_t min_budget_bytes(const std::vector<LayerKvSpec>& layers, int64_t max_model_len,
                         const PlannerOptions& options = {});

// Largest max_model_len (<= limit) whose single request fits budget_bytes; 0 if none.
int64_t max_model_len_for_budget(const std::vector<LayerKvSpec>& layers, int64_t budget_bytes,
                                 int64_t limit, const PlannerOptions& options = {});

// The plan. A budget that cannot hold one request of max_model_len is a ConfigError naming
// kv_cache_memory_bytes, with the bytes needed and the largest max_model_len that fits.
KvCacheConfig plan_kv_cache(const std::vector<LayerKvSpec>& layers, int64_t budget_bytes,
                            int64_t max_model_len, const PlannerOptions& options = {});

// Target and drafter planned from one budget.
struct SpecDecodeKvPlan {
  KvCacheConfig target;
  KvCacheConfig drafter;
  int64_t target_budget_bytes = 0;
  int64_t drafter_budget_bytes = 0;
  std::string split;  // how the budget was split, in words
};

// drafter_fraction < 0: split in proportion to what one max_model_len request needs in each
// model (both hold the same number of requests, as speculative decoding needs). Otherwise
// the drafter gets floor(budget * drafter_fraction), 0 < drafter_fraction < 1.
SpecDecodeKvPlan plan_target_and_drafter(const std::vector<LayerKvSpec>& target_layers,
                                         const std::vector<LayerKvSpec>& drafter_layers,
                                         int64_t budget_bytes, int64_t max_model_len,
                                         double drafter_fraction = -1.0,
                                         const PlannerOptions& target_options = {},
                                         const PlannerOptions& drafter_options = {});

}  // namespace specdec::kv
