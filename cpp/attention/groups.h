// Attention groups: inside each KV-cache group, the layers that share one backend and one
// metadata builder (vLLM keys them by backend, spec and q-head count). A KV-cache group may hold
// several attention groups; KV-sharing layers join their target's KV-cache group and must use a
// backend with the target's layout. Also: per-step metadata, built once per attention group and
// reused by all its layers.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "attention/backend.h"
#include "attention/metadata.h"
#include "attention/selector.h"
#include "kv/allocator.h"
#include "kv/config.h"

namespace specdec::kv {
class KvCacheManager;
}

namespace specdec::attn {

// What a layer needs beyond its KV spec.
struct LayerAttentionInfo {
  std::string layer_name;
  int num_q_heads = 0;
  bool use_non_causal = false;
  bool use_softcap = false;
  bool use_sinks = false;
};

struct AttentionGroup {
  const AttentionBackend* backend = nullptr;
  std::shared_ptr<const AttentionMetadataBuilder> builder;
  std::vector<std::string> layer_names;
  kv::KvCacheSpec spec;
  int kv_cache_group_id = 0;
  int num_q_heads = 0;
  bool causal = true;
};

struct AttentionSetup {
  std::vector<AttentionGroup> attention_groups;
  std::map<std::string, int> layer_to_kv_cache_group;
  std::map<std::string, int> layer_to_attention_group;
  std::map<std::string, BackendChoice> choices;  // per layer: the backend and every rejection
  kv::LayoutMap layouts;                         // per layer, for kv::KvCacheAllocation

  // A readable account: per attention group, its backend, layers, and why other backends lost.
  std::string explain() const;
};

// Chooses a backend for every layer of `config` (requested: "" / "auto" or a backend name) from
// the priority list of `device` and groups them. `layers` must describe every layer of the plan
// (ConfigError naming the missing one).
AttentionSetup initialize_attention(const kv::KvCacheConfig& config, const std::vector<LayerAttentionInfo>& layers,
                                    const std::string& requested_backend, const device::Info& device);
// The same on an OpenCL device of `device_type` (the Python API's device_type).
AttentionSetup initialize_attention(const kv::KvCacheConfig& config, const std::vector<LayerAttentionInfo>& layers,
                                    const std::string& requested_backend = "", const std::string& device_type = "cpu");

// One step's metadata: the common metadata of each KV-cache group is built once from the block
// tables, then each attention group's builder runs once; element i belongs to attention group i.
std::vector<AttentionMetadata> build_step_metadata(device::Device& dev, const AttentionSetup& setup,
                                                   const kv::KvCacheManager& manager,
                                                   const std::vector<ScheduledRequest>& requests);

}  // namespace specdec::attn
