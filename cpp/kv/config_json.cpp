#include "kv/config_json.h"

namespace specdec::kv {

nlohmann::json to_json(const KvCacheSpec& spec) {
  nlohmann::json j = {{"kind", kind_name(spec.kind)},
                      {"block_size", spec.block_size},
                      {"dtype", dtype_name(spec.dtype)},
                      {"page_size_bytes", spec.page_size_bytes()}};
  if (spec.kind == KvSpecKind::kMla) {
    j["kv_lora_rank"] = spec.kv_lora_rank;
    j["qk_rope_head_dim"] = spec.qk_rope_head_dim;
  } else {
    j["num_kv_heads"] = spec.num_kv_heads;
    j["head_size"] = spec.head_size;
    j["head_size_v"] = spec.head_size_v;
  }
  if (spec.kind == KvSpecKind::kSlidingWindow) j["sliding_window"] = spec.sliding_window;
  if (spec.kind == KvSpecKind::kChunkedLocal) j["attention_chunk_size"] = spec.attention_chunk_size;
  return j;
}

nlohmann::json to_json(const KvCacheConfig& config) {
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& g : config.groups) {
    groups.push_back({{"spec", to_json(g.spec)},
                      {"layer_names", g.layer_names},
                      {"sharing_layer_names", g.sharing_layer_names},
                      {"num_blocks", g.num_blocks},
                      {"usable_blocks", g.usable_blocks()},
                      {"bytes_per_block", g.bytes_per_block},
                      {"max_blocks_per_request", g.max_blocks_per_request},
                      {"max_concurrent_requests", g.max_concurrent_requests()},
                      {"token_capacity", g.token_capacity()}});
  }
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& t : config.tensors) {
    tensors.push_back({{"size_bytes", t.size_bytes}, {"shared_by", t.shared_by}, {"group_id", t.group_id}});
  }
  return {{"model", config.model_name},
          {"max_model_len", config.max_model_len},
          {"max_num_batched_tokens", config.max_num_batched_tokens},
          {"budget_bytes", config.budget_bytes},
          {"disable_hybrid_kv_cache_manager", config.disable_hybrid_kv_cache_manager},
          {"total_bytes", config.total_bytes()},
          {"max_concurrent_requests", config.max_concurrent_requests()},
          {"groups", groups},
          {"tensors", tensors},
          {"kv_sharing", config.kv_sharing}};
}

nlohmann::json to_json(const SpecDecodeKvPlan& plan) {
  return {{"target", to_json(plan.target)},
          {"drafter", to_json(plan.drafter)},
          {"target_budget_bytes", plan.target_budget_bytes},
          {"drafter_budget_bytes", plan.drafter_budget_bytes},
          {"split", plan.split}};
}

}  // namespace specdec::kv
