// Layout views: every (part, block, slot, head, dim) maps to its own element of the tensor and
// together they cover it exactly; logical shapes agree with the part views.
#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "common/errors.h"
#include "kv/allocator.h"
#include "kv/examples.h"
#include "kv/layout.h"
#include "kv/planner.h"

using namespace specdec;
using namespace specdec::kv;

namespace {

// Marks every element a part addresses; returns false on a collision or an out-of-range index.
bool mark(std::vector<int>& seen, const LayerKvView& v, const KvPartView& p) {
  for (int64_t b = 0; b < v.num_blocks; ++b)
    for (int s = 0; s < v.spec.block_size; ++s)
      for (int h = 0; h < p.num_heads; ++h)
        for (int d = 0; d < p.width; ++d) {
          const int64_t i = p.index(b, s, h, d);
          if (i < 0 || i >= static_cast<int64_t>(seen.size()) || seen[i]++) return false;
        }
  return true;
}

void expect_bijection(const LayerKvView& v) {
  std::vector<int> seen(v.size_bytes() / dtype_size(v.spec.dtype), 0);
  ASSERT_TRUE(mark(seen, v, v.k)) << layout_name(v.layout) << " " << v.spec.to_string();
  ASSERT_TRUE(mark(seen, v, v.v)) << layout_name(v.layout) << " " << v.spec.to_string();
  for (size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "element " << i << " unused";
}

using Case = std::tuple<KvLayout, int, int, int, int>;  // layout, block, heads, head, head_v

std::string case_name(const Case& c) {
  return layout_name(std::get<0>(c)) + "_bs" + std::to_string(std::get<1>(c)) + "_h" +
         std::to_string(std::get<2>(c)) + "_d" + std::to_string(std::get<3>(c)) + "_dv" +
         std::to_string(std::get<4>(c));
}

class LayoutBijection : public ::testing::TestWithParam<Case> {};

TEST_P(LayoutBijection, CoversTheTensorExactlyOnce) {
  const auto [layout, bs, heads, d, dv] = GetParam();
  const auto spec = KvCacheSpec::full_attention(bs, heads, d, DType::kF16, dv);
  const auto view = make_layer_view("l", 0, spec, layout, 5 * spec.page_size_bytes());
  EXPECT_EQ(view.num_blocks, 5);
  expect_bijection(view);
  if (d == dv) {  // the logical shape addresses the same elements as the part views
    ASSERT_EQ(view.shape.size(), 5u);
    const auto& st = view.strides;
    if (layout == KvLayout::kKvMajor) {  // [2, nb, bs, H, D]
      EXPECT_EQ(view.shape, (std::vector<int64_t>{2, 5, bs, heads, d}));
      EXPECT_EQ(view.v.index(3, 1, heads - 1, 2), 1 * st[0] + 3 * st[1] + 1 * st[2] + (heads - 1) * st[3] + 2);
    } else {  // [nb, 2, H, bs, D]
      EXPECT_EQ(view.shape, (std::vector<int64_t>{5, 2, heads, bs, d}));
      EXPECT_EQ(view.v.index(3, 1, heads - 1, 2), 3 * st[0] + 1 * st[1] + (heads - 1) * st[2] + 1 * st[3] + 2);
    }
  } else {
    EXPECT_TRUE(view.shape.empty());
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, LayoutBijection,
    ::testing::Combine(::testing::Values(KvLayout::kKvMajor, KvLayout::kBlockMajor), ::testing::Values(1, 4, 16),
                       ::testing::Values(1, 3), ::testing::Values(8, 64), ::testing::Values(8, 32)),
    [](const ::testing::TestParamInfo<Case>& info) { return case_name(info.param); });

TEST(Layout, KvMajorMatchesTheDocumentedFormula) {
  // [2, nb, bs, H, D]: V of (block 2, slot 3, head 1, dim 5) with nb 4, bs 4, H 2, D 8
  const auto spec = KvCacheSpec::full_attention(4, 2, 8, DType::kF32);
  const auto v = make_layer_view("l", 0, spec, KvLayout::kKvMajor, 4 * spec.page_size_bytes());
  EXPECT_EQ(v.v.index(2, 3, 1, 5), 1 * (4 * 4 * 2 * 8) + 2 * (4 * 2 * 8) + 3 * (2 * 8) + 1 * 8 + 5);
  // [nb, 2, H, bs, D]: K of the same element
  const auto b = make_layer_view("l", 0, spec, KvLayout::kBlockMajor, 4 * spec.page_size_bytes());
  EXPECT_EQ(b.k.index(2, 3, 1, 5), 2 * (2 * 2 * 4 * 8) + 0 * (2 * 4 * 8) + 1 * (4 * 8) + 3 * 8 + 5);
}

TEST(Layout, MlaLatentRowSplitsIntoKAndV) {
  for (auto [lora, rope] : std::vector<std::pair<int, int>>{{512, 64}, {16, 0}, {0, 8}, {5, 3}}) {
    const auto spec = KvCacheSpec::mla(4, lora, rope, DType::kBF16);
    const auto v = make_layer_view("m", 0, spec, KvLayout::kMlaLatent, 3 * spec.page_size_bytes());
    EXPECT_EQ(v.k.width, lora);
    EXPECT_EQ(v.v.width, rope);
    EXPECT_EQ(v.k.empty(), lora == 0);
    EXPECT_EQ(v.v.empty(), rope == 0);
    EXPECT_EQ(v.shape, (std::vector<int64_t>{3, 4, lora + rope}));
    expect_bijection(v);
    if (rope > 0) {
      EXPECT_EQ(v.v.index(1, 2, 0, 0), 1 * 4 * (lora + rope) + 2 * (lora + rope) + lora);
    }
  }
}

TEST(Layout, WrongLayoutForSpecIsRejected) {
  const auto mla = KvCacheSpec::mla(16, 512, 64, DType::kF16);
  const auto att = KvCacheSpec::full_attention(16, 2, 64, DType::kF16);
  EXPECT_THROW(make_layer_view("m", 0, mla, KvLayout::kKvMajor, mla.page_size_bytes()), UnsupportedError);
  EXPECT_THROW(make_layer_view("a", 0, att, KvLayout::kMlaLatent, att.page_size_bytes()), UnsupportedError);
  EXPECT_THROW(make_layer_view("a", 0, att, KvLayout::kKvMajor, att.page_size_bytes() + 2), ConfigError);
  EXPECT_THROW(parse_layout("nhd"), ConfigError);
  EXPECT_EQ(parse_layout("Block_Major"), KvLayout::kBlockMajor);
}

TEST(Layout, AliasedLayersMustAgree) {
  const auto config = plan_kv_cache(example_model_layers("gemma3n-like"), 0, 1024, {2048, 8, ""});
  // sharing layers follow their target's layout by default ...
  const auto views = make_layer_views(config, {{"layers.18", KvLayout::kBlockMajor}});
  for (const auto& v : views) {
    const bool reads_18 = v.tensor_index == config.tensor_of("layers.18");
    EXPECT_EQ(v.layout, reads_18 ? KvLayout::kBlockMajor : KvLayout::kKvMajor) << v.layer_name;
  }
  EXPECT_EQ(views.size(), 30u);
  // ... and a sharing layer read in another layout is an error naming both layers
  try {
    make_layer_views(config, {{"layers.20", KvLayout::kBlockMajor}});
    FAIL() << "no throw";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("layers.20"), std::string::npos) << what;
    EXPECT_NE(what.find("layers.18"), std::string::npos) << what;
    EXPECT_NE(what.find("identical layouts"), std::string::npos) << what;
  }
  EXPECT_THROW(make_layer_views(config, {{"layers.99", KvLayout::kKvMajor}}), ConfigError);
  // layers that own their tensor may use different layouts
  EXPECT_NO_THROW(make_layer_views(config, {{"layers.0", KvLayout::kBlockMajor}}));
}

}  // namespace
