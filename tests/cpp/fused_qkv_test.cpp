// kv_cache_write_qkv (kernels/fused_qkv.cl): the one-launch epilogue of a fused q | k | v
// projection gives bitwise the bytes of the C++ references (add_bias, rope, kv_cache_write_ref)
// and of the separate device kernels it replaces (add_bias, rope, kv_cache_write_kv), for every
// cache dtype and layout, NEOX / NORM / no RoPE, with and without bias, head sizes whose rotation
// pairs fill 16-lane chunks or leave a tail, decode and verify-sized batches with padding slots.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <numeric>
#include <random>
#include <tuple>

#include "common/errors.h"
#include "device/device.h"
#include "kv/allocator.h"
#include "kv/cache_ops.h"
#include "kv/planner.h"
#include "ops/elementwise.h"
#include "ops/reference.h"
#include "ops/rope.h"

using namespace specdec;
using namespace specdec::kv;

namespace {

const std::shared_ptr<device::Device>& shared_dev() {
  static const auto d = device::open();
  return d;
}

device::Device& dev() { return *shared_dev(); }

std::vector<float> random_floats(size_t n, std::mt19937& rng, float sd) {
  std::normal_distribution<float> dist(0.0f, sd);
  std::vector<float> out(n);
  for (auto& x : out) x = dist(rng);
  return out;
}

template <typename T>
device::Buffer upload(const std::vector<T>& v) {
  return dev().upload(v.data(), v.size() * sizeof(T), device::Lifetime::kWorkspace);
}

std::vector<float> download(const device::Buffer& b, size_t n) {
  std::vector<float> out(n);
  dev().read(b, out.data(), n * 4);
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// dtype, layout, rope (0 none, 1 NORM, 2 NEOX), bias, head_size, num_tokens
using Case = std::tuple<DType, KvLayout, int, bool, int, int>;
class QkvEpilogue : public ::testing::TestWithParam<Case> {};

TEST_P(QkvEpilogue, MatchesReferencesAndSeparateKernels) {
  const auto [dtype, layout, rope_kind, with_bias, head, num_tokens] = GetParam();
  const int q_heads = 6, kv_heads = 2, block_size = 16;
  std::vector<LayerKvSpec> layers = {
      {"layers.0", KvCacheSpec::full_attention(block_size, kv_heads, head, dtype), ""}};
  const auto config = plan_kv_cache(layers, 0, 512, {2048, 32, ""});
  KvCacheAllocation fused_cache(shared_dev(), config, {}, layout), split_cache(shared_dev(), config, {}, layout);
    const LayerKvView& view = fused_cache.view("layers.0");
  ASSERT_TRUE(qkv_epilogue_fits(view, kv_heads, head));

  std::mt19937 rng(static_cast<uint32_t>(head * 131 + num_tokens * 7 + rope_kind));
  const int64_t nq = int64_t{q_heads} * head, nk = int64_t{kv_heads} * head, width = nq + 2 * nk;
  const int64_t stride = width + 5;  // padding columns after v
  const auto x = random_floats(static_cast<size_t>(num_tokens * stride), rng, 2.0f);
  const auto bias = random_floats(static_cast<size_t>(width), rng, 0.5f);
  std::vector<int32_t> positions(static_cast<size_t>(num_tokens)), slots(static_cast<size_t>(num_tokens));
  std::vector<int32_t> blocks(static_cast<size_t>(view.num_blocks - 1));
  std::iota(blocks.begin(), blocks.end(), 1);
  std::shuffle(blocks.begin(), blocks.end(), rng);
  const int start = 300;  // positions far from 0: large rotation angles
  for (int t = 0; t < num_tokens; ++t) {
    positions[t] = start + t;
    slots[t] = blocks[static_cast<size_t>((start + t) / block_size)] * block_size + (start + t) % block_size;
    if (t % 5 == 3) slots[t] = -1;  // padding: written nowhere
  }
  const RopeType type = rope_kind == 2 ? RopeType::kNeox : RopeType::kNorm;
  std::optional<ops::RopeTable> table;
  if (rope_kind > 0) table.emplace(dev(), type, head, 10000.0, 1.0);

  // the reference: bias, rotation of q and k heads, then the cache writes
  std::vector<float> ref = x;
  if (with_bias) {
    for (int t = 0; t < num_tokens; ++t) {
      ops::ref::add_bias(std::span<float>(ref).subspan(static_cast<size_t>(t * stride), width), bias, 1,
                         static_cast<int>(width));
    }
  }
  if (table) {
    ops::ref::rope(ref, positions, num_tokens, q_heads + kv_heads, head, table->inv_freq(), type, stride);
  }
  std::vector<float> q_ref(static_cast<size_t>(num_tokens * nq)), k_ref(static_cast<size_t>(num_tokens * nk)),
      v_ref(static_cast<size_t>(num_tokens * nk));
  for (int t = 0; t < num_tokens; ++t) {
    std::copy_n(ref.begin() + t * stride, nq, q_ref.begin() + t * nq);
    std::copy_n(ref.begin() + t * stride + nq, nk, k_ref.begin() + t * nk);
    std::copy_n(ref.begin() + t * stride + nq + nk, nk, v_ref.begin() + t * nk);
  }
  std::vector<uint8_t> cache_ref(fused_cache.tensor_of("layers.0").size_bytes(), 0);
  kv_cache_write_ref(cache_ref, view, KvPart::kK, k_ref, slots);
  kv_cache_write_ref(cache_ref, view, KvPart::kV, v_ref, slots);

  // the fused kernel
  const device::Buffer xb = upload(x), bb = upload(bias), pb = upload(positions),
                    sb = upload(slots);
  device::Buffer qb = dev().allocate(static_cast<size_t>(num_tokens * nq) * 4);
  kv::QkvEpilogue e;
  e.x = &xb;
  e.x_stride = stride;
  e.bias = with_bias ? &bb : nullptr;
  e.positions = &pb;
  e.inv_freq = table ? &table->buffer() : nullptr;
  e.neox = type == RopeType::kNeox;
  e.q_out = &qb;
  e.q_stride = nq;
  e.q_heads = q_heads;
  e.kv_heads = kv_heads;
  e.head_size = head;
  kv_cache_write_qkv(dev(), fused_cache.tensor_of("layers.0"), view, e, sb, num_tokens);
  EXPECT_TRUE(same_bits(download(qb, q_ref.size()), q_ref)) << "q differs from the reference";
  EXPECT_TRUE(fused_cache.read_tensor(view.tensor_index) == cache_ref) << "cache differs from the reference";

  // the separate kernels it replaces
  device::Buffer xs = upload(x);
  if (with_bias) {
    for (int t = 0; t < num_tokens; ++t) {
      ops::add_bias(dev(), ops::Slice(xs, t * stride), bb, 1, static_cast<int>(width));
    }
  }
  if (table) ops::rope(dev(), xs, pb, num_tokens, q_heads + kv_heads, head, *table, stride);
  const LayerKvView& sview = split_cache.view("layers.0");
  kv_cache_write_kv(dev(), split_cache.tensor_of("layers.0"), sview, {&xs, nq, stride}, {&xs, nq + nk, stride}, sb,
                    num_tokens);
  const auto xs_host = download(xs, x.size());
  std::vector<float> q_split(q_ref.size());
  for (int t = 0; t < num_tokens; ++t) std::copy_n(xs_host.begin() + t * stride, nq, q_split.begin() + t * nq);
  EXPECT_TRUE(same_bits(q_split, q_ref)) << "the separate kernels differ from the reference";
  EXPECT_TRUE(split_cache.read_tensor(sview.tensor_index) == fused_cache.read_tensor(view.tensor_index))
      << "the separate kernels wrote other cache bytes";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, QkvEpilogue,
    ::testing::Combine(::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                       ::testing::Values(KvLayout::kKvMajor, KvLayout::kBlockMajor),
                       ::testing::Values(0, 1, 2), ::testing::Values(false, true),
                       ::testing::Values(64, 40, 128), ::testing::Values(1, 7, 37)),
    [](const ::testing::TestParamInfo<Case>& info) {
      const int rope = std::get<2>(info.param);
      return dtype_name(std::get<0>(info.param)) + "_" + layout_name(std::get<1>(info.param)) + "_" +
             (rope == 0 ? "norope" : rope == 1 ? "norm" : "neox") + (std::get<3>(info.param) ? "_bias" : "") +
             "_h" + std::to_string(std::get<4>(info.param)) + "_t" + std::to_string(std::get<5>(info.param));
    });

TEST(QkvEpilogueErrors, RefusesWhatItCannotServe) {
  std::vector<LayerKvSpec> layers = {{"layers.0", KvCacheSpec::full_attention(16, 2, 64, DType::kF16), ""}};
  const auto config = plan_kv_cache(layers, 0, 256, {2048, 4, ""});
  KvCacheAllocation cache(shared_dev(), config);
    const LayerKvView& view = cache.view("layers.0");
  EXPECT_FALSE(qkv_epilogue_fits(view, 2, 128));  // head size of another model
  EXPECT_FALSE(qkv_epilogue_fits(view, 4, 64));
  const std::vector<int32_t> one_slot = {17}, one_pos = {5};
  device::Buffer x = dev().allocate(4 * (6 * 64 + 4 * 64)), q = dev().allocate(4 * 6 * 64),
                 pos = upload(one_pos), slots = upload(one_slot);
  dev().fill_zero(x);
  kv::QkvEpilogue e;
  e.x = &x;
  e.x_stride = 6 * 64 + 4 * 64;
  e.positions = &pos;
  e.q_out = &q;
  e.q_stride = 6 * 64;
  e.q_heads = 6;
  e.kv_heads = 2;
  e.head_size = 64;
  EXPECT_NO_THROW(kv_cache_write_qkv(dev(), cache.tensor_of("layers.0"), view, e, slots, 1));
  e.x_stride = 100;  // shorter than a row
  EXPECT_THROW(kv_cache_write_qkv(dev(), cache.tensor_of("layers.0"), view, e, slots, 1), ConfigError);
  e.x_stride = 6 * 64 + 4 * 64;
  EXPECT_THROW(kv_cache_write_qkv(dev(), cache.tensor_of("layers.0"), view, e, slots, 2), ConfigError);  // 1 token held
  e.head_size = 128;
  EXPECT_THROW(kv_cache_write_qkv(dev(), cache.tensor_of("layers.0"), view, e, slots, 1), ConfigError);
}

}  // namespace
