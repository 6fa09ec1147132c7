#include "kv/config.h"

#include <algorithm>
#include <limits>

#include "common/errors.h"
#include "common/math.h"

namespace specdec::kv {

int64_t KvCacheGroup::max_concurrent_requests() const {
  const int64_t per_request = max_blocks_per_request;
  return per_request > 0 ? usable_blocks() / per_request : 0;
}

int64_t KvCacheConfig::total_bytes() const {
  int64_t total = 0;
  for (const auto& t : tensors) total = checked_add(total, t.size_bytes, "total_bytes");
  return total;
}

int64_t KvCacheConfig::max_concurrent_requests() const {
  if (groups.empty()) return 0;
  int64_t out = std::numeric_limits<int64_t>::max();
  for (const auto& g : groups) out = std::min(out, g.max_concurrent_requests());
  return out;
}

int KvCacheConfig::group_of(const std::string& layer_name) const {
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& group = groups[g];
    if (std::find(group.layer_names.begin(), group.layer_names.end(), layer_name) !=
            group.layer_names.end() ||
        std::find(group.sharing_layer_names.begin(), group.sharing_layer_names.end(),
                  layer_name) != group.sharing_layer_names.end()) {
      return static_cast<int>(g);
    }
  }
  throw ConfigError("layer_name", "'" + layer_name + "'", "not a layer of this KV-cache plan");
}

int KvCacheConfig::tensor_of(const std::string& layer_name) const {
  for (size_t t = 0; t < tensors.size(); ++t) {
    const auto& shared_by = tensors[t].shared_by;
    if (std::find(shared_by.begin(), shared_by.end(), layer_name) != shared_by.end()) {
      return static_cast<int>(t);
    }
  }
  throw ConfigError("layer_name", "'" + layer_name + "'", "not a layer of this KV-cache plan");
}

std::map<std::string, KvCacheSpec> KvCacheConfig::layer_specs() const {
  std::map<std::string, KvCacheSpec> out;
  for (const auto& g : groups) {
    for (size_t i = 0; i < g.layer_names.size(); ++i) out.emplace(g.layer_names[i], g.layer_specs[i]);
  }
  for (const auto& [layer, target] : kv_sharing) out.emplace(layer, out.at(target));
  return out;
}

}  // namespace specdec::kv
