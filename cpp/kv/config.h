// The planner's output: KV-cache groups, the raw tensors that back them, and block counts.
//
// A group is the set of layers that share one block table: layers whose specs agree on
// kind, block_size, sliding_window and attention_chunk_size (head counts, head sizes and dtypes
// may differ per layer). Each group draws blocks from its own pool of num_blocks blocks;
// block 0 of every pool is the null block (never handed out; freed window slots point at it).
// Each layer that owns a cache gets one tensor of num_blocks * page_size_bytes; a layer with a
// kv_sharing_target aliases its target's tensor and joins the target's group.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kv/spec.h"

namespace specdec::kv {

struct KvCacheGroup {
  KvCacheSpec spec;                       // the group's spec (its first layer's)
  std::vector<std::string> layer_names;   // layers that own a cache, in model order
  std::vector<KvCacheSpec> layer_specs;   // spec of each owning layer (same order)
  std::vector<std::string> sharing_layer_names;  // layers reading a cache of this group
  int64_t num_blocks = 0;                 // blocks in this group's pool, null block included
  int64_t max_blocks_per_request = 0;     // most blocks one max_model_len request holds
  int64_t bytes_per_block = 0;            // sum of the owning layers' page sizes

  int64_t usable_blocks() const { return num_blocks > 0 ? num_blocks - 1 : 0; }
  // Requests of max_model_len this group can hold at once.
  int64_t max_concurrent_requests() const;
  // Tokens whose KV fits in this group at once (for windowed groups: across requests).
  int64_t token_capacity() const { return usable_blocks() * spec.block_size; }
};

struct KvCacheTensor {
  int64_t size_bytes = 0;
  std::vector<std::string> shared_by;  // first: the owning layer; then layers sharing its KV
  int group_id = 0;
};

struct KvCacheConfig {
  std::vector<KvCacheGroup> groups;
  std::vector<KvCacheTensor> tensors;
  std::map<std::string, std::string> kv_sharing;  // sharing layer -> target layer
  int64_t max_model_len = 0;
  int64_t max_num_batched_tokens = 0;
  int64_t budget_bytes = 0;
  std::string model_name;
  bool disable_hybrid_kv_cache_manager = false;  // every attention layer in one full-attention group

  int64_t total_bytes() const;            // sum of tensor sizes
  int64_t max_concurrent_requests() const;  // min over groups
  // Group id of a layer (owning or sharing); throws ConfigError for an unknown layer.
  int group_of(const std::string& layer_name) const;
  // Index into tensors of the tensor a layer reads and writes.
  int tensor_of(const std::string& layer_name) const;
  // Every layer (owning and sharing) with its spec.
  std::map<std::string, KvCacheSpec> layer_specs() const;
};

}  // namespace specdec::kv
