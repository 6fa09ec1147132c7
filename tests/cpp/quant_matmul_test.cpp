// Device matmul (kernels/quant_matmul_*.cl) against matmul_reference over formats x shapes x
// batch sizes, every integer path the device runs (portable, AVX2, AVX-512 BW, AVX-512 VNNI)
// against the reference and each other, and input checks.
//
// Tolerances (y = x . W^T, Gaussian x and W):
//  - against Numerics::kDevice (the kernels' own arithmetic, emulated on the host): max |diff|
//    <= 1e-6 * s. PoCL rounds as IEEE 754, so in practice the results are bitwise equal;
//    the bound leaves room for devices whose division or fma rounds differently.
//  - against Numerics::kExact (double over the dequantized weights): rms(diff) <= 1e-5 * s for
//    F32 / F16 / BF16 weights (f32 activations, float accumulation); <= 2e-2 * s for the block
//    formats, whose activations are quantised to int8 per 32-block (about 0.6 % rms error per
//    element), where s = sqrt(mean sum_k (w_ik x_jk)^2) is the typical size of an output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "common/errors.h"
#include "quant/reference.h"
#include "quant_test_util.h"

using namespace specdec;
using namespace specdec::quant;
using namespace specdec::quant::testing;

namespace {

// The typical size of an output element: sqrt(mean over (i, j) of sum_k (w_ik x_jk)^2), the
// spread of a sum of independent products, so that tolerances do not depend on cancellation.
double product_scale(GgmlType type, const std::vector<uint8_t>& wq, int64_t rows, int64_t cols,
                     const std::vector<float>& x, int64_t n) {
  const std::vector<float> w = dequantize(type, wq.data(), rows, cols);
  double s = 0.0;
  for (int64_t k = 0; k < cols; ++k) {
    double w2 = 0.0, x2 = 0.0;
    for (int64_t i = 0; i < rows; ++i) w2 += static_cast<double>(w[i * cols + k]) * w[i * cols + k];
    for (int64_t j = 0; j < n; ++j) x2 += static_cast<double>(x[j * cols + k]) * x[j * cols + k];
    s += w2 / rows * x2 / n;
  }
  return std::sqrt(s);
}

struct Shape {
  int64_t rows, cols;
};

bool is_float(GgmlType t) { return weight_format(t).block_size == 1; }

// Cols for a format: the shape's cols rounded to the format's block size (float formats keep
// odd lengths to test the k tail).
int64_t cols_for(GgmlType t, int64_t cols) {
  const int64_t bs = weight_format(t).block_size;
  return bs == 1 ? cols : std::max<int64_t>(bs, cols / bs * bs);
}

void check_against_reference(GgmlType type, int64_t rows, int64_t cols,
                             const std::vector<int64_t>& ns, uint32_t seed) {
  const std::vector<uint8_t> wq = random_weights(type, rows, cols, seed);
  const DeviceWeight w = upload(type, wq, rows, cols);
  for (int64_t n : ns) {
    SCOPED_TRACE(::testing::Message()
                 << weight_type_name(type) << " " << rows << "x" << cols << " n=" << n);
    const std::vector<float> x =
        gaussian(static_cast<size_t>(n * cols), seed + static_cast<uint32_t>(n));
    const std::vector<float> y = device_matmul(w, x, n);
    const std::vector<float> dev =
        matmul_reference(type, wq.data(), rows, cols, x.data(), n, Numerics::kDevice);
    const std::vector<float> exact =
        matmul_reference(type, wq.data(), rows, cols, x.data(), n, Numerics::kExact);
    const double scale = product_scale(type, wq, rows, cols, x, n);
    ASSERT_GT(scale, 0.0);
    double max_dev = 0.0, err2 = 0.0;
    for (size_t i = 0; i < y.size(); ++i) {
      max_dev = std::max(max_dev, static_cast<double>(std::fabs(y[i] - dev[i])));
      err2 += static_cast<double>(y[i] - exact[i]) * (y[i] - exact[i]);
    }
    EXPECT_LE(max_dev, 1e-6 * scale)
        << bit_differences(y, dev) << " of " << y.size() << " differ in bits";
    if (std::getenv("SPECDEC_QUANT_TEST_VERBOSE") != nullptr) {
      std::printf("%s %lldx%lld n=%lld: %lld of %zu differ in bits from kDevice\n",
                  weight_type_name(type).c_str(), static_cast<long long>(rows),
                  static_cast<long long>(cols), static_cast<long long>(n),
                  static_cast<long long>(bit_differences(y, dev)), y.size());
    }
    EXPECT_LE(std::sqrt(err2 / y.size()), (is_float(type) ? 1e-5 : 2e-2) * scale);
  }
}

class QuantMatmul : public ::testing::TestWithParam<GgmlType> {};

TEST_P(QuantMatmul, SmallShapesAllBatchSizes) {
  const GgmlType t = GetParam();
  const std::vector<int64_t> ns = {1, 2, 3, 4, 5, 8, 16, 17, 64};
  check_against_reference(t, 1, cols_for(t, 256), ns, 1);
  check_against_reference(t, 37, cols_for(t, 512), ns, 2);  // rows not a multiple of 16
  check_against_reference(t, 48, cols_for(t, 172), ns, 3);  // stories260K's ffn length
  check_against_reference(t, 130, cols_for(t, 1024), {1, 4, 17, 70}, 4);  // n > 64: two chunks
}

TEST_P(QuantMatmul, RealShapes) {
  const GgmlType t = GetParam();
  check_against_reference(t, 896, cols_for(t, 4864), {1, 5}, 5);    // Qwen2.5-0.5B ffn_down
  check_against_reference(t, 1536, cols_for(t, 8960), {1, 3}, 6);   // Qwen2.5-1.5B ffn_down
  check_against_reference(t, 8960, cols_for(t, 1536), {1, 17}, 7);  // Qwen2.5-1.5B ffn_up
}

TEST_P(QuantMatmul, BatchInvariantBitwise) {
  // Row i of y is bitwise the same alone, in batches of every size and at every position.
  const GgmlType t = GetParam();
  const int64_t rows = 100, cols = cols_for(t, 768), total = 70;
  const std::vector<uint8_t> wq = random_weights(t, rows, cols, 9);
  const DeviceWeight w = upload(t, wq, rows, cols);
  const std::vector<float> x = gaussian(static_cast<size_t>(total * cols), 10);
  const std::vector<float> all = device_matmul(w, x, total);
  for (int64_t n : {1, 2, 3, 4, 5, 8, 16, 17, 64}) {
    for (int64_t first : {int64_t{0}, int64_t{1}, total - n}) {
      const std::vector<float> part = device_matmul(w, row_slice(x, cols, first, n), n);
      EXPECT_EQ(bit_differences(part, row_slice(all, rows, first, n)), 0)
          << weight_type_name(t) << " n=" << n << " first=" << first;
    }
  }
}

// Every integer path the device can run (forced as SPECDEC_QUANT_ISA would), each against the
// reference, bitwise batch invariant, and bitwise equal to the portable path.
using PathParam = std::tuple<GgmlType, QuantIsa>;
class QuantMatmulIntegerPaths : public ::testing::TestWithParam<PathParam> {
 protected:
  void SetUp() override {
    if (native()) GTEST_SKIP() << "OpenCL's integer paths (the native device's: cpu_matmul_test)";
    const auto& isas = device_quant_isas(*context());
    if (std::find(isas.begin(), isas.end(), isa()) == isas.end()) {
      GTEST_SKIP() << "device cannot run the " << quant_isa_name(isa()) << " path";
    }
    set_quant_isa_override(isa());
  }
  void TearDown() override { set_quant_isa_override(std::nullopt); }
  GgmlType type() const { return std::get<0>(GetParam()); }
  QuantIsa isa() const { return std::get<1>(GetParam()); }
};

TEST_P(QuantMatmulIntegerPaths, AgainstReference) {
  ASSERT_EQ(matmul_config(*context(), 1).isa, isa());
  const GgmlType t = type();
  check_against_reference(t, 37, cols_for(t, 512), {1, 2, 4, 5, 9, 16, 17, 64, 70}, 21);
  check_against_reference(t, 130, cols_for(t, 1024), {1, 8}, 22);
}

TEST_P(QuantMatmulIntegerPaths, BatchInvariantBitwise) {
  const GgmlType t = type();
  const int64_t rows = 100, cols = cols_for(t, 768), total = 70;
  const std::vector<uint8_t> wq = random_weights(t, rows, cols, 23);
  const DeviceWeight w = upload(t, wq, rows, cols);
  const std::vector<float> x = gaussian(static_cast<size_t>(total * cols), 24);
  const std::vector<float> all = device_matmul(w, x, total);
  for (int64_t n : {1, 2, 4, 5, 9, 16, 17}) {
    for (int64_t first : {int64_t{0}, int64_t{3}, total - n}) {
      const std::vector<float> part = device_matmul(w, row_slice(x, cols, first, n), n);
      EXPECT_EQ(bit_differences(part, row_slice(all, rows, first, n)), 0)
          << weight_type_name(t) << " n=" << n << " first=" << first;
    }
  }
}

TEST_P(QuantMatmulIntegerPaths, BitwiseEqualToPortable) {
  const GgmlType t = type();
  const int64_t rows = 67, cols = cols_for(t, 1024), n = 6;
  const std::vector<uint8_t> wq = random_weights(t, rows, cols, 12);
  const DeviceWeight w = upload(t, wq, rows, cols);
  // Extreme activations (+-127 after quantisation in every block) and weights: the 16-bit pair
  // sums of the x86 paths at their largest.
  std::vector<float> x = gaussian(static_cast<size_t>(n * cols), 13);
  for (size_t i = 0; i < x.size(); i += 3) x[i] = (i % 2 ? 1.0f : -1.0f) * 100.0f;
  const std::vector<float> fast = device_matmul(w, x, n);
  set_quant_isa_override(QuantIsa::kPortable);
  const std::vector<float> portable = device_matmul(w, x, n);
  EXPECT_EQ(bit_differences(fast, portable), 0) << quant_isa_name(isa());
}

// Software prefetch is a hint: on or off, bitwise the same results (x86 paths only compile it in).
TEST_P(QuantMatmulIntegerPaths, PrefetchOnOffBitwise) {
  const GgmlType t = type();
  const int64_t rows = 300, cols = cols_for(t, 1536);
  const std::vector<uint8_t> wq = random_weights(t, rows, cols, 31);
  const DeviceWeight w = upload(t, wq, rows, cols);
  for (int64_t n : {1, 5, 70}) {
    const std::vector<float> x = gaussian(static_cast<size_t>(n * cols), 32);
    set_quant_prefetch_override(0);
    ASSERT_EQ(matmul_config(*context(), n).prefetch_bytes, 0);
    const std::vector<float> off = device_matmul(w, x, n);
    set_quant_prefetch_override(2048);
    ASSERT_EQ(matmul_config(*context(), n).prefetch_bytes, 2048);
    const std::vector<float> on = device_matmul(w, x, n);
    set_quant_prefetch_override(std::nullopt);
    EXPECT_EQ(bit_differences(on, off), 0) << weight_type_name(t) << " n=" << n;
  }
}

TEST(QuantMatmulPrefetch, DefaultPerDevice) {
  ocl::DeviceInfo d;
  d.type = "cpu";
  for (const char* vendor : {"GenuineIntel", "AuthenticAMD"}) {
    d.vendor = vendor;
    EXPECT_EQ(default_prefetch_bytes(d, QuantIsa::kAvx512bw), 2048) << vendor;
    EXPECT_EQ(default_prefetch_bytes(d, QuantIsa::kAvx2), 2048) << vendor;
    EXPECT_EQ(default_prefetch_bytes(d, QuantIsa::kPortable), 0) << vendor;  // no builtin
  }
  d.vendor = "NVIDIA Corporation";
  d.type = "gpu";
  EXPECT_EQ(default_prefetch_bytes(d, QuantIsa::kPortable), 0);
}

TEST(QuantMatmulIsa, NamesAndForcing) {
  for (QuantIsa isa : {QuantIsa::kPortable, QuantIsa::kAvx2, QuantIsa::kAvx512bw,
                       QuantIsa::kAvx512vnni}) {
    EXPECT_EQ(parse_quant_isa(quant_isa_name(isa)), isa);
  }
  try {
    parse_quant_isa("sse9");
    FAIL();
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("SPECDEC_QUANT_ISA"), std::string::npos) << what;
    EXPECT_NE(what.find("sse9"), std::string::npos) << what;
    EXPECT_NE(what.find("avx2"), std::string::npos) << what;
  }
  const auto& isas = device_quant_isas(*context());
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), QuantIsa::kPortable);
  EXPECT_EQ(device_quant_isa(*context()), isas.back());  // the fastest by default
  for (QuantIsa isa : {QuantIsa::kAvx2, QuantIsa::kAvx512bw, QuantIsa::kAvx512vnni}) {
    if (std::find(isas.begin(), isas.end(), isa) != isas.end()) continue;
    set_quant_isa_override(isa);
    EXPECT_THROW(device_quant_isa(*context()), ConfigError) << quant_isa_name(isa);
  }
  set_quant_isa_override(std::nullopt);
  // The path follows the device's CPU features (a path needs its cpuid bits).
  const ocl::CpuFeatures f = ocl::cpu_features(context()->device());
  for (QuantIsa isa : isas) {
    if (isa == QuantIsa::kAvx2) {
      EXPECT_TRUE(f.avx2);
    } else if (isa == QuantIsa::kAvx512bw) {
      EXPECT_TRUE(f.avx512bw);
    } else if (isa == QuantIsa::kAvx512vnni) {
      EXPECT_TRUE(f.avx512vnni && f.avx512bw);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantMatmul, ::testing::ValuesIn(supported_weight_types()),
                         [](const auto& info) {
                           return std::string(weight_format(info.param).name);
                         });
INSTANTIATE_TEST_SUITE_P(
    BlockFormats, QuantMatmulIntegerPaths,
    ::testing::Combine(::testing::Values(GgmlType::kQ8_0, GgmlType::kQ4_0, GgmlType::kQ4_1,
                                         GgmlType::kQ5_0, GgmlType::kQ5_1, GgmlType::kQ2_K,
                                         GgmlType::kQ3_K, GgmlType::kQ4_K, GgmlType::kQ5_K,
                                         GgmlType::kQ6_K, GgmlType::kIQ4_NL, GgmlType::kIQ4_XS),
                       ::testing::Values(QuantIsa::kPortable, QuantIsa::kAvx2, QuantIsa::kAvx512bw,
                                         QuantIsa::kAvx512vnni)),
    [](const auto& info) {
      return std::string(weight_format(std::get<0>(info.param)).name) + "_" +
             quant_isa_name(std::get<1>(info.param));
    });

TEST(QuantMatmulChecks, BadBuffersAndShapes) {
  const std::vector<uint8_t> wq = random_weights(GgmlType::kQ4_0, 32, 64, 1);
  const DeviceWeight w = upload(GgmlType::kQ4_0, wq, 32, 64);
  device::Buffer x = dev().allocate(64 * 4), y = dev().allocate(32 * 4);
  EXPECT_THROW(matmul(dev(), w, x, 2, y), ConfigError);  // x too small for n = 2
  EXPECT_THROW(matmul(dev(), w, x, -1, y), ConfigError);
  EXPECT_NO_THROW(matmul(dev(), w, x, 0, y));
  EXPECT_THROW(upload_weight(dev(), GgmlType::kQ4_0, wq.data(), wq.size() - 1, {64, 32}),
               ConfigError);
  EXPECT_THROW(upload_weight(dev(), GgmlType::kQ4_0, wq.data(), wq.size(), {48, 32}), ConfigError);
  try {
    upload_weight(dev(), GgmlType::kIQ2_XS, wq.data(), wq.size(), {64, 32}, "blk.0.ffn_up.weight");
    FAIL();
  } catch (const UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find("blk.0.ffn_up.weight"), std::string::npos) << e.what();
  }
}

// Two matmuls of different weight types filling column ranges of one [n, a + b] buffer (q | k
// and v of a Q4_K_M layer): each range bitwise the matmul alone, nothing else touched; every
// family (K-quant, 32-block, float), a pair whose activations take different scale blocks (256 and
// 32: matmul_reusing quantises x again for the second) and n = 1 (decode), 5 (verify), 70
// (prefill chunks).
TEST(QuantMatmulChecks, OutputColumnsFillRangesOfOneRow) {
  const int64_t cols = 512, ra = 40, rb = 27, width = ra + rb + 3;  // 3 spare columns
  for (auto [ta, tb] : {std::pair{GgmlType::kQ4_K, GgmlType::kQ6_K},
                        std::pair{GgmlType::kQ4_0, GgmlType::kQ8_0},
                        std::pair{GgmlType::kQ4_K, GgmlType::kQ8_0},
                        std::pair{GgmlType::kF16, GgmlType::kQ5_K}}) {
    const DeviceWeight wa = upload(ta, random_weights(ta, ra, cols, 41), ra, cols);
    const DeviceWeight wb = upload(tb, random_weights(tb, rb, cols, 42), rb, cols);
    for (int64_t n : {1, 5, 70}) {
      const std::vector<float> x = gaussian(static_cast<size_t>(n * cols), 43);
      const std::vector<float> ya = device_matmul(wa, x, n), yb = device_matmul(wb, x, n);
      device::Buffer xb = dev().allocate(x.size() * sizeof(float));
      dev().write(xb, x.data(), x.size() * sizeof(float));
      QuantizedActivations xq;
      std::vector<float> y(static_cast<size_t>(n * width), -7.0f);
      device::Buffer ybuf = dev().allocate(y.size() * sizeof(float));
      dev().write(ybuf, y.data(), y.size() * sizeof(float));
      matmul_reusing(dev(), wa, xb, xq, n, ybuf, {0, width});
      matmul_reusing(dev(), wb, xb, xq, n, ybuf, {ra, width});
      dev().read(ybuf, y.data(), y.size() * sizeof(float));
      int64_t diff = 0, touched = 0;
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = 0; j < width; ++j) {
          const float got = y[static_cast<size_t>(i * width + j)];
          if (j < ra) {
            diff += std::memcmp(&got, &ya[static_cast<size_t>(i * ra + j)], sizeof(float)) != 0;
          } else if (j < ra + rb) {
            diff += std::memcmp(&got, &yb[static_cast<size_t>(i * rb + j - ra)], sizeof(float)) != 0;
          } else {
            touched += got != -7.0f;
          }
        }
      }
      EXPECT_EQ(diff, 0) << weight_type_name(ta) << " + " << weight_type_name(tb) << " n=" << n;
      EXPECT_EQ(touched, 0) << weight_type_name(ta) << " + " << weight_type_name(tb) << " n=" << n;
    }
  }
}

TEST(QuantMatmulChecks, OutputColumnsOutsideTheRowOrBuffer) {
  const DeviceWeight w = upload(GgmlType::kQ4_0, random_weights(GgmlType::kQ4_0, 32, 64, 1), 32, 64);
  device::Buffer x = dev().allocate(2 * 64 * 4);
  QuantizedActivations xq;
  quantize_activations(dev(), x, 2, 64, xq);
  device::Buffer y = dev().allocate(2 * 48 * 4);
  EXPECT_NO_THROW(matmul(dev(), w, x, xq, 2, y, {16, 48}));
  EXPECT_THROW(matmul(dev(), w, x, xq, 2, y, {17, 48}), ConfigError);   // past the row's end
  EXPECT_THROW(matmul(dev(), w, x, xq, 2, y, {-1, 48}), ConfigError);
  EXPECT_THROW(matmul(dev(), w, x, xq, 2, y, {0, 31}), ConfigError);    // stride below rows
  EXPECT_NO_THROW(matmul(dev(), w, x, xq, 2, y, {0, 64}));   // row 1 ends at the buffer's end
  EXPECT_THROW(matmul(dev(), w, x, xq, 2, y, {16, 80}), ConfigError);   // buffer too small
  try {
    matmul(dev(), w, x, xq, 2, y, {17, 48});
    ADD_FAILURE() << "no error for columns past the row's end";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("offset 17, stride 48"), std::string::npos) << e.what();
  }
  std::vector<float> out(2 * 48);
  dev().read(y, out.data(), out.size() * sizeof(float));  // the recorded ops ran while w lives
}

TEST(QuantMatmulChecks, StackedWeightsGiveEachPartBitwise) {
  // q / k / v style: 3 parts of one type (rows not multiples of 16) in one matrix.
  const GgmlType t = GgmlType::kQ4_K;
  const int64_t cols = 512, n = 5;
  const std::vector<int64_t> part_rows = {40, 9, 27};
  std::vector<std::vector<uint8_t>> bytes;
  std::vector<WeightBytes> tensors(part_rows.size());
  for (size_t i = 0; i < part_rows.size(); ++i) {
    bytes.push_back(random_weights(t, part_rows[i], cols, 30 + static_cast<uint32_t>(i)));
    tensors[i].name = "part" + std::to_string(i);
    tensors[i].type = t;
    tensors[i].dims = {cols, part_rows[i]};
    tensors[i].size_bytes = bytes[i].size();
    tensors[i].data = bytes[i].data();
  }
  const DeviceWeight stacked =
      upload_weight_stacked(dev(), {tensors[0], tensors[1], tensors[2]}, "qkv");
  EXPECT_EQ(stacked.rows(), 76);
  const std::vector<float> x = gaussian(static_cast<size_t>(n * cols), 31);
  const std::vector<float> y = device_matmul(stacked, x, n);
  int64_t first_row = 0;
  for (size_t i = 0; i < part_rows.size(); ++i) {
    const std::vector<float> part = device_matmul(upload(t, bytes[i], part_rows[i], cols), x, n);
    for (int64_t r = 0; r < n; ++r) {
      const std::vector<float> got(y.begin() + r * 76 + first_row,
                                   y.begin() + r * 76 + first_row + part_rows[i]);
      EXPECT_EQ(bit_differences(got, row_slice(part, part_rows[i], r, 1)), 0)
          << "part " << i << " row " << r;
    }
    first_row += part_rows[i];
  }
  WeightBytes other = tensors[1];
  other.type = GgmlType::kQ6_K;
  EXPECT_THROW(upload_weight_stacked(dev(), {tensors[0], other}, "bad"), ConfigError);
  other = tensors[1];
  other.dims = {256, 18};
  EXPECT_THROW(upload_weight_stacked(dev(), {tensors[0], other}, "bad"), ConfigError);
}

TEST(QuantMatmulChecks, DownloadGivesTheUploadedBlocks) {
  for (GgmlType t : supported_weight_types()) {
    const int64_t cols = cols_for(t, 512);
    const std::vector<uint8_t> wq = random_weights(t, 19, cols, 4);
    EXPECT_EQ(upload(t, wq, 19, cols).download(dev()), wq) << weight_type_name(t);
  }
}

}  // namespace

// --- activation quantisation: both scale blocks ------------------------------------------------

namespace {

// ggml's quantize_row_q8_K as written (signed max, iscale = -127 / max, its float-add rounding,
// min(127, q), d = 1 / iscale): an independent statement of the rule the 256-value path follows.
void ggml_q8_k(const float* x, int8_t* q, float* d) {
  float max = 0.0f, amax = 0.0f;
  for (int j = 0; j < 256; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  if (amax == 0.0f) {
    std::fill(q, q + 256, int8_t{0});
    *d = 0.0f;
    return;
  }
  const float iscale = -127.0f / max;
  for (int j = 0; j < 256; ++j) {
    const float val = iscale * x[j] + 12582912.0f;
    int32_t bits;
    std::memcpy(&bits, &val, 4);
    q[j] = static_cast<int8_t>(std::min(127, (bits & 0x007fffff) - 0x00400000));
  }
  *d = 1.0f / iscale;
}

}  // namespace

// The device's quantize_activations (32) and quantize_activations_256 bitwise equal to
// quantize_activations_reference: int8 values, records, and 16-bit copies; rows with ties
// (x * id exactly k + 0.5: half away from zero for 32, half to even for 256), zeros, an all-zero
// group, outliers; and the 256 rule equal to ggml's Q8_K (q and d negated where the group's
// largest value is positive, the same products d * q).
TEST(QuantActivations, BothScaleBlocksBitwiseTheReference) {
  const int64_t n = 3, cols = 768;
  std::vector<float> x = gaussian(static_cast<size_t>(n * cols), 77);
  for (int j = 0; j < 256; ++j) x[j] = static_cast<float>(j % 9) - 4.0f + 0.5f;  // ties
  x[17] = 127.0f;                                                         // id = 1 exactly
  std::fill(x.begin() + 256, x.begin() + 512, 0.0f);                     // an all-zero group
  x[cols + 5] = -300.0f;                                                  // a negative outlier
  x[2 * cols + 700] = 90.0f;
  device::Buffer xb = dev().allocate(x.size() * sizeof(float));
  dev().write(xb, x.data(), x.size() * sizeof(float));
  for (int sb : {32, 256}) {
    QuantizedActivations xq;
    quantize_activations(dev(), xb, n, cols, xq, sb);
    EXPECT_EQ(xq.scale_block, sb);
    const HostActivations want = quantize_activations_reference(x.data(), n, cols, sb);
    std::vector<int8_t> q(static_cast<size_t>(n * cols));
    std::vector<int16_t> q16(q.size());
    std::vector<float> rec(q.size() / 32 * 4);
    dev().read(xq.q8, q.data(), q.size());
    dev().read(xq.q16, q16.data(), q16.size() * 2);
    dev().read(xq.rec, rec.data(), rec.size() * 4);
    EXPECT_EQ(q, want.q) << sb;
    int64_t bad = 0;
    for (size_t b = 0; b < want.d.size(); ++b) {
      int32_t s0, s1;
      std::memcpy(&s0, &rec[4 * b + 2], 4);
      std::memcpy(&s1, &rec[4 * b + 3], 4);
      bad += std::memcmp(&rec[4 * b], &want.d[b], 4) != 0 || s0 != want.s0[b] || s1 != want.s1[b];
      if (native()) continue;  // its q16 is OpenCL's (the native device neither writes nor reads it)
      for (int j = 0; j < 32; ++j) bad += q16[b * 32 + j] != q[b * 32 + j];
    }
    EXPECT_EQ(bad, 0) << sb;
    if (sb == 32) {  // 4.5 at id 1 rounds away from zero
      EXPECT_EQ(q[8], 5);
      EXPECT_EQ(q[0], -4);  // -3.5
    } else {
      EXPECT_EQ(q[8], 4);   // to even
      EXPECT_EQ(q[0], -4);
      for (int64_t g = 0; g < n * cols / 256; ++g) {
        int8_t gq[256];
        float gd;
        ggml_q8_k(x.data() + g * 256, gq, &gd);
        const float sign = gd < 0 ? -1.0f : 1.0f;
        int64_t diff = 0;
        for (int j = 0; j < 256; ++j) diff += gq[j] != static_cast<int8_t>(sign * q[g * 256 + j]);
        EXPECT_EQ(diff, 0) << "group " << g;
        EXPECT_EQ(sign * gd, want.d[g * 8]) << "group " << g;
      }
    }
  }
  // a scale block other than 32 / 256, or cols that are no multiple of it: refused
  QuantizedActivations xq;
  EXPECT_THROW(quantize_activations(dev(), xb, n, cols, xq, 64), ConfigError);
  const std::vector<float> row(288, 1.0f);
  EXPECT_THROW(quantize_activations_reference(row.data(), 1, 288, 256), ConfigError);
  // a matmul given activations of the wrong scale block says which it needs
  const DeviceWeight w = upload(GgmlType::kQ4_K, random_weights(GgmlType::kQ4_K, 16, 256, 5), 16, 256);
  device::Buffer x1 = dev().allocate(256 * 4), y1 = dev().allocate(16 * 4);
  dev().write(x1, x.data(), 256 * 4);
  const int need = activation_scale_block(GgmlType::kQ4_K);  // 32; 256 with SPECDEC_Q8K_ACTIVATIONS=1
  quantize_activations(dev(), x1, 1, 256, xq, need == 32 ? 256 : 32);
  try {
    matmul(dev(), w, x1, xq, 1, y1);
    ADD_FAILURE() << "no error for the wrong scale block in front of q4_K";
  } catch (const ConfigError& e) {
    const std::string want = "one scale per " + std::to_string(need) + " values for q4_K";
    EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
  }
}
