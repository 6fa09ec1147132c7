// JSON form of KV-cache specs and plans (for `specdec kv-plan --json` and tools).
#pragma once

#include <nlohmann/json.hpp>

#include "kv/config.h"
#include "kv/planner.h"

namespace specdec::kv {

nlohmann::json to_json(const KvCacheSpec& spec);
nlohmann::json to_json(const KvCacheConfig& config);
nlohmann::json to_json(const SpecDecodeKvPlan& plan);

}  // namespace specdec::kv
