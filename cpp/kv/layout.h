// KV-cache layouts: how one layer's cache is laid out in its raw tensor, as declared by the
// layer's attention backend, and element-exact views of a layer's K and V parts.
//
//   kKvMajor     [2, num_blocks, block_size, num_kv_heads, head]  all K blocks, then all V blocks
//                (when head_size_v != head_size: K [nb, bs, H, D] then V [nb, bs, H, Dv])
//   kBlockMajor  [num_blocks, 2, num_kv_heads, block_size, head]  per block: K [H, bs, D], V [H, bs, Dv]
//   kMlaLatent   [num_blocks, block_size, kv_lora_rank + qk_rope_head_dim]  one latent row per
//                token; k part = the first kv_lora_rank elements, v part = the rope rest
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "kv/spec.h"

namespace specdec::kv {

enum class KvLayout { kKvMajor, kBlockMajor, kMlaLatent };

std::string layout_name(KvLayout layout);            // "kv_major", "block_major", "mla_latent"
KvLayout parse_layout(const std::string& name);      // ConfigError naming "layout"
std::vector<KvLayout> all_layouts();
// Whether a layer with this spec can be stored in this layout (MLA needs kMlaLatent, attention
// needs one of the other two).
bool layout_fits(KvLayout layout, const KvCacheSpec& spec);

// One part (K or V) of a layer's cache: element (block, slot, head, dim) sits at element
// offset + block*stride_block + slot*stride_slot + head*stride_head + dim of the raw tensor
// (elements of the layer's dtype). A part of width 0 has no elements and is never indexed.
struct KvPartView {
  int64_t offset = 0;         // elements
  int64_t stride_block = 0;   // elements
  int64_t stride_slot = 0;    // elements
  int64_t stride_head = 0;    // elements
  int num_heads = 0;
  int width = 0;              // elements per head (head size of this part)

  int64_t index(int64_t block, int64_t slot, int64_t head, int64_t dim) const {
    return offset + block * stride_block + slot * stride_slot + head * stride_head + dim;
  }
  bool empty() const { return width == 0; }
};

// A layer's view of its (possibly shared) raw tensor.
struct LayerKvView {
  std::string layer_name;
  int tensor_index = 0;
  KvLayout layout = KvLayout::kKvMajor;
  KvCacheSpec spec;
  int64_t num_blocks = 0;
  KvPartView k;
  KvPartView v;
  std::vector<int64_t> shape;    // logical shape of the whole layout (see header comment)
  std::vector<int64_t> strides;  // element strides of that shape; empty when not one tensor

  int64_t size_bytes() const { return num_blocks * spec.page_size_bytes(); }
  // Same bytes mean the same thing through both views.
  bool same_layout(const LayerKvView& other) const;
};

// The view of a tensor of tensor_bytes bytes holding `spec`'s pages in `layout`. Throws
// UnsupportedError when the layout cannot hold the spec and ConfigError when tensor_bytes is
// not a whole number of pages.
LayerKvView make_layer_view(const std::string& layer_name, int tensor_index,
                            const KvCacheSpec& spec, KvLayout layout, int64_t tensor_bytes);

}  // namespace specdec::kv
