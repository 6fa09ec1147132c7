// Worked examples of the planner, with the numbers computed by hand in the comments.
#include <gtest/gtest.h>

#include "common/errors.h"
#include "kv/examples.h"
#include "kv/planner.h"

using namespace specdec;
using namespace specdec::kv;

namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

std::vector<std::string> names(std::initializer_list<int> ids) {
  std::vector<std::string> out;
  for (int i : ids) out.push_back("layers." + std::to_string(i));
  return out;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

}  // namespace

TEST(Planner, Gemma3_270m_TwoGroups) {
  const auto layers = example_model_layers("gemma3-270m", 16, DType::kF16);
  ASSERT_EQ(layers.size(), 18u);
  const auto c = plan_kv_cache(layers, kGiB, 32768);
  ASSERT_EQ(c.groups.size(), 2u);
  const auto& sw = c.groups[0];
  const auto& full = c.groups[1];
  EXPECT_EQ(sw.spec.kind, KvSpecKind::kSlidingWindow);
  EXPECT_EQ(sw.spec.sliding_window, 512);
  EXPECT_EQ(sw.layer_names, names({0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 12, 13, 14, 15, 16}));
  EXPECT_EQ(full.spec.kind, KvSpecKind::kFullAttention);
  EXPECT_EQ(full.layer_names, names({5, 11, 17}));
  // page = 16 tokens * 1 head * (256 + 256) * 2 bytes = 16384
  EXPECT_EQ(sw.spec.page_size_bytes(), 16384);
  EXPECT_EQ(sw.bytes_per_block, 15 * 16384);
  EXPECT_EQ(full.bytes_per_block, 3 * 16384);
  // sliding: min(512 - 1 + 2048, 32768) = 2559 tokens -> cdiv(2559, 16) + 1 = 161 blocks
  EXPECT_EQ(sw.max_blocks_per_request, 161);
  EXPECT_EQ(full.max_blocks_per_request, 2048);  // 32768 / 16
  // one request: (161 + 1 null) * 245760 + (2048 + 1) * 49152 = 140525568 bytes
  EXPECT_EQ(min_budget_bytes(layers, 32768), 140525568);
  // 1 GiB split in proportion: floor(2^30 * 162 / 140525568), floor(2^30 * 2049 / 140525568)
  EXPECT_EQ(sw.num_blocks, 1237);
  EXPECT_EQ(full.num_blocks, 15656);
  EXPECT_EQ(sw.max_concurrent_requests(), 7);    // 1236 / 161
  EXPECT_EQ(full.max_concurrent_requests(), 7);  // 15655 / 2048
  EXPECT_EQ(c.max_concurrent_requests(), 7);
  EXPECT_EQ(full.token_capacity(), 15655 * 16);
  ASSERT_EQ(c.tensors.size(), 18u);
  EXPECT_EQ(c.tensors[0].size_bytes, 1237 * 16384);
  EXPECT_EQ(c.tensors[0].shared_by, names({0}));
  EXPECT_EQ(c.tensors[15].shared_by, names({5}));
  EXPECT_EQ(c.tensors[15].size_bytes, 15656 * 16384);
  EXPECT_LE(c.total_bytes(), kGiB);
  EXPECT_GT(c.total_bytes(), kGiB - 245760 - 49152);  // at most one block of each group lost
  EXPECT_EQ(c.group_of("layers.11"), 1);
  EXPECT_EQ(c.tensor_of("layers.17"), 17);
}

TEST(Planner, SmolLM2_135m_OneGroup) {
  const auto layers = example_model_layers("smollm2-135m", 16, DType::kF16);
  const auto c = plan_kv_cache(layers, kGiB, 8192);
  ASSERT_EQ(c.groups.size(), 1u);
  EXPECT_EQ(c.groups[0].layer_names.size(), 30u);
  // page = 16 * 3 heads * (64 + 64) * 2 bytes = 12288; block over 30 layers = 368640
  EXPECT_EQ(c.groups[0].spec.page_size_bytes(), 12288);
  EXPECT_EQ(c.groups[0].bytes_per_block, 368640);
  EXPECT_EQ(min_budget_bytes(layers, 8192), 513 * 368640);  // (8192 / 16 + 1 null) blocks
  EXPECT_EQ(c.groups[0].num_blocks, 2912);  // floor(2^30 / 368640)
  EXPECT_EQ(c.groups[0].max_concurrent_requests(), 5);  // 2911 / 512
  EXPECT_EQ(c.tensors.size(), 30u);
  // f32 doubles the page, bf16 matches f16, int8 halves it
  EXPECT_EQ(example_model_layers("smollm2-135m", 16, DType::kF32)[0].spec.page_size_bytes(), 24576);
  EXPECT_EQ(example_model_layers("smollm2-135m", 16, DType::kBF16)[0].spec.page_size_bytes(), 12288);
  EXPECT_EQ(example_model_layers("smollm2-135m", 16, DType::kI8)[0].spec.page_size_bytes(), 6144);
}

TEST(Planner, DeepSeekV2LiteMla) {
  const auto layers = example_model_layers("deepseek-v2-lite", 16, DType::kF16);
  const auto c = plan_kv_cache(layers, kGiB, 32768);
  ASSERT_EQ(c.groups.size(), 1u);
  EXPECT_EQ(c.groups[0].spec.kind, KvSpecKind::kMla);
  // latent row 512 + 64 = 576; page = 16 * 576 * 2 = 18432 (no K/V factor 2)
  EXPECT_EQ(c.groups[0].spec.page_size_bytes(), 18432);
  EXPECT_EQ(c.groups[0].bytes_per_block, 27 * 18432);
  EXPECT_EQ(min_budget_bytes(layers, 32768), 2049 * 497664);  // 1019713536
  EXPECT_EQ(c.groups[0].num_blocks, 2157);  // floor(2^30 / 497664)
  EXPECT_EQ(c.max_concurrent_requests(), 1);
}

TEST(Planner, Llama4LikeChunkedLocal) {
  const auto layers = example_model_layers("llama4-like", 16, DType::kF16);
  const auto c = plan_kv_cache(layers, 8 * kGiB, 65536);
  ASSERT_EQ(c.groups.size(), 2u);
  EXPECT_EQ(c.groups[0].spec.kind, KvSpecKind::kChunkedLocal);
  EXPECT_EQ(c.groups[0].layer_names.size(), 36u);
  EXPECT_EQ(c.groups[1].layer_names, names({3, 7, 11, 15, 19, 23, 27, 31, 35, 39, 43, 47}));
  // page = 16 * 8 * 256 * 2 = 65536; chunked: min(8192 + 2048, 65536) / 16 = 640 blocks
  EXPECT_EQ(c.groups[0].max_blocks_per_request, 640);
  EXPECT_EQ(c.groups[1].max_blocks_per_request, 4096);
  // 641 * 36 * 65536 + 4097 * 12 * 65536 = 4734320640
  EXPECT_EQ(min_budget_bytes(layers, 65536), 4734320640LL);
  EXPECT_EQ(c.groups[0].num_blocks, 8 * kGiB * 641 / 4734320640LL);
  EXPECT_EQ(c.groups[1].num_blocks, 8 * kGiB * 4097 / 4734320640LL);
  // 1 GiB cannot hold one request of 65536 tokens
  const std::string err = error_of([&] { plan_kv_cache(layers, kGiB, 65536); });
  EXPECT_NE(err.find("kv_cache_memory_bytes"), std::string::npos) << err;
  EXPECT_NE(err.find("4734320640"), std::string::npos) << err;
  EXPECT_NE(err.find("largest max_model_len that fits is"), std::string::npos) << err;
}

TEST(Planner, Gemma3nLikeKvSharing) {
  const auto layers = example_model_layers("gemma3n-like", 16, DType::kF16);
  const auto c = plan_kv_cache(layers, kGiB, 32768);
  ASSERT_EQ(c.groups.size(), 2u);
  EXPECT_EQ(c.groups[0].layer_names, names({0, 1, 2, 3, 5, 6, 7, 8, 10, 11, 12, 13, 15, 16, 17, 18}));
  EXPECT_EQ(c.groups[0].sharing_layer_names, names({20, 21, 22, 23, 25, 26, 27, 28}));
  EXPECT_EQ(c.groups[1].layer_names, names({4, 9, 14, 19}));
  EXPECT_EQ(c.groups[1].sharing_layer_names, names({24, 29}));
  EXPECT_EQ(c.tensors.size(), 20u);  // only the 20 owning layers get memory
  EXPECT_EQ(c.tensors[c.tensor_of("layers.18")].shared_by,
            names({18, 20, 21, 22, 23, 25, 26, 27, 28}));
  EXPECT_EQ(c.tensor_of("layers.29"), c.tensor_of("layers.19"));
  EXPECT_EQ(c.group_of("layers.24"), 1);
  // page = 16 * 2 * 512 * 2 = 32768; (161+1) * 16 * 32768 + 2049 * 4 * 32768 = 353501184
  EXPECT_EQ(min_budget_bytes(layers, 32768), 353501184);
  // Sharing halves the memory per token of the last 10 layers: a model without sharing needs more.
  auto unshared = layers;
  for (auto& l : unshared) l.kv_sharing_target.clear();
  EXPECT_GT(min_budget_bytes(unshared, 32768), min_budget_bytes(layers, 32768));
}

TEST(Planner, TargetAndDrafterFromOneBudget) {
  const auto target = example_model_layers("qwen2.5-coder-1.5b");
  const auto drafter = example_model_layers("qwen2.5-coder-0.5b");
  // target page = 16 * 2 * 256 * 2 = 16384, x28 = 458752 per block; drafter 8192 x24 = 196608
  const int64_t need_t = 2049 * 458752LL, need_d = 2049 * 196608LL;
  const auto plan = plan_target_and_drafter(target, drafter, 4 * kGiB, 32768);
  EXPECT_EQ(plan.drafter_budget_bytes, 4 * kGiB * need_d / (need_t + need_d));
  EXPECT_EQ(plan.target_budget_bytes + plan.drafter_budget_bytes, 4 * kGiB);
  EXPECT_EQ(plan.target.max_concurrent_requests(), plan.drafter.max_concurrent_requests());
  EXPECT_LE(plan.target.total_bytes() + plan.drafter.total_bytes(), 4 * kGiB);
  const auto fixed = plan_target_and_drafter(target, drafter, 4 * kGiB, 32768, 0.25);
  EXPECT_EQ(fixed.drafter_budget_bytes, kGiB);
  EXPECT_NE(error_of([&] { plan_target_and_drafter(target, drafter, 4 * kGiB, 32768, 1.5); }).find("drafter_fraction"),
            std::string::npos);
  EXPECT_NE(error_of([&] { plan_target_and_drafter(target, drafter, need_t, 32768); }).find("for the drafter"),
            std::string::npos);
}

TEST(Planner, NumBlocksOverrideAndEmptyModel) {
  const auto layers = example_model_layers("gemma3-270m");
  const auto c = plan_kv_cache(layers, 0, 4096, {2048, 64, ""});
  for (const auto& g : c.groups) EXPECT_EQ(g.num_blocks, 64);
  EXPECT_EQ(c.tensors[0].size_bytes, 64 * 16384);
  EXPECT_TRUE(plan_kv_cache({}, kGiB, 4096).groups.empty());
}

TEST(Planner, BudgetTooSmallNamesBytesAndLargestLength) {
  const auto layers = example_model_layers("smollm2-135m");
  // 100 blocks of 368640 bytes: 99 usable blocks -> 99 * 16 = 1584 tokens fit, not 8192
  const std::string err = error_of([&] { plan_kv_cache(layers, 100 * 368640, 8192); });
  EXPECT_NE(err.find("kv_cache_memory_bytes"), std::string::npos) << err;
  EXPECT_NE(err.find(std::to_string(513 * 368640)), std::string::npos) << err;
  EXPECT_NE(err.find("largest max_model_len that fits is 1584"), std::string::npos) << err;
  EXPECT_EQ(max_model_len_for_budget(layers, 100 * 368640, 8192), 1584);
  EXPECT_EQ(max_model_len_for_budget(layers, 368640, 8192), 0);  // only the null block
  EXPECT_NE(error_of([&] { plan_kv_cache(layers, 1000, 8192); }).find("not even one token fits"),
            std::string::npos);
}

TEST(Planner, BadLayersNameTheField) {
  auto spec = KvCacheSpec::full_attention(16, 2, 64, DType::kF16);
  auto sw = KvCacheSpec::sliding(16, 2, 64, DType::kF16, 4096);
  EXPECT_NE(error_of([&] { plan_kv_cache({{"a", sw, ""}}, kGiB, 2048); }).find("a.sliding_window = 4096"),
            std::string::npos);
  EXPECT_NE(error_of([&] { plan_kv_cache({{"a", spec, ""}, {"b", spec, "zz"}}, kGiB, 2048); })
                .find("b.kv_sharing_target = 'zz': no layer of that name"),
            std::string::npos);
  EXPECT_NE(error_of([&] { plan_kv_cache({{"a", spec, ""}, {"b", sw.with_block_size(16), "a"}}, kGiB, 8192); })
                .find("b.kv_sharing_target = 'a'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { plan_kv_cache({{"a", spec, "b"}, {"b", spec, ""}}, kGiB, 2048); })
                .find("must come before"),
            std::string::npos);
  EXPECT_NE(error_of([&] { plan_kv_cache({{"a", spec, "a"}}, kGiB, 2048); }).find("own KV cache"),
            std::string::npos);
  EXPECT_NE(error_of([&] { plan_kv_cache({{"a", spec, ""}, {"a", spec, ""}}, kGiB, 2048); })
                .find("layers[1].layer_name = 'a'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { plan_kv_cache({{"a", spec, ""}}, kGiB, 0); }).find("max_model_len = 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { plan_kv_cache({{"a", spec, ""}}, -5, 2048); }).find("kv_cache_memory_bytes = -5"),
            std::string::npos);
  KvCacheSpec broken = spec;
  broken.num_kv_heads = 0;
  EXPECT_NE(error_of([&] { plan_kv_cache({{"x", broken, ""}}, kGiB, 2048); }).find("x.num_kv_heads = 0"),
            std::string::npos);
}

TEST(Planner, TooSmallForTheWindowSaysSo) {
  const auto layers = example_model_layers("gemma3-270m");
  const std::string err = error_of([&] { plan_kv_cache(layers, 8 << 20, 32768); });
  EXPECT_NE(err.find("below the sliding window of 512 tokens"), std::string::npos) << err;
  // a suggested length that is not below the window really plans
  const auto smol = example_model_layers("smollm2-135m");
  const int64_t fit = max_model_len_for_budget(smol, 64 << 20, 32768);
  EXPECT_GT(fit, 0);
  EXPECT_NO_THROW(plan_kv_cache(smol, 64 << 20, fit));
  EXPECT_THROW(plan_kv_cache(smol, 64 << 20, fit + 1), ConfigError);
}

TEST(Planner, ExtremeValuesAreErrorsNotOverflows) {
  const auto smol = example_model_layers("smollm2-135m");
  EXPECT_NE(error_of([&] { plan_kv_cache(smol, kGiB, int64_t{1} << 62); }).find("max_model_len"), std::string::npos);
  EXPECT_NE(error_of([&] { smol[0].spec.max_blocks_per_request(INT64_MAX, 1); }).find("max_model_len"), std::string::npos);
  EXPECT_NE(error_of([&] { smol[0].spec.max_blocks_per_request(100, INT64_MAX); }).find("max_num_batched_tokens"),
            std::string::npos);
  // the largest length for a budget, asked with a huge limit, is still answered
  EXPECT_EQ(max_model_len_for_budget(smol, 100 * 368640, INT64_MAX), 1584);
  // sums of huge layers overflow into an error, never into a negative byte count
  std::vector<LayerKvSpec> huge;
  for (int i = 0; i < 4; ++i) {
    huge.push_back({"l" + std::to_string(i), KvCacheSpec::full_attention(65536, 4096, 65536, DType::kF32), ""});
  }
  EXPECT_THROW(min_budget_bytes(huge, int64_t{1} << 40), ConfigError);
}

TEST(Planner, TargetAndDrafterErrors) {
  const auto target = example_model_layers("qwen2.5-coder-1.5b");
  const auto drafter = example_model_layers("qwen2.5-coder-0.5b");
  EXPECT_NE(error_of([&] { plan_target_and_drafter({}, drafter, kGiB, 1024); }).find("target_layers"), std::string::npos);
  EXPECT_NE(error_of([&] { plan_target_and_drafter(target, {}, kGiB, 1024); }).find("drafter_layers"), std::string::npos);
  const std::string err = error_of([&] { plan_target_and_drafter(target, drafter, kGiB, 32768); });
  EXPECT_NE(err.find("largest max_model_len that fits both is"), std::string::npos) << err;
  // a fixed split that starves one side names that side
  const std::string side = error_of([&] { plan_target_and_drafter(target, drafter, kGiB, 1024, 1e-9); });
  EXPECT_NE(side.find("drafter.kv_cache_memory_bytes"), std::string::npos) << side;
}

// disable_hybrid_kv_cache_manager: Gemma 3-270M's 15 sliding + 3 global layers in one group
// managed as full attention. One 32768-token request: 2048 blocks of 18 layers x 16 KiB (one KV
// head of 256, K and V, f16: 16 * 256 * 2 * 2 = 16 KiB per layer per block) = 576 MiB + the
// null block; the hybrid plan frees the sliding layers' blocks and needs less.
TEST(Planner, HybridManagerOffOneFullAttentionGroup) {
  const auto layers = example_model_layers("gemma3-270m", 16, DType::kF16);
  PlannerOptions off;
  off.disable_hybrid_kv_cache_manager = true;
  const auto c = plan_kv_cache(layers, kGiB, 32768, off);
  ASSERT_EQ(c.groups.size(), 1u);
  EXPECT_TRUE(c.disable_hybrid_kv_cache_manager);
  const auto& g = c.groups[0];
  EXPECT_EQ(g.spec.kind, KvSpecKind::kFullAttention);
  EXPECT_EQ(g.spec.sliding_window, 0);
  EXPECT_EQ(g.layer_names.size(), 18u);
  EXPECT_EQ(g.max_blocks_per_request, 2048);
  EXPECT_EQ(g.bytes_per_block, 18 * 16384);
  int sliding = 0;
  for (const auto& s : g.layer_specs) sliding += s.kind == KvSpecKind::kSlidingWindow && s.sliding_window == 512;
  EXPECT_EQ(sliding, 15);  // the layers keep their windows (masks); only the memory is managed as full
  EXPECT_EQ(min_budget_bytes(layers, 32768, off), int64_t{2049} * 18 * 16384);
  EXPECT_GT(min_budget_bytes(layers, 32768, off), min_budget_bytes(layers, 32768));
  // a plain model is the same plan either way
  const auto smol = example_model_layers("smollm2-135m", 16, DType::kF16);
  EXPECT_EQ(plan_kv_cache(smol, kGiB, 8192, off).groups.size(), 1u);
  EXPECT_EQ(min_budget_bytes(smol, 8192, off), min_budget_bytes(smol, 8192));
  // MLA layers stay their own kind
  const auto mla = example_model_layers("deepseek-v2-lite", 16, DType::kF16);
  EXPECT_EQ(plan_kv_cache(mla, kGiB, 4096, off).groups[0].spec.kind, KvSpecKind::kMla);
}
