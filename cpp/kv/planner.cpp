#include "kv/planner.h"

#include <algorithm>
#include <climits>
#include <map>
#include <set>
#include <tuple>

#include "common/errors.h"
#include "common/math.h"

namespace specdec::kv {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// Re-raises a spec's ConfigError with the layer name in front of the field.
void validate_spec_of(const LayerKvSpec& layer) {
  try {
    layer.spec.validate();
  } catch (const ConfigError& e) {
    throw e.with_prefix(layer.layer_name);
  }
}

void validate_sharing(const std::vector<LayerKvSpec>& layers,
                      const std::map<std::string, size_t>& index_of, size_t i) {
  const LayerKvSpec& layer = layers[i];
  const std::string field = layer.layer_name + ".kv_sharing_target";
  const std::string value = "'" + layer.kv_sharing_target + "'";
  const auto it = index_of.find(layer.kv_sharing_target);
  if (it == index_of.end()) {
    throw ConfigError(field, value, "no layer of that name; it must name an earlier layer");
  }
  const LayerKvSpec& target = layers[it->second];
  SPECDEC_CHECK(it->second != i, field, value, "a layer cannot share its own KV cache");
  SPECDEC_CHECK(it->second < i, field, value, "the target must come before the sharing layer");
  SPECDEC_CHECK(target.kv_sharing_target.empty(), field, value,
               str_cat("the target itself reads '", target.kv_sharing_target,
                       "'; point at that layer instead"));
  SPECDEC_CHECK(target.spec == layer.spec, field, value,
               str_cat("the target's spec ", target.spec.to_string(),
                       " differs from this layer's ", layer.spec.to_string(),
                       "; a shared cache must be read with the spec that wrote it"));
}

using GroupKey = std::tuple<KvSpecKind, int, int, int>;

GroupKey group_key(const KvCacheSpec& s) {
  return {s.kind, s.block_size, s.sliding_window, s.attention_chunk_size};
}

// The spec a group is managed with when the hybrid manager is off: full attention.
KvCacheSpec as_full_attention(KvCacheSpec s) {
  if (s.is_attention()) {
    s.kind = KvSpecKind::kFullAttention;
    s.sliding_window = 0;
    s.attention_chunk_size = 0;
  }
  return s;
}

int64_t blocks_needed_per_request(const KvCacheGroup& g) {
  return g.max_blocks_per_request + 1;  // + the pool's null block
}

int64_t required_bytes(const std::vector<KvCacheGroup>& groups) {
  int64_t total = 0;
  for (const auto& g : groups) {
    total = checked_add(total, checked_mul(blocks_needed_per_request(g), g.bytes_per_block, "required_bytes"),
                        "required_bytes");
  }
  return total;
}

int max_sliding_window(const std::vector<LayerKvSpec>& layers) {
  int out = 0;
  for (const auto& l : layers) {
    if (l.spec.kind == KvSpecKind::kSlidingWindow) out = std::max(out, l.spec.sliding_window);
  }
  return out;
}

std::string mib(int64_t bytes) { return str_cat(static_cast<int64_t>(bytes / kMiB * 100) / 100.0, " MiB"); }

// What to do when a budget is too small: the largest max_model_len that fits, and whether the
// model's sliding window allows it.
std::string fit_advice(const std::vector<LayerKvSpec>& layers, int64_t budget_bytes,
                       int64_t max_model_len, const PlannerOptions& options) {
  const int64_t fit = max_model_len_for_budget(layers, budget_bytes, max_model_len, options);
  if (fit == 0) return "not even one token fits. Raise kv_cache_memory_bytes.";
  const int window = max_sliding_window(layers);
  if (fit < window) {
    return str_cat("the largest max_model_len that fits is ", fit, ", below the sliding window of ",
                   window, " tokens that max_model_len must reach. Raise kv_cache_memory_bytes.");
  }
  return str_cat("the largest max_model_len that fits is ", fit,
                 ". Raise kv_cache_memory_bytes or lower max_model_len.");
}


}  // namespace

void validate_layers(const std::vector<LayerKvSpec>& layers, int64_t max_model_len) {
  SPECDEC_CHECK(max_model_len >= 1 && max_model_len <= kMaxTokens, "max_model_len", max_model_len,
               str_cat("must be in [1, ", kMaxTokens, "] tokens"));
  std::map<std::string, size_t> index_of;
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& layer = layers[i];
    SPECDEC_CHECK(!layer.layer_name.empty(), str_cat("layers[", i, "].layer_name"), "''",
                 "every layer needs a name");
    SPECDEC_CHECK(index_of.emplace(layer.layer_name, i).second, str_cat("layers[", i, "].layer_name"),
                 "'" + layer.layer_name + "'", "layer names must be unique");
    validate_spec_of(layer);
    if (layer.spec.kind == KvSpecKind::kSlidingWindow) {
      SPECDEC_CHECK(layer.spec.sliding_window <= max_model_len, layer.layer_name + ".sliding_window",
                   layer.spec.sliding_window,
                   str_cat("must be <= max_model_len = ", max_model_len,
                           " (a window that wide is full attention: declare the layer "
                           "full_attention or raise max_model_len)"));
    }
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    if (!layers[i].kv_sharing_target.empty()) validate_sharing(layers, index_of, i);
  }
}

// Groups without validation (callers validate once).
static std::vector<KvCacheGroup> build_groups(const std::vector<LayerKvSpec>& layers,
                                       int64_t max_model_len, int64_t max_num_batched_tokens,
                                       bool unify = false) {
  std::vector<KvCacheGroup> groups;
  std::map<GroupKey, size_t> group_of_key;
  std::map<std::string, size_t> group_of_layer;
  for (const auto& layer : layers) {
    if (!layer.kv_sharing_target.empty()) {
      const size_t g = group_of_layer.at(layer.kv_sharing_target);
      groups[g].sharing_layer_names.push_back(layer.layer_name);
      group_of_layer[layer.layer_name] = g;
      continue;
    }
    // hybrid manager off: keyed and managed as full attention (the layer keeps its own spec)
    const KvCacheSpec managed = unify ? as_full_attention(layer.spec) : layer.spec;
    auto [it, inserted] = group_of_key.emplace(group_key(managed), groups.size());
    if (inserted) {
      KvCacheGroup group;
      group.spec = managed;
      group.max_blocks_per_request = managed.max_blocks_per_request(max_model_len, max_num_batched_tokens);
      groups.push_back(std::move(group));
    }
    KvCacheGroup& group = groups[it->second];
    group.layer_names.push_back(layer.layer_name);
    group.layer_specs.push_back(layer.spec);
    group.bytes_per_block = checked_add(group.bytes_per_block, layer.spec.page_size_bytes(), "bytes_per_block");
    group_of_layer[layer.layer_name] = it->second;
  }
  return groups;
}

std::vector<KvCacheGroup> group_layers(const std::vector<LayerKvSpec>& layers,
                                       int64_t max_model_len, int64_t max_num_batched_tokens,
                                       bool disable_hybrid_kv_cache_manager) {
  validate_layers(layers, max_model_len);
  return build_groups(layers, max_model_len, max_num_batched_tokens, disable_hybrid_kv_cache_manager);
}

int64_t min_budget_bytes(const std::vector<LayerKvSpec>& layers, int64_t max_model_len,
                         const PlannerOptions& options) {
  return required_bytes(group_layers(layers, max_model_len, options.max_num_batched_tokens,
                                    options.disable_hybrid_kv_cache_manager));
}

int64_t max_model_len_for_budget(const std::vector<LayerKvSpec>& layers, int64_t budget_bytes,
                                 int64_t limit, const PlannerOptions& options) {
  validate_layers(layers, kMaxTokens);  // window limits do not apply to the byte count
  limit = std::min(limit, kMaxTokens);
  auto fits = [&](int64_t len) {
    try {
      return required_bytes(build_groups(layers, len, options.max_num_batched_tokens,
                                         options.disable_hybrid_kv_cache_manager)) <= budget_bytes;
    } catch (const ConfigError&) {  // the byte count overflows: certainly does not fit
      return false;
    }
  };
  if (limit < 1 || !fits(1)) return 0;
  int64_t lo = 1, hi = limit;  // fits(lo) holds
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (fits(mid)) lo = mid; else hi = mid - 1;
  }
  return lo;
}

KvCacheConfig plan_kv_cache(const std::vector<LayerKvSpec>& layers, int64_t budget_bytes,
                            int64_t max_model_len, const PlannerOptions& options) {
  SPECDEC_CHECK(budget_bytes >= 0, "kv_cache_memory_bytes", budget_bytes, "must be >= 0");
  SPECDEC_CHECK(options.num_blocks_override >= 0, "num_blocks_override",
               options.num_blocks_override, "must be >= 0 (0 = size from the budget)");
  KvCacheConfig config;
  config.groups = group_layers(layers, max_model_len, options.max_num_batched_tokens,
                               options.disable_hybrid_kv_cache_manager);
  config.max_model_len = max_model_len;
  config.max_num_batched_tokens = options.max_num_batched_tokens;
  config.budget_bytes = budget_bytes;
  config.model_name = options.model_name;
  config.disable_hybrid_kv_cache_manager = options.disable_hybrid_kv_cache_manager;

  const int64_t required = required_bytes(config.groups);
  if (options.num_blocks_override > 0) {
    SPECDEC_CHECK(options.num_blocks_override >= 2, "num_blocks_override",
                 options.num_blocks_override, "must be >= 2 (block 0 is the null block)");
    for (auto& g : config.groups) {
      SPECDEC_CHECK(options.num_blocks_override <= INT32_MAX / g.spec.block_size, "num_blocks_override",
                   options.num_blocks_override,
                   str_cat("must be <= ", INT32_MAX / g.spec.block_size, " (slots are int32)"));
      g.num_blocks = options.num_blocks_override;
    }
  } else if (!config.groups.empty()) {
    if (budget_bytes < required) {
      throw ConfigError("kv_cache_memory_bytes", str_cat(budget_bytes, " (", mib(budget_bytes), ")"),
                        str_cat("one request of max_model_len = ", max_model_len, " needs ", required,
                                " bytes (", mib(required), ") of KV cache",
                                options.model_name.empty() ? "" : " for " + options.model_name, "; ",
                                fit_advice(layers, budget_bytes, max_model_len, options)));
    }
    // Every group gets the same multiple of its per-request need, capped so that every slot
    // (block_id * block_size + offset) fits the int32 slot mappings.
    for (auto& g : config.groups) {
      const __int128 scaled = static_cast<__int128>(budget_bytes) * blocks_needed_per_request(g);
      g.num_blocks = std::min<int64_t>(static_cast<int64_t>(scaled / required), INT32_MAX / g.spec.block_size);
      SPECDEC_CHECK(g.num_blocks >= blocks_needed_per_request(g), "max_model_len", max_model_len,
                   "one request needs more blocks than int32 slot mappings can address; lower max_model_len");
    }
  }
  for (size_t gi = 0; gi < config.groups.size(); ++gi) {
    const auto& g = config.groups[gi];
    for (size_t i = 0; i < g.layer_names.size(); ++i) {
      KvCacheTensor t;
      t.size_bytes = checked_mul(g.num_blocks, g.layer_specs[i].page_size_bytes(), "tensor size");
      t.shared_by.push_back(g.layer_names[i]);
      t.group_id = static_cast<int>(gi);
      config.tensors.push_back(std::move(t));
    }
  }
  for (const auto& layer : layers) {
    if (layer.kv_sharing_target.empty()) continue;
    config.kv_sharing[layer.layer_name] = layer.kv_sharing_target;
    config.tensors[config.tensor_of(layer.kv_sharing_target)].shared_by.push_back(layer.layer_name);
  }
  return config;
}

namespace {

// Plans one side of a target + drafter pair; its errors name the side.
KvCacheConfig plan_side(const char* side, const std::vector<LayerKvSpec>& layers, int64_t budget_bytes,
                        int64_t max_model_len, const PlannerOptions& options) {
  try {
    return plan_kv_cache(layers, budget_bytes, max_model_len, options);
  } catch (const ConfigError& e) {
    throw e.with_prefix(side);
  }
}

// Largest max_model_len whose request fits both models' needs in budget_bytes together.
int64_t max_model_len_for_pair(const std::vector<LayerKvSpec>& target, const std::vector<LayerKvSpec>& drafter,
                               int64_t budget_bytes, int64_t limit, const PlannerOptions& t_opt,
                               const PlannerOptions& d_opt) {
  auto fits = [&](int64_t len) {
    try {
      return checked_add(min_budget_bytes(target, len, t_opt), min_budget_bytes(drafter, len, d_opt),
                         "required_bytes") <= budget_bytes;
    } catch (const ConfigError&) {
      return false;
    }
  };
  if (limit < 1 || !fits(1)) return 0;
  int64_t lo = 1, hi = std::min(limit, kMaxTokens);
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (fits(mid)) lo = mid; else hi = mid - 1;
  }
  return lo;
}

}  // namespace

SpecDecodeKvPlan plan_target_and_drafter(const std::vector<LayerKvSpec>& target_layers,
                                         const std::vector<LayerKvSpec>& drafter_layers,
                                         int64_t budget_bytes, int64_t max_model_len,
                                         double drafter_fraction,
                                         const PlannerOptions& target_options,
                                         const PlannerOptions& drafter_options) {
  SPECDEC_CHECK(budget_bytes >= 0, "kv_cache_memory_bytes", budget_bytes, "must be >= 0");
  SPECDEC_CHECK(!target_layers.empty(), "target_layers", "[]", "the target needs at least one attention layer");
  SPECDEC_CHECK(!drafter_layers.empty(), "drafter_layers", "[]",
               "a drafter with a KV cache needs at least one attention layer");
  SpecDecodeKvPlan plan;
  const int64_t need_t = min_budget_bytes(target_layers, max_model_len, target_options);
  const int64_t need_d = min_budget_bytes(drafter_layers, max_model_len, drafter_options);
  const int64_t need = checked_add(need_t, need_d, "required_bytes");
  if (budget_bytes < need) {
    const int64_t fit = max_model_len_for_pair(target_layers, drafter_layers, budget_bytes, max_model_len,
                                               target_options, drafter_options);
    throw ConfigError("kv_cache_memory_bytes", str_cat(budget_bytes, " (", mib(budget_bytes), ")"),
                      str_cat("one request of max_model_len = ", max_model_len, " needs ", need, " bytes (",
                              mib(need), "): ", need_t, " for the target and ", need_d, " for the drafter; ",
                              fit > 0 ? str_cat("the largest max_model_len that fits both is ", fit)
                                      : std::string("not even one token fits"),
                              ". Raise kv_cache_memory_bytes or lower max_model_len."));
  }
  if (drafter_fraction < 0) {
    plan.drafter_budget_bytes = static_cast<int64_t>(static_cast<__int128>(budget_bytes) * need_d / need);
    plan.split = str_cat("proportional to one max_model_len request (target ", need_t,
                         " B : drafter ", need_d, " B), so both hold the same number of requests");
  } else {
    SPECDEC_CHECK(drafter_fraction > 0 && drafter_fraction < 1, "drafter_fraction",
                 drafter_fraction, "must be in (0, 1), or < 0 for the proportional split");
    plan.drafter_budget_bytes = static_cast<int64_t>(static_cast<double>(budget_bytes) * drafter_fraction);
    plan.split = str_cat("fixed: drafter_fraction = ", drafter_fraction);
  }
  plan.target_budget_bytes = budget_bytes - plan.drafter_budget_bytes;
  plan.target = plan_side("target", target_layers, plan.target_budget_bytes, max_model_len, target_options);
  plan.drafter = plan_side("drafter", drafter_layers, plan.drafter_budget_bytes, max_model_len, drafter_options);
  return plan;
}

}  // namespace specdec::kv
