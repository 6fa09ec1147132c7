// KV-cache allocation: one device buffer per KV tensor of a plan, and per-layer views of it in
// the layout each layer's backend declares. Layers that alias one tensor (KV sharing) must use
// identical layouts; anything else would silently corrupt the cache and is an error.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "device/device.h"
#include "kv/config.h"
#include "kv/layout.h"

namespace specdec::kv {

// The layout of every layer: `layouts[layer]` when present, else for a layer sharing another's
// KV the owner's layout, else kMlaLatent for MLA and `default_attention_layout` otherwise.
using LayoutMap = std::map<std::string, KvLayout>;

// Views of every layer of `config`, in tensor order. Throws ConfigError when layers sharing a
// tensor have different layouts or a layout names an unknown layer, UnsupportedError when a
// layout cannot hold a layer's spec.
std::vector<LayerKvView> make_layer_views(const KvCacheConfig& config, const LayoutMap& layouts,
                                          KvLayout default_attention_layout = KvLayout::kKvMajor);

class KvCacheAllocation {
 public:
  // Allocates and zero-fills one buffer per tensor of `config` on the device.
  KvCacheAllocation(std::shared_ptr<device::Device> dev, const KvCacheConfig& config,
                    const LayoutMap& layouts = {},
                    KvLayout default_attention_layout = KvLayout::kKvMajor);

  const KvCacheConfig& config() const { return config_; }
  const std::vector<LayerKvView>& views() const { return views_; }
  const LayerKvView& view(const std::string& layer_name) const;
  size_t num_tensors() const { return buffers_.size(); }
  device::Buffer& tensor(int index);
  const device::Buffer& tensor(int index) const;
  const device::Buffer& tensor_of(const std::string& layer_name) const;
  int64_t total_bytes() const;
  std::vector<uint8_t> read_tensor(int index) const;  // blocking copy to the host
  device::Device& device() const { return *dev_; }

 private:
  std::shared_ptr<device::Device> dev_;
  KvCacheConfig config_;
  std::vector<LayerKvView> views_;
  std::map<std::string, size_t> view_index_;
  std::vector<device::Buffer> buffers_;
};

}  // namespace specdec::kv
