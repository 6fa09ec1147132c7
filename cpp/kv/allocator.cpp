#include "kv/allocator.h"

#include "common/errors.h"

namespace specdec::kv {

std::vector<LayerKvView> make_layer_views(const KvCacheConfig& config, const LayoutMap& layouts,
                                          KvLayout default_attention_layout) {
  const auto specs = config.layer_specs();
  for (const auto& [layer, layout] : layouts) {
    SPECDEC_CHECK(specs.count(layer) == 1, "layouts", "'" + layer + "'",
                 "names no layer of this KV-cache plan");
  }
  std::vector<LayerKvView> views;
  for (size_t t = 0; t < config.tensors.size(); ++t) {
    const auto& tensor = config.tensors[t];
    const size_t first = views.size();  // the owning layer's view
    for (const auto& layer : tensor.shared_by) {
      const KvCacheSpec& spec = specs.at(layer);
      // Default: MLA -> latent; an owning layer -> the default; a sharing layer -> its owner's.
      KvLayout layout = spec.kind == KvSpecKind::kMla ? KvLayout::kMlaLatent : default_attention_layout;
      if (views.size() > first) layout = views[first].layout;
      if (auto it = layouts.find(layer); it != layouts.end()) layout = it->second;
      views.push_back(make_layer_view(layer, static_cast<int>(t), spec, layout, tensor.size_bytes));
      const LayerKvView& owner = views[first];
      if (!views.back().same_layout(owner)) {
        throw ConfigError(
            "layouts", str_cat(layer, ": ", layout_name(layout)),
            str_cat("layer ", layer, " shares KV tensor ", t, " with ", owner.layer_name,
                    " (", layout_name(owner.layout), ", ", owner.spec.to_string(), ") but would read it as ",
                    layout_name(layout), ", ", spec.to_string(),
                    "; layers aliasing one tensor must use identical layouts"));
      }
    }
  }
  return views;
}

KvCacheAllocation::KvCacheAllocation(std::shared_ptr<device::Device> dev, const KvCacheConfig& config,
                                     const LayoutMap& layouts, KvLayout default_attention_layout)
    : dev_(std::move(dev)), config_(config) {
  SPECDEC_CHECK(dev_ != nullptr, "context", "null", "an OpenCL context is required");
  views_ = make_layer_views(config_, layouts, default_attention_layout);
  const device::Info& device = dev_->info();
  if (config_.total_bytes() > device.global_mem_bytes) {
    throw UnsupportedError(str_cat("the KV-cache plan needs ", config_.total_bytes(), " bytes but ",
                                   device.name, " has ", device.global_mem_bytes,
                                   " bytes of global memory; plan with a smaller kv_cache_memory_bytes"));
  }
  for (size_t i = 0; i < views_.size(); ++i) view_index_[views_[i].layer_name] = i;
  buffers_.reserve(config_.tensors.size());
  for (const auto& tensor : config_.tensors) {
    buffers_.push_back(dev_->allocate(static_cast<size_t>(tensor.size_bytes), device::Lifetime::kModel));
    dev_->fill_zero(buffers_.back());
  }
  dev_->sync();
}

const LayerKvView& KvCacheAllocation::view(const std::string& layer_name) const {
  auto it = view_index_.find(layer_name);
  SPECDEC_CHECK(it != view_index_.end(), "layer_name", "'" + layer_name + "'",
               "not a layer of this KV cache");
  return views_[it->second];
}

const device::Buffer& KvCacheAllocation::tensor(int index) const {
  SPECDEC_CHECK(index >= 0 && index < static_cast<int>(buffers_.size()), "tensor_index", index,
               str_cat("must be in [0, ", buffers_.size(), ")"));
  return buffers_[index];
}

device::Buffer& KvCacheAllocation::tensor(int index) {
  return const_cast<device::Buffer&>(static_cast<const KvCacheAllocation*>(this)->tensor(index));
}

const device::Buffer& KvCacheAllocation::tensor_of(const std::string& layer_name) const {
  return buffers_[view(layer_name).tensor_index];
}

int64_t KvCacheAllocation::total_bytes() const { return config_.total_bytes(); }

std::vector<uint8_t> KvCacheAllocation::read_tensor(int index) const {
  const device::Buffer& b = tensor(index);
  std::vector<uint8_t> out(b.size_bytes());
  dev_->read(b, out.data(), out.size());
  return out;
}

}  // namespace specdec::kv
