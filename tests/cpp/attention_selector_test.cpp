// Backend selection in the spirit of vLLM's test_attention_selector, attention groups of hybrid
// and KV-sharing models, and a target + drafter pair whose drafter needs non-causal attention.
#include <gtest/gtest.h>

#include <set>

#include "attention/groups.h"
#include "attention_test_util.h"
#include "attention/registry.h"
#include "attention/selector.h"
#include "common/errors.h"
#include "kv/allocator.h"
#include "kv/blocks.h"
#include "kv/examples.h"
#include "kv/planner.h"

using namespace specdec;
using namespace specdec::attn;

namespace {

AttentionRequirements attention(int head_size = 128, int q = 8, int kv = 2) {
  return AttentionRequirements::from_spec(kv::KvCacheSpec::full_attention(16, kv, head_size, DType::kF16), q);
}

std::string unsupported_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UnsupportedError& e) {
    return e.what();
  }
  return "(no UnsupportedError)";
}

std::vector<LayerAttentionInfo> infos(const kv::KvCacheConfig& c, int q_heads, bool non_causal = false) {
  std::vector<LayerAttentionInfo> out;
  for (const auto& [name, spec] : c.layer_specs()) out.push_back({name, q_heads, non_causal, false, false});
  return out;
}

}  // namespace

TEST(Selector, AutoPicksTheFirstThatFits) {
  EXPECT_EQ(select_backend(attention()).backend->name(), "OCL_FLASH");
  // head size 80 is not one of OCL_FLASH's: the general kernel takes it
  const auto c = select_backend(attention(80));
  EXPECT_EQ(c.backend->name(), "OCL_PAGED");
  ASSERT_FALSE(c.verdicts.empty());
  EXPECT_EQ(c.verdicts[0].backend->name(), "OCL_FLASH");
  EXPECT_NE(c.verdicts[0].reasons[0].find("head_size 80 not supported"), std::string::npos);
  EXPECT_NE(c.explain().find("OCL_FLASH: rejected: head_size 80"), std::string::npos) << c.explain();
}

TEST(Selector, NonCausalGetsABackendThatSupportsIt) {
  auto r = attention();
  r.use_non_causal = true;
  const auto c = select_backend(r);
  EXPECT_TRUE(c.backend->capabilities().non_causal);
  EXPECT_EQ(c.backend->name(), "OCL_PAGED");
  EXPECT_EQ(c.verdicts[0].reasons, std::vector<std::string>{"non-causal attention not supported"});
}

TEST(Selector, AutoWithMlaPicksOclMla) {
  const auto r = AttentionRequirements::from_spec(kv::KvCacheSpec::mla(16, 512, 64, DType::kF16), 16);
  EXPECT_EQ(r.head_size, 576);
  EXPECT_EQ(r.head_size_v, 512);
  EXPECT_EQ(select_backend(r).backend->name(), "OCL_MLA");
  EXPECT_EQ(select_backend(r, "reference").backend->name(), "REFERENCE");  // REFERENCE serves MLA too
  const std::string err = unsupported_of([&] { select_backend(r, "OCL_PAGED"); });
  EXPECT_NE(err.find("OCL_PAGED cannot serve"), std::string::npos) << err;
  EXPECT_NE(err.find("MLA not supported"), std::string::npos) << err;
  // and a non-MLA layer never lands on OCL_MLA
  EXPECT_NE(unsupported_of([&] { select_backend(attention(), "ocl_mla"); }).find("non-MLA not supported"),
            std::string::npos);
}

TEST(Selector, ForcedBackendListsEveryReason) {
  auto r = attention(80);
  r.use_non_causal = true;
  r.block_size = 8;
  const std::string err = unsupported_of([&] { select_backend(r, "OCL_FLASH"); });
  for (const char* reason : {"head_size 80 not supported", "block_size 8 not supported",
                             "non-causal attention not supported"}) {
    EXPECT_NE(err.find(reason), std::string::npos) << err;
  }
}

TEST(Selector, NamesInAnyCaseAndAuto) {
  for (const char* name : {"ocl_paged", "OCL_PAGED", "Ocl_Paged"}) {
    const auto c = select_backend(attention(), name);
    EXPECT_EQ(c.backend->name(), "OCL_PAGED");
    EXPECT_TRUE(c.requested);
  }
  for (const char* name : {"", "auto", "AUTO", "Auto"}) {
    EXPECT_EQ(select_backend(attention(), name).backend->name(), "OCL_FLASH") << name;
  }
  try {
    select_backend(attention(), "FLASH_ATTN");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.field(), "attention_backend");
    EXPECT_NE(std::string(e.what()).find("valid options are auto, REFERENCE, OCL_PAGED, OCL_FLASH, OCL_MLA"),
              std::string::npos) << e.what();
  }
}

TEST(Selector, NothingFitsListsEveryBackend) {
  auto r = attention();
  r.head_size = r.head_size_v = 4096;  // beyond every backend, REFERENCE included
  const std::string err = unsupported_of([&] { select_backend(r); });
  EXPECT_NE(err.find("no attention backend fits"), std::string::npos) << err;
  for (const auto& b : all_backends()) {  // every backend offered on this (OpenCL) device
    if (b->runs_on(device::Kind::kOpenCL)) EXPECT_NE(err.find(b->name() + ":"), std::string::npos) << b->name();
  }
}

TEST(AttentionGroups, Gemma3HybridGetsTwoGroupsWithTheirOwnMetadata) {
  const auto config = kv::plan_kv_cache(kv::example_model_layers("gemma3-270m"), 0, 4096, {2048, 64, ""});
  const auto setup = initialize_attention(config, infos(config, 4));
  ASSERT_EQ(setup.attention_groups.size(), 2u);
  EXPECT_EQ(setup.attention_groups[0].kv_cache_group_id, 0);
  EXPECT_EQ(setup.attention_groups[0].layer_names.size(), 15u);
  EXPECT_EQ(setup.attention_groups[1].layer_names, (std::vector<std::string>{"layers.5", "layers.11", "layers.17"}));
  EXPECT_EQ(setup.layer_to_kv_cache_group.at("layers.11"), 1);
  EXPECT_EQ(setup.layouts.at("layers.0"), setup.attention_groups[0].backend->kv_layout());
  EXPECT_NE(setup.explain().find("attention group 1 (KV-cache group 1)"), std::string::npos);
  // one step: each attention group's metadata comes from its own KV-cache group's block tables
  kv::KvCacheManager m(config);
  ASSERT_TRUE(m.allocate_slots("r", 0, 600).ok);
  ASSERT_TRUE(m.allocate_slots("r", 600, 5).ok);
  const auto md = build_step_metadata(attn::testing::dev(), setup, m, {{"r", 600, 5}});
  ASSERT_EQ(md.size(), 2u);
  EXPECT_EQ(md[0].host.block_table, std::vector<int32_t>(m.block_table("r", 0).begin(), m.block_table("r", 0).end()));
  EXPECT_EQ(md[1].host.block_table, std::vector<int32_t>(m.block_table("r", 1).begin(), m.block_table("r", 1).end()));
  EXPECT_EQ(md[0].host.seq_lens, std::vector<int32_t>{605});
}

TEST(AttentionGroups, KvSharingLayersUseTheirTargetsGroupAndLayout) {
  const auto config = kv::plan_kv_cache(kv::example_model_layers("gemma3n-like"), 0, 4096, {2048, 8, ""});
  const auto setup = initialize_attention(config, infos(config, 8));
  for (const auto& [layer, target] : config.kv_sharing) {
    EXPECT_EQ(setup.layer_to_kv_cache_group.at(layer), setup.layer_to_kv_cache_group.at(target)) << layer;
    EXPECT_EQ(setup.layouts.at(layer), setup.layouts.at(target)) << layer;
    EXPECT_EQ(setup.layer_to_attention_group.at(layer), setup.layer_to_attention_group.at(target)) << layer;
  }
  EXPECT_NO_THROW(kv::make_layer_views(config, setup.layouts));
  // a sharing layer that must read its target's layout rejects a backend that cannot
  auto r = AttentionRequirements::from_spec(config.layer_specs().at("layers.20"), 8);
  r.required_layout = kv::KvLayout::kKvMajor;
  const auto verdicts = evaluate_backends(r);
  ASSERT_EQ(verdicts[0].backend->name(), "OCL_FLASH");
  EXPECT_EQ(verdicts[0].reasons.back(), "cannot read the KV layout kv_major of the cache this layer shares");
  EXPECT_TRUE(verdicts[1].reasons.empty());  // OCL_PAGED reads it
}

TEST(AttentionGroups, SeveralAttentionGroupsInOneKvCacheGroup) {
  // layers.20 shares layers.18's cache (written by OCL_FLASH in block_major) but needs sinks:
  // it gets OCL_PAGED, which reads block_major, in a second attention group of KV group 0
  const auto config = kv::plan_kv_cache(kv::example_model_layers("gemma3n-like"), 0, 4096, {2048, 8, ""});
  auto layers = infos(config, 8);
  for (auto& l : layers) l.use_sinks = l.layer_name == "layers.20";
  const auto setup = initialize_attention(config, layers);
  const int g18 = setup.layer_to_attention_group.at("layers.18");
  const int g20 = setup.layer_to_attention_group.at("layers.20");
  EXPECT_NE(g18, g20);
  EXPECT_EQ(setup.attention_groups[g18].backend->name(), "OCL_FLASH");
  EXPECT_EQ(setup.attention_groups[g20].backend->name(), "OCL_PAGED");
  EXPECT_EQ(setup.attention_groups[g18].kv_cache_group_id, setup.attention_groups[g20].kv_cache_group_id);
  EXPECT_EQ(setup.layouts.at("layers.20"), kv::KvLayout::kBlockMajor);  // reads its target's layout
  EXPECT_NO_THROW(kv::make_layer_views(config, setup.layouts));
  // with a backend that cannot read it and cannot do sinks forced, the error names the layer
  try {
    initialize_attention(config, layers, "OCL_FLASH");
    FAIL();
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("layer layers.20: attention backend OCL_FLASH cannot serve"),
              std::string::npos) << e.what();
  }
}

TEST(AttentionGroups, NonCausalDrafterGetsItsOwnBackendAndLayout) {
  const auto plan = kv::plan_target_and_drafter(kv::example_model_layers("qwen2.5-coder-1.5b"),
                                                kv::example_model_layers("qwen2.5-coder-0.5b"), int64_t{1} << 30, 4096);
  const auto target = initialize_attention(plan.target, infos(plan.target, 12));
  const auto drafter = initialize_attention(plan.drafter, infos(plan.drafter, 14, /*non_causal=*/true));
  ASSERT_EQ(target.attention_groups.size(), 1u);
  ASSERT_EQ(drafter.attention_groups.size(), 1u);
  const auto* tb = target.attention_groups[0].backend;
  const auto* db = drafter.attention_groups[0].backend;
  EXPECT_NE(tb, db);
  EXPECT_TRUE(db->capabilities().non_causal);
  EXPECT_NE(target.layouts.at("layers.0"), drafter.layouts.at("layers.0"));
  EXPECT_FALSE(drafter.attention_groups[0].causal);
  // the drafter's backend is never inherited: with OCL_PAGED requested for the target, a causal
  // drafter still selects on its own (and gets OCL_FLASH first on this CPU)
  const auto target_paged = initialize_attention(plan.target, infos(plan.target, 12), "OCL_PAGED");
  EXPECT_EQ(target_paged.attention_groups[0].backend->name(), "OCL_PAGED");
  const auto causal_drafter = initialize_attention(plan.drafter, infos(plan.drafter, 14));
  EXPECT_EQ(causal_drafter.attention_groups[0].backend->name(), "OCL_FLASH");
  // allocated side by side, nothing aliases across them
  auto dev = device::open();
  kv::KvCacheAllocation t(dev, plan.target, target.layouts), d(dev, plan.drafter, drafter.layouts);
  std::set<const void*> buffers;
  for (size_t i = 0; i < t.num_tensors(); ++i) buffers.insert(t.tensor(static_cast<int>(i)).id().value);
  for (size_t i = 0; i < d.num_tensors(); ++i) buffers.insert(d.tensor(static_cast<int>(i)).id().value);
  EXPECT_EQ(buffers.size(), t.num_tensors() + d.num_tensors());
  EXPECT_EQ(t.view("layers.0").layout, tb->kv_layout());
  EXPECT_EQ(d.view("layers.0").layout, db->kv_layout());
}

TEST(AttentionGroups, MissingLayerInfoIsAnError) {
  const auto config = kv::plan_kv_cache(kv::example_model_layers("smollm2-135m"), 0, 4096, {2048, 8, ""});
  auto layers = infos(config, 9);
  layers.pop_back();
  EXPECT_THROW(initialize_attention(config, layers), ConfigError);
  layers = infos(config, 10);  // not a multiple of 3 KV heads
  try {
    initialize_attention(config, layers);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(".num_q_heads = 10"), std::string::npos) << e.what();
  }
}

TEST(Selector, PriorityDependsOnTheDeviceType) {
  EXPECT_EQ(priority_list("cpu").front()->name(), "OCL_FLASH");
  EXPECT_EQ(priority_list("gpu").front()->name(), "OCL_PAGED");
  EXPECT_EQ(priority_list("gpu").back()->name(), "REFERENCE");
  EXPECT_EQ(select_backend(attention(), "", "gpu").backend->name(), "OCL_PAGED");
}

// The lists are keyed on the device's (kind, type): the same for an Info as for its type string,
// and the device of the tests gets its type's list.
TEST(Selector, PriorityIsKeyedOnTheDevicesKindAndType) {
  auto names = [](const std::vector<const AttentionBackend*>& list) {
    std::vector<std::string> out;
    for (const auto* b : list) out.push_back(b->name());
    return out;
  };
  for (const char* type : {"cpu", "gpu", "accelerator"}) {
    const device::Info info = opencl_device_info(type);
    EXPECT_EQ(info.kind, device::Kind::kOpenCL);
    EXPECT_EQ(names(priority_list(info)), names(priority_list(type))) << type;
    EXPECT_EQ(names(priority_list(info)).size(), 4u) << type;
  }
  const device::Info& mine = attn::testing::dev().info();
  EXPECT_EQ(names(priority_list(mine)), names(priority_list(mine.type)));
  EXPECT_EQ(select_backend(attention(), "", mine).backend->name(),
            select_backend(attention(), "", mine.type).backend->name());
}

// Each backend declares the device kinds it runs on: the OpenCL ones OpenCL, REFERENCE every kind.
TEST(Selector, BackendsDeclareTheDeviceKindsTheyRunOn) {
  for (const auto& b : all_backends()) {
    if (b->name() == "REFERENCE") {
      EXPECT_TRUE(b->capabilities().devices.empty());
      EXPECT_TRUE(b->runs_on(device::Kind::kOpenCL) && b->runs_on(device::Kind::kCpu));
    } else if (b->name() == "CPU_PAGED") {
      EXPECT_EQ(b->capabilities().devices, std::vector<device::Kind>{device::Kind::kCpu});
    } else {
      EXPECT_EQ(b->capabilities().devices, std::vector<device::Kind>{device::Kind::kOpenCL}) << b->name();
    }
  }
}

TEST(Selector, TheNativeCpuDeviceGetsItsOwnBackendThenTheReference) {
  device::Info cpu;
  cpu.kind = device::Kind::kCpu;
  cpu.type = "cpu";
  std::vector<std::string> names;
  for (const AttentionBackend* b : priority_list(cpu)) names.push_back(b->name());
  EXPECT_EQ(names, (std::vector<std::string>{"CPU_PAGED", "REFERENCE"}));
  for (const AttentionBackend* b : priority_list("cpu")) EXPECT_NE(b->name(), "CPU_PAGED");  // PoCL's CPU
}

TEST(Selector, BadRequirementsAreConfigErrors) {
  auto r = attention();
  r.num_q_heads = 0;
  EXPECT_THROW(select_backend(r), ConfigError);
  r = attention();
  r.num_q_heads = 3;  // not a multiple of 2 KV heads
  EXPECT_THROW(select_backend(r), ConfigError);
  r = attention();
  r.block_size = 0;
  EXPECT_THROW(select_backend(r), ConfigError);
  r = attention();
  r.head_size_v = 1024;  // beyond OCL_PAGED's 512: not selected, REFERENCE takes it
  const auto c = select_backend(r);
  EXPECT_EQ(c.backend->name(), "REFERENCE");
  EXPECT_NE(c.explain().find("OCL_PAGED: rejected: head_size_v 1024 not supported (at most 512)"), std::string::npos)
      << c.explain();
  r = AttentionRequirements::from_spec(kv::KvCacheSpec::chunked_local(16, 2, 128, DType::kF16, 64), 8, true);
  EXPECT_NE(unsupported_of([&] { select_backend(r, "OCL_PAGED"); }).find("non-causal chunked local"),
            std::string::npos);
}

TEST(Selector, WhatIsSelectedRunsAtTheEdges) {
  namespace t = specdec::attn::testing;
  std::mt19937 rng(5);
  struct Case {
    kv::KvCacheSpec spec;
    std::vector<t::Req> reqs;
  };
  const std::vector<Case> cases = {
      {kv::KvCacheSpec::full_attention(16, 2, 128, DType::kF16, 512), {{30, 1}, {0, 7}}},  // head_size_v 512
      {kv::KvCacheSpec::full_attention(16, 2, 128, DType::kF16), {}},                      // empty batch
      {kv::KvCacheSpec::full_attention(16, 2, 128, DType::kF16), {{20, 0}, {40, 1}}},      // no new tokens
      {kv::KvCacheSpec::sliding(16, 2, 64, DType::kBF16, 24), {{100, 5}, {0, 3}}},
  };
  for (const auto& c : cases) {
    const auto r = AttentionRequirements::from_spec(c.spec, 8);
    for (const std::string requested : {"", "OCL_PAGED", "REFERENCE"}) {
      const AttentionBackend* b = select_backend(r, requested).backend;
      const auto cache = t::random_cache(c.spec, b->kv_layout_for(c.spec), 32, rng);
      const auto md = t::random_metadata(c.reqs, c.spec.block_size, 32, true, rng);
      const auto params = AttentionLayerParams::from_spec(c.spec, 8, 0.1f);
      EXPECT_LT(t::max_error_vs_reference(*b, c.spec, md, params, cache, {}, rng), 2e-5)
          << b->name() << " " << c.spec.to_string() << " reqs " << c.reqs.size();
    }
  }
}

TEST(Selector, ParamsMustMatchTheLayer) {
  namespace t = specdec::attn::testing;
  std::mt19937 rng(6);
  const auto spec = kv::KvCacheSpec::sliding(16, 2, 64, DType::kF16, 32);
  const auto cache = t::random_cache(spec, kv::KvLayout::kKvMajor, 16, rng);
  const auto md = t::random_metadata({{50, 1}}, 16, 16, true, rng);
  auto params = AttentionLayerParams::from_spec(spec, 4, 0.1f);
  EXPECT_EQ(params.sliding_window, 32);
  params.sliding_window = 0;  // would read blocks that left the window
  for (const char* name : {"OCL_PAGED", "REFERENCE"}) {
    try {
      t::max_error_vs_reference(get_backend(name), spec, md, params, cache, {}, rng);
      FAIL() << name;
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.field(), "sliding_window") << name;
    }
  }
}
