#include "kv/layout.h"

#include <algorithm>
#include <cctype>

#include "common/errors.h"

namespace specdec::kv {

std::string layout_name(KvLayout layout) {
  switch (layout) {
    case KvLayout::kKvMajor: return "kv_major";
    case KvLayout::kBlockMajor: return "block_major";
    case KvLayout::kMlaLatent: return "mla_latent";
  }
  return "unknown";
}

std::vector<KvLayout> all_layouts() {
  return {KvLayout::kKvMajor, KvLayout::kBlockMajor, KvLayout::kMlaLatent};
}

KvLayout parse_layout(const std::string& name) {
  std::string s = name;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  for (KvLayout l : all_layouts()) {
    if (layout_name(l) == s) return l;
  }
  throw ConfigError("layout", "'" + name + "'", "allowed layouts are kv_major, block_major, mla_latent");
}

bool layout_fits(KvLayout layout, const KvCacheSpec& spec) {
  return (layout == KvLayout::kMlaLatent) == (spec.kind == KvSpecKind::kMla);
}

bool LayerKvView::same_layout(const LayerKvView& other) const {
  auto same_part = [](const KvPartView& a, const KvPartView& b) {
    return a.offset == b.offset && a.stride_block == b.stride_block &&
           a.stride_slot == b.stride_slot && a.stride_head == b.stride_head &&
           a.num_heads == b.num_heads && a.width == b.width;
  };
  return layout == other.layout && spec.dtype == other.spec.dtype &&
         spec.block_size == other.spec.block_size && num_blocks == other.num_blocks &&
         same_part(k, other.k) && same_part(v, other.v);
}

namespace {

void fill_kv_major(LayerKvView& view) {
  const auto& s = view.spec;
  const int64_t nb = view.num_blocks, bs = s.block_size, h = s.num_kv_heads;
  const int64_t d = s.k_width(), dv = s.v_width();
  view.k = {0, bs * h * d, h * d, d, s.num_kv_heads, static_cast<int>(d)};
  view.v = {nb * bs * h * d, bs * h * dv, h * dv, dv, s.num_kv_heads, static_cast<int>(dv)};
  if (d == dv) {
    view.shape = {2, nb, bs, h, d};
    view.strides = {nb * bs * h * d, bs * h * d, h * d, d, 1};
  }
}

void fill_block_major(LayerKvView& view) {
  const auto& s = view.spec;
  const int64_t bs = s.block_size, h = s.num_kv_heads;
  const int64_t d = s.k_width(), dv = s.v_width();
  const int64_t page = h * bs * (d + dv);
  view.k = {0, page, d, bs * d, s.num_kv_heads, static_cast<int>(d)};
  view.v = {h * bs * d, page, dv, bs * dv, s.num_kv_heads, static_cast<int>(dv)};
  if (d == dv) {
    view.shape = {view.num_blocks, 2, h, bs, d};
    view.strides = {page, h * bs * d, bs * d, d, 1};
  }
}

void fill_mla_latent(LayerKvView& view) {
  const auto& s = view.spec;
  const int64_t bs = s.block_size, row = int64_t{s.kv_lora_rank} + s.qk_rope_head_dim;
  // One latent head: stride_head is never used with a non-zero head index.
  view.k = {0, bs * row, row, 0, 1, s.kv_lora_rank};
  view.v = {s.kv_lora_rank, bs * row, row, 0, 1, s.qk_rope_head_dim};
  view.shape = {view.num_blocks, bs, row};
  view.strides = {bs * row, row, 1};
}

}  // namespace

LayerKvView make_layer_view(const std::string& layer_name, int tensor_index,
                            const KvCacheSpec& spec, KvLayout layout, int64_t tensor_bytes) {
  if (!layout_fits(layout, spec)) {
    throw UnsupportedError(str_cat("layer ", layer_name, ": layout ", layout_name(layout),
                                   " cannot hold ", spec.to_string(),
                                   spec.kind == KvSpecKind::kMla
                                       ? "; MLA caches use the mla_latent layout"
                                       : "; attention caches use kv_major or block_major"));
  }
  const int64_t page = spec.page_size_bytes();
  SPECDEC_CHECK(tensor_bytes > 0 && tensor_bytes % page == 0, layer_name + ".tensor_bytes",
               tensor_bytes, str_cat("must be a positive multiple of the page size ", page));
  LayerKvView view;
  view.layer_name = layer_name;
  view.tensor_index = tensor_index;
  view.layout = layout;
  view.spec = spec;
  view.num_blocks = tensor_bytes / page;
  switch (layout) {
    case KvLayout::kKvMajor: fill_kv_major(view); break;
    case KvLayout::kBlockMajor: fill_block_major(view); break;
    case KvLayout::kMlaLatent: fill_mla_latent(view); break;
  }
  return view;
}

}  // namespace specdec::kv
