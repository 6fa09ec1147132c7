#include "attention/groups.h"

#include <cctype>
#include <tuple>

#include "common/errors.h"
#include "attention/registry.h"
#include "kv/blocks.h"

namespace specdec::attn {
namespace {

using GroupKey = std::tuple<int, std::string, std::string, int, bool>;  // kv group, backend, spec, q heads, causal

std::map<std::string, const LayerAttentionInfo*> index_layers(const kv::KvCacheConfig& config,
                                                              const std::vector<LayerAttentionInfo>& layers) {
  std::map<std::string, const LayerAttentionInfo*> out;
  for (const auto& l : layers) out[l.layer_name] = &l;
  for (const auto& [name, spec] : config.layer_specs()) {
    SPECDEC_CHECK(out.count(name) == 1, "layers", "'" + name + "'",
                 "every layer of the KV-cache plan needs its attention info (num_q_heads, ...)");
  }
  return out;
}

// "layers.0, layers.1, layers.2, layers.4" -> "layers.0-2, 4".
std::string compress_names(const std::vector<std::string>& names) {
  std::string out;
  std::string prefix = "\x01";  // prefix of the last numbered name written
  int first = -1, last = -1;     // the open run of consecutive numbers
  auto close_run = [&] {
    if (first >= 0) out += first == last ? std::to_string(first) : str_cat(first, "-", last);
    first = -1;
  };
  for (const auto& name : names) {
    size_t d = name.size();
    while (d > 0 && std::isdigit(static_cast<unsigned char>(name[d - 1]))) --d;
    const bool numbered = d < name.size() && name.size() - d <= 9;
    const std::string p = name.substr(0, d);
    const int i = numbered ? std::stoi(name.substr(d)) : 0;
    if (numbered && first >= 0 && p == prefix && i == last + 1) {
      last = i;
      continue;
    }
    close_run();
    if (!out.empty()) out += ", ";
    if (!numbered) {
      out += name;
      prefix = "\x01";
      continue;
    }
    if (p != prefix) out += p;
    prefix = p;
    first = last = i;
  }
  close_run();
  return out;
}

}  // namespace

AttentionSetup initialize_attention(const kv::KvCacheConfig& config, const std::vector<LayerAttentionInfo>& layers,
                                    const std::string& requested_backend, const device::Info& device) {
  const auto info = index_layers(config, layers);
  AttentionSetup setup;
  std::map<GroupKey, int> group_index;
  auto place = [&](int kv_group, const std::string& layer, const kv::KvCacheSpec& spec,
                   std::optional<kv::KvLayout> required_layout) {
    const LayerAttentionInfo& li = *info.at(layer);
    AttentionRequirements r;
    try {
      r = AttentionRequirements::from_spec(spec, li.num_q_heads, li.use_non_causal, li.use_softcap, li.use_sinks);
    } catch (const ConfigError& e) {
      throw e.with_prefix(layer);
    }
    r.required_layout = required_layout;
    BackendChoice choice;
    try {
      choice = select_backend(r, requested_backend, device);
    } catch (const UnsupportedError& e) {
      throw UnsupportedError("layer " + layer + ": " + e.what());
    } catch (const ConfigError& e) {
      throw e.with_prefix(layer);
    }
    const AttentionBackend* b = choice.backend;
    const GroupKey key{kv_group, b->name(), spec.to_string(), li.num_q_heads, !li.use_non_causal};
    auto [it, inserted] = group_index.emplace(key, static_cast<int>(setup.attention_groups.size()));
    if (inserted) {
      setup.attention_groups.push_back({b, b->make_builder(spec, li.num_q_heads), {}, spec, kv_group, li.num_q_heads, !li.use_non_causal});
    }
    setup.attention_groups[it->second].layer_names.push_back(layer);
    setup.layer_to_attention_group[layer] = it->second;
    setup.layer_to_kv_cache_group[layer] = kv_group;
    setup.layouts[layer] = b->kv_layout_for(spec, required_layout);
    setup.choices.emplace(layer, std::move(choice));
  };
  for (size_t g = 0; g < config.groups.size(); ++g) {
    const auto& group = config.groups[g];
    for (size_t i = 0; i < group.layer_names.size(); ++i) {
      place(static_cast<int>(g), group.layer_names[i], group.layer_specs[i], std::nullopt);
    }
  }
  const auto specs = config.layer_specs();
  for (const auto& [layer, target] : config.kv_sharing) {
    place(config.group_of(target), layer, specs.at(layer), setup.layouts.at(target));
  }
  return setup;
}

AttentionSetup initialize_attention(const kv::KvCacheConfig& config, const std::vector<LayerAttentionInfo>& layers,
                                    const std::string& requested_backend, const std::string& device_type) {
  return initialize_attention(config, layers, requested_backend, opencl_device_info(device_type));
}

std::string AttentionSetup::explain() const {
  std::string out;
  for (size_t i = 0; i < attention_groups.size(); ++i) {
    const auto& g = attention_groups[i];
    out += str_cat("attention group ", i, " (KV-cache group ", g.kv_cache_group_id, "): ", g.backend->name(),
                   ", layout ", kv::layout_name(layouts.at(g.layer_names.front())), ", ", g.layer_names.size(),
                   " layer(s), ", g.num_q_heads, " q heads, ", g.causal ? "causal" : "non-causal", "\n");
    out += "  spec   " + g.spec.to_string() + "\n";
    out += "  layers " + compress_names(g.layer_names) + "\n";
    const BackendChoice& c = choices.at(g.layer_names.front());
    std::string why = c.explain();
    std::string indented;
    for (size_t start = 0; start < why.size();) {
      const size_t end = why.find('\n', start);
      indented += "    " + why.substr(start, end - start) + "\n";
      start = end == std::string::npos ? why.size() : end + 1;
    }
    out += "  selection\n" + indented;
  }
  return out;
}

std::vector<AttentionMetadata> build_step_metadata(device::Device& dev, const AttentionSetup& setup,
                                                   const kv::KvCacheManager& manager,
                                                   const std::vector<ScheduledRequest>& requests) {
  std::map<std::pair<int, bool>, CommonAttentionMetadata> common;  // (kv group, causal) -> metadata
  std::vector<AttentionMetadata> out;
  out.reserve(setup.attention_groups.size());
  for (const auto& g : setup.attention_groups) {
    const auto key = std::make_pair(g.kv_cache_group_id, g.causal);
    auto it = common.find(key);
    if (it == common.end()) {
      it = common.emplace(key, build_common_metadata(manager, g.kv_cache_group_id, requests, g.causal)).first;
    }
    out.push_back(g.builder->build(dev, it->second));
  }
  return out;
}

}  // namespace specdec::attn
