// Allocation round trips on the OpenCL device (PoCL in CI): write K/V through one layer's view
// with the cache-write kernel, compare the raw tensor byte for byte with the C++ reference, and
// read it back through the view of a second layer that shares the tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <tuple>

#include "common/errors.h"
#include "kv/allocator.h"
#include "kv/cache_ops.h"
#include "kv/examples.h"
#include "kv/planner.h"

using namespace specdec;
using namespace specdec::kv;

namespace {

std::shared_ptr<device::Device> device_ptr() {
  static auto dev = device::open();
  return dev;
}

// Slots for num_tokens tokens of one request whose blocks are shuffled over the pool, with a
// few -1 (padding) entries.
std::vector<int32_t> shuffled_slots(int64_t num_blocks, int block_size, int num_tokens, std::mt19937& rng) {
  std::vector<int32_t> blocks(num_blocks - 1);
  std::iota(blocks.begin(), blocks.end(), 1);  // block 0 is the null block
  std::shuffle(blocks.begin(), blocks.end(), rng);
  std::vector<int32_t> slots(num_tokens);
  for (int t = 0; t < num_tokens; ++t) slots[t] = blocks[t / block_size] * block_size + t % block_size;
  for (int t = 3; t < num_tokens; t += 7) slots[t] = -1;
  return slots;
}

std::vector<float> random_rows(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<float> out(n);
  for (auto& x : out) x = dist(rng);
  return out;
}

float tolerance(DType dtype, float x) {
  switch (dtype) {
    case DType::kF32: return 0.0f;
    case DType::kF16: return std::fabs(x) / 1024.0f + 1e-7f;
    default: return std::fabs(x) / 128.0f + 1e-7f;
  }
}

// Writes random K and V for `writer` on the device and checks raw bytes and reads through `reader`.
void round_trip(KvCacheAllocation& cache, const std::string& writer, const std::string& reader, int num_tokens,
                std::mt19937& rng) {
  device::Device& dv = cache.device();
  const LayerKvView& w = cache.view(writer);
  const LayerKvView& r = cache.view(reader);
  ASSERT_EQ(w.tensor_index, r.tensor_index);
  const auto slots = shuffled_slots(w.num_blocks, w.spec.block_size, num_tokens, rng);
  device::Buffer slot_buf = dv.allocate(slots.size() * 4);
  dv.write(slot_buf, slots.data(), slots.size() * 4);

  std::vector<uint8_t> expected = cache.read_tensor(w.tensor_index);
  for (KvPart part : {KvPart::kK, KvPart::kV}) {
    const KvPartView& p = part_of(w, part);
    if (p.empty()) continue;
    const auto src = random_rows(static_cast<size_t>(num_tokens) * p.num_heads * p.width, rng);
    device::Buffer src_buf = dv.allocate(src.size() * 4);
    dv.write(src_buf, src.data(), src.size() * 4);
    kv_cache_write(cache.device(), cache.tensor_of(writer), w, part, src_buf, slot_buf, num_tokens);
    kv_cache_write_ref(expected, w, part, src, slots);

    // read back through the second layer's view, on the device and with the reference
    const KvPartView& rp = part_of(r, part);
    device::Buffer dst = dv.allocate(src.size() * 4);
    kv_cache_gather(cache.device(), cache.tensor_of(reader), r, part, slot_buf, dst, num_tokens);
    std::vector<float> got(src.size());
    dv.read(dst, got.data(), got.size() * 4);
    const int64_t row = int64_t{rp.num_heads} * rp.width;
    for (int t = 0; t < num_tokens; ++t) {
      for (int64_t i = 0; i < row; ++i) {
        const float want = slots[t] < 0 ? 0.0f : src[t * row + i];
        ASSERT_NEAR(got[t * row + i], want, tolerance(w.spec.dtype, want)) << "token " << t << " elem " << i;
      }
    }
  }
  const auto raw = cache.read_tensor(w.tensor_index);
  ASSERT_EQ(raw.size(), expected.size());
  EXPECT_TRUE(raw == expected) << "raw bytes differ from the C++ reference";
  for (KvPart part : {KvPart::kK, KvPart::kV}) {  // the reference gather agrees through both views
    EXPECT_EQ(kv_cache_gather_ref(raw, w, part, slots), kv_cache_gather_ref(raw, r, part, slots));
  }
}

using AllocCase = std::tuple<DType, KvLayout>;
class SharedTensorRoundTrip : public ::testing::TestWithParam<AllocCase> {};

TEST_P(SharedTensorRoundTrip, Gemma3nLike) {
  const auto [dtype, layout] = GetParam();
  const auto config = plan_kv_cache(example_model_layers("gemma3n-like", 16, dtype), 0, 1024, {2048, 12, ""});
  KvCacheAllocation cache(device_ptr(), config, {}, layout);
  EXPECT_EQ(cache.num_tensors(), 20u);
  std::mt19937 rng(42);
  round_trip(cache, "layers.18", "layers.23", 150, rng);  // sliding owner -> sharing reader
  round_trip(cache, "layers.19", "layers.29", 40, rng);   // global owner -> sharing reader
  // layers.18's writes did not touch any other tensor
  for (size_t t = 0; t < cache.num_tensors(); ++t) {
    if (static_cast<int>(t) == config.tensor_of("layers.18") || static_cast<int>(t) == config.tensor_of("layers.19")) continue;
    const auto raw = cache.read_tensor(static_cast<int>(t));
    EXPECT_TRUE(std::all_of(raw.begin(), raw.end(), [](uint8_t b) { return b == 0; })) << "tensor " << t;
  }
}

INSTANTIATE_TEST_SUITE_P(DtypesAndLayouts, SharedTensorRoundTrip,
                         ::testing::Combine(::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                                            ::testing::Values(KvLayout::kKvMajor, KvLayout::kBlockMajor)),
                         [](const ::testing::TestParamInfo<AllocCase>& info) {
                           return dtype_name(std::get<0>(info.param)) + "_" + layout_name(std::get<1>(info.param));
                         });

TEST(KvAlloc, MlaLatentRoundTripIncludingZeroSizedPart) {
  for (auto [lora, rope] : std::vector<std::pair<int, int>>{{512, 64}, {32, 0}, {0, 16}}) {
    std::vector<LayerKvSpec> layers = {{"mla.0", KvCacheSpec::mla(16, lora, rope, DType::kF16), ""},
                                       {"mla.1", KvCacheSpec::mla(16, lora, rope, DType::kF16), "mla.0"}};
    const auto config = plan_kv_cache(layers, 0, 512, {2048, 6, ""});
    KvCacheAllocation cache(device_ptr(), config);
    EXPECT_EQ(cache.view("mla.1").layout, KvLayout::kMlaLatent);
    std::mt19937 rng(7);
    round_trip(cache, "mla.0", "mla.1", 70, rng);
  }
}

TEST(KvAlloc, HybridGroupsDoNotOverlap) {
  const auto config = plan_kv_cache(example_model_layers("gemma3-270m", 8, DType::kF16), 64 << 20, 1024);
  KvCacheAllocation cache(device_ptr(), config, {{"layers.5", KvLayout::kBlockMajor}});
  EXPECT_EQ(cache.view("layers.5").layout, KvLayout::kBlockMajor);
  EXPECT_EQ(cache.total_bytes(), config.total_bytes());
  std::mt19937 rng(3);
  round_trip(cache, "layers.0", "layers.0", 100, rng);
  round_trip(cache, "layers.5", "layers.5", 100, rng);
  for (size_t t = 0; t < cache.num_tensors(); ++t) {  // every other layer's tensor is untouched
    if (static_cast<int>(t) == config.tensor_of("layers.0") || static_cast<int>(t) == config.tensor_of("layers.5")) continue;
    const auto raw = cache.read_tensor(static_cast<int>(t));
    EXPECT_TRUE(std::all_of(raw.begin(), raw.end(), [](uint8_t b) { return b == 0; })) << "tensor " << t;
  }
}

// kv_cache_write_kv: K and V in one launch, read from inside a fused [t, q + k + v] row, give the
// bytes of two kv_cache_write_ref calls on contiguous rows (GQA layouts and the MLA latent row).
using WriteKvCase = std::tuple<DType, KvLayout, std::string>;
class WriteKvFusedRows : public ::testing::TestWithParam<WriteKvCase> {};

TEST_P(WriteKvFusedRows, MatchesTwoReferenceWrites) {
  const auto [dtype, layout, example] = GetParam();
  const auto config = plan_kv_cache(example_model_layers(example, 16, dtype), 0, 1024, {2048, 12, ""});
  KvCacheAllocation cache(device_ptr(), config, {}, layout);  // MLA layers take mla_latent anyway
  device::Device& dv = cache.device();
  const std::string layer = "layers.1";
  const LayerKvView& w = cache.view(layer);
  std::mt19937 rng(7);
  const int num_tokens = 37;
  const auto slots = shuffled_slots(w.num_blocks, w.spec.block_size, num_tokens, rng);
  device::Buffer slot_buf = dv.allocate(slots.size() * 4);
  dv.write(slot_buf, slots.data(), slots.size() * 4);
  const int64_t q = 40, kw = int64_t{w.k.num_heads} * w.k.width, vw = int64_t{w.v.num_heads} * w.v.width;
  const int64_t row = q + kw + vw + 3;  // 3 columns of padding after v
  const auto fused = random_rows(static_cast<size_t>(num_tokens * row), rng);
  std::vector<float> k(static_cast<size_t>(num_tokens * kw)), v(static_cast<size_t>(num_tokens * vw));
  for (int t = 0; t < num_tokens; ++t) {
    std::copy_n(fused.begin() + t * row + q, kw, k.begin() + t * kw);
    std::copy_n(fused.begin() + t * row + q + kw, vw, v.begin() + t * vw);
  }
  device::Buffer src = dv.allocate(fused.size() * 4);
  dv.write(src, fused.data(), fused.size() * 4);
  kv_cache_write_kv(cache.device(), cache.tensor_of(layer), w, {&src, q, row}, {&src, q + kw, row}, slot_buf,
                    num_tokens);
  std::vector<uint8_t> expected(cache.tensor_of(layer).size_bytes(), 0);
  kv_cache_write_ref(expected, w, KvPart::kK, k, slots);
  kv_cache_write_ref(expected, w, KvPart::kV, v, slots);
  EXPECT_TRUE(cache.read_tensor(w.tensor_index) == expected) << "raw bytes differ from the reference";
  // a token stride below the row is refused, naming the field
  try {
    kv_cache_write_kv(cache.device(), cache.tensor_of(layer), w, {&src, q, kw - 1}, {&src, q + kw, row}, slot_buf, 1);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("token_stride"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(
    DtypesAndLayouts, WriteKvFusedRows,
    ::testing::Combine(::testing::Values(DType::kF32, DType::kF16, DType::kBF16),
                       ::testing::Values(KvLayout::kKvMajor, KvLayout::kBlockMajor),
                       ::testing::Values(std::string("smollm2-135m"), std::string("gemma3-270m"),
                                         std::string("deepseek-v2-lite"))),
    [](const ::testing::TestParamInfo<WriteKvCase>& info) {
      return dtype_name(std::get<0>(info.param)) + "_" + layout_name(std::get<1>(info.param)) + "_" +
             (std::get<2>(info.param) == "deepseek-v2-lite" ? std::string("mla")
                                                            : std::get<2>(info.param).substr(0, 6));
    });

TEST(KvAlloc, BadSlotsAndDtypes) {
  const auto config = plan_kv_cache(example_model_layers("smollm2-135m", 16, DType::kF16), 0, 256, {2048, 4, ""});
  const auto views = make_layer_views(config, {});
  EXPECT_THROW(check_slot_mapping(views[0], {0, 63, 64}), ConfigError);  // 4 blocks * 16 = 64 slots
  EXPECT_THROW(check_slot_mapping(views[0], {-2}), ConfigError);
  EXPECT_NO_THROW(check_slot_mapping(views[0], {-1, 0, 63}));
  const auto i8 = plan_kv_cache(example_model_layers("smollm2-135m", 16, DType::kI8), 0, 256, {2048, 4, ""});
  KvCacheAllocation cache(device_ptr(), i8);
  device::Buffer b = cache.device().allocate(64);
  EXPECT_THROW(kv_cache_write(cache.device(), cache.tensor(0), cache.views()[0], KvPart::kK, b, b, 1),
               UnsupportedError);
}

}  // namespace

namespace {

// Edge values through the device conversion must give the reference's bytes exactly.
TEST(KvAlloc, DeviceConversionMatchesReferenceOnEdgeValues) {
  const std::vector<float> values = {0.0f, -0.0f, 1.0f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 5.96e-8f,
                                     2.9e-8f, -1.0e-7f, 6.1e-5f, 65504.0f, 65519.0f, 65520.0f, 1e9f,
                                     INFINITY, -INFINITY, NAN, 3.3895314e38f, 1.00390625f, 1.01171875f};
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    const int width = static_cast<int>(values.size());
    std::vector<LayerKvSpec> layers = {{"l", KvCacheSpec::full_attention(4, 1, width, dtype), ""}};
    const auto config = plan_kv_cache(layers, 0, 64, {2048, 3, ""});
    KvCacheAllocation cache(device_ptr(), config);
    device::Device& dv = cache.device();
    const std::vector<int32_t> slots = {5};
    device::Buffer slot_buf = dv.allocate(4), src_buf = dv.allocate(values.size() * 4);
    dv.write(slot_buf, slots.data(), 4);
    dv.write(src_buf, values.data(), values.size() * 4);
    kv_cache_write(cache.device(), cache.tensor(0), cache.views()[0], KvPart::kK, src_buf, slot_buf, 1);
    std::vector<uint8_t> expected(cache.tensor(0).size_bytes(), 0);
    kv_cache_write_ref(expected, cache.views()[0], KvPart::kK, values, slots);
    EXPECT_TRUE(cache.read_tensor(0) == expected) << dtype_name(dtype);
    // and the device read converts back like the reference
    device::Buffer dst = dv.allocate(values.size() * 4);
    kv_cache_gather(cache.device(), cache.tensor(0), cache.views()[0], KvPart::kK, slot_buf, dst, 1);
    std::vector<float> got(values.size());
    dv.read(dst, got.data(), got.size() * 4);
    const auto want = kv_cache_gather_ref(expected, cache.views()[0], KvPart::kK, slots);
    for (size_t i = 0; i < values.size(); ++i) {
      if (std::isnan(want[i])) {
        EXPECT_TRUE(std::isnan(got[i]));
      } else {
        EXPECT_EQ(got[i], want[i]) << dtype_name(dtype) << " value " << values[i];
      }
    }
  }
}

}  // namespace
