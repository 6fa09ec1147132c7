// The native CPU matmul (cpp/cpu/matmul.h) against matmul_reference(..., Numerics::kDevice):
// bitwise equal for every format x batch size x every path this CPU runs (forced lower paths
// included), on shapes with a partial last group and on group-range subsets; batch invariance;
// and the ISA detection's parsing and refusals (cpp/cpu/isa.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/errors.h"
#include "cpu/embedding.h"
#include "cpu/isa.h"
#include "cpu/matmul.h"
#include "quant/dequantize.h"
#include "quant/formats.h"
#include "quant/layout.h"
#include "quant/reference.h"

using namespace specdec;
using namespace specdec::cpu;
using specdec::quant::DeviceLayout;

namespace {

std::vector<float> gaussian(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

bool is_float(GgmlType t) { return quant::weight_format(t).block_size == 1; }

// A format's cols: `cols` rounded down to its block size (float formats keep odd lengths).
int64_t cols_for(GgmlType t, int64_t cols) {
  const int64_t bs = quant::weight_format(t).block_size;
  return bs == 1 ? cols : std::max<int64_t>(bs, cols / bs * bs);
}

int64_t bit_differences(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  int64_t diff = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) ++diff;
  }
  return diff;
}

// A random quantised matrix, its packed layout and bytes.
struct Matrix {
  GgmlType type;
  int64_t rows, cols;
  std::vector<uint8_t> blocks;  // ggml row-major
  DeviceLayout layout;
  std::vector<uint8_t> packed;
  PackedWeight weight() const { return {&layout, packed.data()}; }
};

Matrix random_matrix(GgmlType type, int64_t rows, int64_t cols, uint32_t seed) {
  Matrix m{type, rows, cols, {}, {}, {}};
  const std::vector<float> w = gaussian(static_cast<size_t>(rows * cols), seed, 0.05f);
  m.blocks = quant::quantize(type, w.data(), rows, cols);
  m.layout = quant::device_layout(type, rows, cols);
  m.packed = quant::repack(m.layout, m.blocks.data());
  return m;
}

// y [n, rows] on the CPU for x [n, cols] (quantised as matmul_reference does); rows outside
// [group_begin, group_end) keep a NaN sentinel.
std::vector<float> cpu_matmul(const Matrix& m, const std::vector<float>& x, int64_t n, Isa isa,
                              int64_t group_begin = 0, int64_t group_end = -1) {
  if (group_end < 0) group_end = m.layout.groups;
  std::vector<float> y(static_cast<size_t>(n * m.rows), std::numeric_limits<float>::quiet_NaN());
  MatmulInput in;
  in.n = n;
  specdec::cpu::OwnedActivations xq;
  specdec::cpu::Activations view;
  if (is_float(m.type)) {
    in.x = x.data();
  } else {
    xq = specdec::cpu::records_of(quant::quantize_activations_reference(
        x.data(), n, m.cols, quant::activation_scale_block(m.type)));
    view = xq.view();
    in.xq = &view;
  }
  matmul(m.weight(), in, group_begin, group_end, y.data(), isa);
  return y;
}

const std::vector<GgmlType>& formats() { return quant::supported_weight_types(); }

using Param = std::tuple<GgmlType, Isa>;

std::vector<Param> all_params() {
  std::vector<Param> out;
  for (GgmlType t : formats()) {
    for (Isa isa : cpu_isas()) out.emplace_back(t, isa);
  }
  return out;
}

class CpuMatmul : public ::testing::TestWithParam<Param> {
 protected:
  GgmlType type() const { return std::get<0>(GetParam()); }
  Isa isa() const { return std::get<1>(GetParam()); }
};

TEST_P(CpuMatmul, BitwiseEqualToReferenceAllBatchSizes) {
  const GgmlType t = type();
  // 37 / 21 rows: a partial last group of 5 rows (one AVX2 half), 29 rows: of 13 (both halves,
  // the second partial); 512 / 768 cols: 2 and 3 K-quant super-blocks; 301 cols: a k tail for
  // the float formats (k % 4 != 0), 9 blocks for the 32-element ones
  for (const auto& [rows, cols] :
       {std::pair<int64_t, int64_t>{37, 512}, {16, 768}, {21, 301}, {29, 256}}) {
    const Matrix m = random_matrix(t, rows, cols_for(t, cols), 11);
    for (int64_t n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17, 33}) {  // every kernel row count to 8
      SCOPED_TRACE(::testing::Message() << quant::weight_type_name(t) << " " << isa_name(isa())
                                        << " " << m.rows << "x" << m.cols << " n=" << n);
      const std::vector<float> x =
          gaussian(static_cast<size_t>(n * m.cols), 100 + static_cast<uint32_t>(n));
      const std::vector<float> want = quant::matmul_reference(
          t, m.blocks.data(), m.rows, m.cols, x.data(), n, quant::Numerics::kDevice);
      EXPECT_EQ(bit_differences(cpu_matmul(m, x, n, isa()), want), 0);
    }
  }
}

TEST_P(CpuMatmul, GroupRangeWritesItsRowsOnly) {
  const GgmlType t = type();
  const Matrix m = random_matrix(t, 70, cols_for(t, 256), 12);  // 5 groups, the last of 6 rows
  const int64_t n = 3;
  const std::vector<float> x = gaussian(static_cast<size_t>(n * m.cols), 13);
  const std::vector<float> want = quant::matmul_reference(t, m.blocks.data(), m.rows, m.cols,
                                                          x.data(), n, quant::Numerics::kDevice);
  for (const auto& [g0, g1] : {std::pair<int64_t, int64_t>{1, 3}, {4, 5}, {2, 2}}) {
    SCOPED_TRACE(::testing::Message() << "groups [" << g0 << ", " << g1 << ")");
    const std::vector<float> y = cpu_matmul(m, x, n, isa(), g0, g1);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t r = 0; r < m.rows; ++r) {
        const size_t at = static_cast<size_t>(i * m.rows + r);
        if (r >= g0 * 16 && r < g1 * 16)
          EXPECT_EQ(std::memcmp(&y[at], &want[at], 4), 0) << "row " << r << " n " << i;
        else
          EXPECT_TRUE(std::isnan(y[at])) << "row " << r << " outside the range was written";
      }
    }
  }
}

TEST_P(CpuMatmul, BatchInvariant) {
  // Row i of y is bitwise the same alone and among 33 rows (three tiles of 16).
  const GgmlType t = type();
  const Matrix m = random_matrix(t, 40, cols_for(t, 512), 14);
  const int64_t total = 33;
  const std::vector<float> x = gaussian(static_cast<size_t>(total * m.cols), 15);
  const std::vector<float> all = cpu_matmul(m, x, total, isa());
  for (int64_t i : {0, 7, 15, 16, 32}) {
    const std::vector<float> xi(x.begin() + i * m.cols, x.begin() + (i + 1) * m.cols);
    const std::vector<float> alone = cpu_matmul(m, xi, 1, isa());
    const std::vector<float> in_batch(all.begin() + i * m.rows, all.begin() + (i + 1) * m.rows);
    EXPECT_EQ(bit_differences(alone, in_batch), 0) << "row " << i;
  }
}

TEST_P(CpuMatmul, StridedOutputWritesItsColumnsOnly) {
  // ldy > rows: row i at y + i * ldy (a column range of a wider row, as q | k | v are placed)
  const GgmlType t = type();
  const Matrix m = random_matrix(t, 37, cols_for(t, 256), 16);
  const int64_t n = 5, ldy = 50, offset = 7;
  const std::vector<float> x = gaussian(static_cast<size_t>(n * m.cols), 17);
  const std::vector<float> want = cpu_matmul(m, x, n, isa());
  std::vector<float> y(static_cast<size_t>(n * ldy), std::numeric_limits<float>::quiet_NaN());
  MatmulInput in;
  in.n = n;
  specdec::cpu::OwnedActivations xq;
  specdec::cpu::Activations view;
  if (is_float(t)) {
    in.x = x.data();
  } else {
    xq = specdec::cpu::records_of(
        quant::quantize_activations_reference(x.data(), n, m.cols, quant::activation_scale_block(t)));
    view = xq.view();
    in.xq = &view;
  }
  matmul(m.weight(), in, 0, m.layout.groups, y.data() + offset, ldy, isa());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t c = 0; c < ldy; ++c) {
      const float got = y[static_cast<size_t>(i * ldy + c)];
      if (c >= offset && c < offset + m.rows) {
        EXPECT_EQ(std::memcmp(&got, &want[static_cast<size_t>(i * m.rows + c - offset)], 4), 0) << i << " " << c;
      } else {
        EXPECT_TRUE(std::isnan(got)) << "column " << c << " of row " << i << " outside the range was written";
      }
    }
  }
  EXPECT_THROW(matmul(m.weight(), in, 0, m.layout.groups, y.data(), m.rows - 1, isa()), ConfigError);
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return quant::weight_type_name(std::get<0>(info.param)) + "_" + isa_name(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(FormatsByPath, CpuMatmul, ::testing::ValuesIn(all_params()), param_name);

// Q8_0 weight bytes at the ends of int8 (-128, 127, a file may hold -128) against activations at
// +-127: the integer dots stay exact on every path (the AVX2 path's vpmaddubsw pair sums of
// |w| * |x| <= 128 * 127 stay below 2^15).
TEST(CpuMatmulEdges, Q8_0ExtremeBytesAreExact) {
  const int64_t rows = 32, cols = 256, nb = cols / 32;
  std::vector<uint8_t> blocks(static_cast<size_t>(rows * nb * 34));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* blk = blocks.data() + (r * nb + b) * 34;
      blk[0] = 0x00;  // d = 1.0 (f16 0x3C00, little endian)
      blk[1] = 0x3C;
      for (int j = 0; j < 32; ++j) {
        const bool low = (r + j + b) % 3 != 1;
        blk[2 + j] = static_cast<uint8_t>(low ? -128 : 127);
      }
    }
  }
  Matrix m{GgmlType::kQ8_0, rows, cols, blocks, quant::device_layout(GgmlType::kQ8_0, rows, cols), {}};
  m.packed = quant::repack(m.layout, m.blocks.data());
  for (int64_t n : {1, 3, 8, 16}) {
    std::vector<float> x(static_cast<size_t>(n * cols));
    for (size_t i = 0; i < x.size(); ++i) x[i] = (i * 7 % 5 < 3) ? -1.0f : 1.0f;  // quantised to +-127
    const std::vector<float> want =
        quant::matmul_reference(m.type, m.blocks.data(), rows, cols, x.data(), n, quant::Numerics::kDevice);
    for (Isa isa : cpu_isas()) EXPECT_EQ(bit_differences(cpu_matmul(m, x, n, isa), want), 0) << isa_name(isa) << " n=" << n;
  }
}

TEST(CpuMatmulChecks, BadInputsAreConfigErrors) {
  const Matrix m = random_matrix(GgmlType::kQ4_K, 20, 256, 1);
  const std::vector<float> x = gaussian(256, 2);
  const auto xq = specdec::cpu::quantize_activations(x.data(), 1, 256, 32);
  const specdec::cpu::Activations view = xq.view();
  std::vector<float> y(20);
  MatmulInput in{1, nullptr, &view};
  EXPECT_THROW(matmul(m.weight(), in, 0, 3, y.data()), ConfigError);  // 2 groups
  EXPECT_THROW(matmul(m.weight(), in, 2, 1, y.data()), ConfigError);  // reversed
  EXPECT_THROW(matmul(m.weight(), MatmulInput{1, x.data(), nullptr}, y.data()), ConfigError);
  const auto wide = specdec::cpu::quantize_activations(gaussian(512, 3).data(), 1, 512, 32);
  const specdec::cpu::Activations wide_view = wide.view();
  EXPECT_THROW(matmul(m.weight(), MatmulInput{1, nullptr, &wide_view}, y.data()), ConfigError);
  EXPECT_THROW(matmul(m.weight(), MatmulInput{2, nullptr, &view}, y.data()), ConfigError);  // xq.n
  EXPECT_NO_THROW(matmul(m.weight(), in, y.data()));
  for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512bw, Isa::kAvx512vnni, Isa::kAmxInt8}) {
    bool runnable = false;
    for (Isa r : cpu_isas()) runnable = runnable || r == isa;
    if (!runnable) {
      EXPECT_THROW(matmul(m.weight(), in, y.data(), isa), ConfigError) << isa_name(isa);
    }
  }
}

TEST(CpuMatmulChecks, PathForEachFormat) {
  // every format has kernels on every SIMD path; amx_int8 runs the AVX-512 VNNI ones
  for (GgmlType t : formats()) {
    EXPECT_EQ(matmul_isa_for(t, Isa::kPortable), Isa::kPortable);
#if defined(__x86_64__)
    for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512bw, Isa::kAvx512vnni})
      EXPECT_EQ(matmul_isa_for(t, isa), isa) << quant::weight_type_name(t) << " " << isa_name(isa);
    EXPECT_EQ(matmul_isa_for(t, Isa::kAmxInt8), Isa::kAvx512vnni);
#endif
  }
}

// ---- ISA detection ----

TEST(CpuIsa, NamesRoundTrip) {
  for (Isa isa :
       {Isa::kPortable, Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512bw, Isa::kAvx512vnni, Isa::kAmxInt8})
    EXPECT_EQ(parse_isa(isa_name(isa)), isa);
}

TEST(CpuIsa, UnknownNameNamesTheVariableAndTheChoices) {
  try {
    parse_isa("avx3");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("SPECDEC_CPU_ISA"), std::string::npos) << what;
    EXPECT_NE(what.find("'avx3'"), std::string::npos) << what;
    EXPECT_NE(what.find("avx512_vnni"), std::string::npos) << what;
  }
}

TEST(CpuIsa, ForcedPathAboveTheCpuIsRefused) {
  const std::vector<Isa> runnable = {Isa::kPortable, Isa::kAvx2};
  EXPECT_EQ(choose_isa(runnable, nullptr), Isa::kAvx2);
  EXPECT_EQ(choose_isa(runnable, ""), Isa::kAvx2);
  EXPECT_EQ(choose_isa(runnable, "portable"), Isa::kPortable);
  for (const char* above : {"avx512bw", "amx_int8", "bogus"}) {
    try {
      choose_isa(runnable, above);
      FAIL() << above << ": no error";
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("SPECDEC_CPU_ISA"), std::string::npos) << what;
      EXPECT_NE(what.find(std::string("'") + above + "'"), std::string::npos) << what;
      EXPECT_NE(what.find("portable, avx2"), std::string::npos) << what;
    }
  }
}

TEST(CpuIsa, PathsNeedTheOsStateAndPermission) {
  CpuFeatures f;
  EXPECT_EQ(runnable_isas(f), std::vector<Isa>{Isa::kPortable});
  f.avx2 = f.fma = f.f16c = f.avx_vnni = true;
  EXPECT_EQ(runnable_isas(f), std::vector<Isa>{Isa::kPortable});  // XCR0 without YMM state
  f.os_ymm = true;
  EXPECT_EQ(runnable_isas(f), (std::vector<Isa>{Isa::kPortable, Isa::kAvx2, Isa::kAvxVnni}));
  f.avx512f = f.avx512bw = f.avx512vl = f.avx512_vnni = true;
  EXPECT_EQ(runnable_isas(f).back(), Isa::kAvxVnni);  // no ZMM state saved
  f.os_zmm = true;
  EXPECT_EQ(runnable_isas(f).back(), Isa::kAvx512vnni);
  f.amx_tile = f.amx_int8 = f.os_amx = true;
  EXPECT_EQ(runnable_isas(f).back(), Isa::kAvx512vnni);  // tile data not permitted
  f.amx_permitted = true;
  EXPECT_EQ(runnable_isas(f).back(), Isa::kAmxInt8);
}

TEST(CpuIsa, ThisCpu) {
  const std::vector<Isa>& isas = cpu_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), Isa::kPortable);
  std::string names;
  for (Isa isa : isas) names += std::string(" ") + isa_name(isa);
  std::printf("cpu paths:%s; chosen %s\n", names.c_str(), isa_name(cpu_isa()));
}


// Embedding rows from the packed layout: bitwise quant::dequantize_row of the ggml row (times the
// scale) for every format, rows in several groups and lanes, ids clamped to [0, rows).
TEST(CpuEmbedding, RowsBitwiseTheDequantisedRows) {
  for (GgmlType t : formats()) {
    const Matrix m = random_matrix(t, 37, cols_for(t, 96), 9);
    const std::vector<int32_t> ids = {0, 15, 16, 36, 5, -4, 99};
    for (float scale : {1.0f, 0.125f}) {
      std::vector<float> got(ids.size() * static_cast<size_t>(m.cols), -1.0f), want;
      embedding(m.weight(), ids.data(), 0, 3, got.data(), scale);
      embedding(m.weight(), ids.data(), 3, static_cast<int64_t>(ids.size()), got.data(), scale);
      const int64_t rb = quant::row_bytes(t, m.cols);
      for (int32_t id : ids) {
        const int64_t r = std::clamp<int64_t>(id, 0, m.rows - 1);
        std::vector<float> row(static_cast<size_t>(m.cols));
        quant::dequantize_row(t, m.blocks.data() + r * rb, row.data(), m.cols);
        for (float v : row) want.push_back(scale == 1.0f ? v : v * scale);
      }
      EXPECT_EQ(bit_differences(got, want), 0) << quant::weight_type_name(t) << " scale " << scale;
    }
  }
}

}  // namespace
