// Weight formats on the host: dequantize_row on hand-built blocks with known values, quantize ->
// dequantize round trips per format (RMS error bounds), the device layout's repack / unpack
// round trip, and errors for unsupported types and bad lengths.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/errors.h"
#include "quant/dequantize.h"
#include "quant/formats.h"
#include "quant/layout.h"

using namespace specdec;
using namespace specdec::quant;

namespace {

void put_f16(uint8_t* p, float v) {
  const uint16_t b = float_to_half_bits(v);
  std::memcpy(p, &b, 2);
}

std::vector<float> gaussian(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(QuantFormat, SupportedListAndErrors) {
  EXPECT_EQ(supported_weight_types().size(), 15u);
  for (GgmlType t : supported_weight_types()) EXPECT_TRUE(is_weight_type_supported(t));
  EXPECT_FALSE(is_weight_type_supported(GgmlType::kIQ3_S));
  try {
    weight_format(GgmlType::kIQ2_XS);
    FAIL() << "expected UnsupportedError";
  } catch (const UnsupportedError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("iq2_xs"), std::string::npos) << msg;
    EXPECT_NE(msg.find("q4_K"), std::string::npos) << msg;
    EXPECT_NE(msg.find("bf16"), std::string::npos) << msg;
  }
  EXPECT_EQ(parse_weight_type("Q6_K"), GgmlType::kQ6_K);
  EXPECT_EQ(parse_weight_type("IQ4_XS"), GgmlType::kIQ4_XS);
  EXPECT_EQ(row_bytes(GgmlType::kIQ4_XS, 512), 272);
  EXPECT_EQ(row_bytes(GgmlType::kQ5_1, 64), 48);
  EXPECT_THROW(parse_weight_type("iq2_xs"), UnsupportedError);
  EXPECT_THROW(row_bytes(GgmlType::kQ4_K, 100), ConfigError);
  EXPECT_EQ(row_bytes(GgmlType::kQ4_K, 512), 288);
  EXPECT_EQ(row_bytes(GgmlType::kBF16, 3), 6);
  std::vector<float> out(32);
  const std::vector<uint8_t> blk(34);
  EXPECT_THROW(dequantize_row(GgmlType::kQ8_0, blk.data(), out.data(), 31), ConfigError);
  EXPECT_THROW(dequantize_row(GgmlType::kIQ3_S, blk.data(), out.data(), 256), UnsupportedError);
}

TEST(QuantFormat, Q4_0KnownBlock) {
  uint8_t b[18];
  put_f16(b, 0.5f);
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float y[32];
  dequantize_row(GgmlType::kQ4_0, b, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * static_cast<float>(j - 8));
    EXPECT_EQ(y[j + 16], 0.5f * static_cast<float>(7 - j));
  }
}

TEST(QuantFormat, Q5_0AndQ4_1KnownBlocks) {
  uint8_t b[22] = {};
  put_f16(b, 2.0f);
  const uint32_t qh = 0x80000001u;  // fifth bit of elements 0 and 31
  std::memcpy(b + 2, &qh, 4);
  for (int j = 0; j < 16; ++j) b[6 + j] = 0x3 | (0x5 << 4);
  float y[32];
  dequantize_row(GgmlType::kQ5_0, b, y, 32);
  EXPECT_EQ(y[0], 2.0f * (3 + 16 - 16));
  EXPECT_EQ(y[1], 2.0f * (3 - 16));
  EXPECT_EQ(y[16], 2.0f * (5 - 16));
  EXPECT_EQ(y[31], 2.0f * (5 + 16 - 16));

  uint8_t c[20] = {};
  put_f16(c, 0.25f);
  put_f16(c + 2, -1.0f);
  for (int j = 0; j < 16; ++j) c[4 + j] = static_cast<uint8_t>(j);
  dequantize_row(GgmlType::kQ4_1, c, y, 32);
  EXPECT_EQ(y[5], 0.25f * 5 - 1.0f);
  EXPECT_EQ(y[21], -1.0f);
}

TEST(QuantFormat, Q5_1KnownBlock) {
  uint8_t b[24] = {};
  put_f16(b, 0.5f);
  put_f16(b + 2, -1.0f);
  const uint32_t qh = 0x80000001u;  // fifth bit of elements 0 and 31
  std::memcpy(b + 4, &qh, 4);
  for (int j = 0; j < 16; ++j) b[8 + j] = 0x3 | (0x5 << 4);
  float y[32];
  dequantize_row(GgmlType::kQ5_1, b, y, 32);
  EXPECT_EQ(y[0], 0.5f * (3 + 16) - 1.0f);
  EXPECT_EQ(y[1], 0.5f * 3 - 1.0f);
  EXPECT_EQ(y[16], 0.5f * 5 - 1.0f);
  EXPECT_EQ(y[31], 0.5f * (5 + 16) - 1.0f);
}

// ggml's kvalues_iq4nl, written out here independently of quant/dequantize.h.
constexpr float kIq4[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                            1,    13,   25,  38,  53,  69,  89,  113};

TEST(QuantFormat, IQ4_NLKnownBlock) {
  uint8_t b[18];
  put_f16(b, 0.5f);
  for (int j = 0; j < 16; ++j) b[2 + j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float y[32];
  dequantize_row(GgmlType::kIQ4_NL, b, y, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], 0.5f * kIq4[j]);
    EXPECT_EQ(y[j + 16], 0.5f * kIq4[15 - j]);
  }
  EXPECT_EQ(y[0], -63.5f);
}

TEST(QuantFormat, IQ4_XSKnownBlock) {
  uint8_t b[136] = {};
  put_f16(b, 0.25f);
  // sub-block 5: ls = 46 (0b101110): low nibble 14 in the high half of scales_l[2], high bits
  // 0b10 at bits 10..11 of scales_h; every other sub-block has ls = 0, i.e. d * -32
  b[4 + 2] = 14 << 4;
  const uint16_t scales_h = 2 << 10;
  std::memcpy(b + 2, &scales_h, 2);
  b[8 + 16 * 5 + 3] = 0x0F;  // element 5 * 32 + 3: index 15; element 5 * 32 + 19: index 0
  b[8 + 1] = 0x80;           // sub-block 0: element 1 index 0, element 17 index 8
  float y[256];
  dequantize_row(GgmlType::kIQ4_XS, b, y, 256);
  EXPECT_EQ(y[5 * 32 + 3], 0.25f * 14 * 113);
  EXPECT_EQ(y[5 * 32 + 19], 0.25f * 14 * -127);
  EXPECT_EQ(y[1], 0.25f * -32 * -127);
  EXPECT_EQ(y[17], 0.25f * -32 * 1);
}

TEST(QuantFormat, Q2_KKnownBlock) {
  uint8_t b[84] = {};
  put_f16(b + 80, 0.5f);   // d
  put_f16(b + 82, 0.25f);  // dmin
  b[5] = 3 | (2 << 4);     // sub-block 5 (elements 80..95): scale 3, min 2
  b[13] = 7 | (1 << 4);    // sub-block 13 (elements 208..223): scale 7, min 1
  b[16 + 16 + 3] = 2 << 4;       // element 83 (n 0, j 2, h 1, l 3): q = 2
  b[16 + 32 + 16 + 7] = 3 << 4;  // element 215 (n 1, j 2, h 1, l 7): q = 3
  float y[256];
  dequantize_row(GgmlType::kQ2_K, b, y, 256);
  EXPECT_EQ(y[83], 0.5f * 3 * 2 - 0.25f * 2);
  EXPECT_EQ(y[84], -0.25f * 2);
  EXPECT_EQ(y[215], 0.5f * 7 * 3 - 0.25f * 1);
  EXPECT_EQ(y[0], 0.0f);
}

TEST(QuantFormat, Q3_KKnownBlock) {
  uint8_t b[110] = {};
  put_f16(b + 108, 0.5f);
  // sub-block 5 (elements 80..95): ls = 45 = 0b10'1101: low nibble in byte 5 (low half), high
  // bits at bits 2..3 of byte 8 + 1; sub-block 13 (elements 208..223): ls = 33 = 0b10'0001: low
  // nibble in byte 5 (high half), high bits at bits 6..7 of byte 8 + 1; all others ls = 0
  b[96 + 5] = 13 | (1 << 4);
  b[96 + 9] = (2 << 2) | (2 << 6);
  b[32 + 16 + 3] = 3 << 4;  // element 83 (n 0, j 2, h 1, l 3): low bits 3 ...
  b[16 + 3] = 1 << 2;       // ... and its hmask bit (set: no -4)
  b[32 + 32 + 16 + 7] = 1 << 4;  // element 215 (n 1, j 2, h 1, l 7): low bits 1 ...
  b[16 + 7] = 1 << 6;            // ... hmask bit 4 + 2
  float y[256];
  dequantize_row(GgmlType::kQ3_K, b, y, 256);
  EXPECT_EQ(y[83], 0.5f * 13 * 3);
  EXPECT_EQ(y[84], 0.5f * 13 * -4);
  EXPECT_EQ(y[215], 0.5f * 1 * 1);
  EXPECT_EQ(y[0], 0.5f * -32 * -4);
}

TEST(QuantFormat, Q4_KKnownBlock) {
  uint8_t b[144] = {};
  put_f16(b, 0.5f);       // d
  put_f16(b + 2, 0.25f);  // dmin
  // sub-block 1: scale 3, min 2; sub-block 6: scale 40 (0b101000), min 33 (0b100001)
  b[4 + 1] = 3;
  b[4 + 5] = 2;
  b[4 + 10] = (40 & 0xF) | ((33 & 0xF) << 4);
  b[4 + 2] |= (40 >> 4) << 6;
  b[4 + 6] |= (33 >> 4) << 6;
  for (int l = 0; l < 32; ++l) b[16 + l] = static_cast<uint8_t>(7 << 4);  // sub-block 1: q = 7
  for (int l = 0; l < 32; ++l) b[16 + 96 + l] = static_cast<uint8_t>(9);  // sub-block 6: q = 9
  float y[256];
  dequantize_row(GgmlType::kQ4_K, b, y, 256);
  EXPECT_EQ(y[32], 0.5f * 3 * 7 - 0.25f * 2);
  EXPECT_EQ(y[6 * 32 + 5], 0.5f * 40 * 9 - 0.25f * 33);
  EXPECT_EQ(y[0], 0.0f);
}

TEST(QuantFormat, Q6_KKnownBlock) {
  uint8_t b[210] = {};
  put_f16(b + 208, 0.5f);
  b[192 + 5] = static_cast<uint8_t>(-3);  // sub-block 5 = elements 80..95 (half 0, m = 1, l >= 16)
  b[32 + 20] = 0x0A;                      // ql[l + 32] low nibble, l = 20 -> element 52
  b[128 + 20] = 0x3 << 2;                 // qh bits 2-3 of l = 20
  float y[256];
  dequantize_row(GgmlType::kQ6_K, b, y, 256);
  EXPECT_EQ(y[52], 0.0f);  // sub-block 3 has scale 0
  b[192 + 3] = 4;
  dequantize_row(GgmlType::kQ6_K, b, y, 256);
  EXPECT_EQ(y[52], 0.5f * 4 * ((0x0A | (3 << 4)) - 32));
  EXPECT_EQ(y[84], 0.5f * -3 * (0 - 32));
}

struct RoundTrip {
  GgmlType type;
  double max_rel_rms;
};

class QuantRoundTrip : public ::testing::TestWithParam<RoundTrip> {};

TEST_P(QuantRoundTrip, DequantizeOfQuantizeIsClose) {
  const RoundTrip p = GetParam();
  const int64_t rows = 7, cols = 512;
  const std::vector<float> x = gaussian(static_cast<size_t>(rows * cols), 11, 0.05f);
  const std::vector<uint8_t> q = quantize(p.type, x.data(), rows, cols);
  ASSERT_EQ(static_cast<int64_t>(q.size()), rows * row_bytes(p.type, cols));
  const std::vector<float> y = dequantize(p.type, q.data(), rows, cols);
  double err = 0.0, ref = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += (x[i] - y[i]) * (x[i] - y[i]);
    ref += x[i] * x[i];
  }
  EXPECT_LE(std::sqrt(err / ref), p.max_rel_rms) << weight_type_name(p.type);
  // Quantizing the dequantized values again gives the same blocks for the simple formats.
  if (p.type == GgmlType::kF16 || p.type == GgmlType::kBF16 || p.type == GgmlType::kQ8_0) {
    EXPECT_EQ(quantize(p.type, y.data(), rows, cols), q);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Formats, QuantRoundTrip,
    ::testing::Values(RoundTrip{GgmlType::kF32, 0.0}, RoundTrip{GgmlType::kF16, 5e-4},
                      RoundTrip{GgmlType::kBF16, 4e-3}, RoundTrip{GgmlType::kQ8_0, 0.01},
                      RoundTrip{GgmlType::kQ4_0, 0.15}, RoundTrip{GgmlType::kQ4_1, 0.12},
                      RoundTrip{GgmlType::kQ5_0, 0.08}, RoundTrip{GgmlType::kQ4_K, 0.15},
                      RoundTrip{GgmlType::kQ5_K, 0.08}, RoundTrip{GgmlType::kQ6_K, 0.05},
                      RoundTrip{GgmlType::kQ5_1, 0.06}, RoundTrip{GgmlType::kIQ4_NL, 0.12},
                      RoundTrip{GgmlType::kIQ4_XS, 0.12}, RoundTrip{GgmlType::kQ3_K, 0.2},
                      RoundTrip{GgmlType::kQ2_K, 0.4}),
    [](const auto& info) { return std::string(weight_format(info.param.type).name); });

class QuantLayout : public ::testing::TestWithParam<GgmlType> {};

TEST_P(QuantLayout, RepackUnpackRoundTrip) {
  const GgmlType type = GetParam();
  for (const auto& [rows, cols] :
       std::vector<std::pair<int64_t, int64_t>>{{1, 256}, {16, 512}, {37, 768}}) {
    const int64_t c = weight_format(type).block_size == 1 ? cols - 3 : cols;
    const std::vector<float> x = gaussian(static_cast<size_t>(rows * c), 5);
    const std::vector<uint8_t> q = quantize(type, x.data(), rows, c);
    const DeviceLayout layout = device_layout(type, rows, c);
    EXPECT_EQ(layout.groups, (rows + 15) / 16);
    for (const Plane& p : layout.planes) EXPECT_EQ(p.offset % kPlaneAlignment, 0) << p.name;
    const std::vector<uint8_t> packed = repack(layout, q.data());
    EXPECT_EQ(static_cast<int64_t>(packed.size()), layout.total_bytes);
    EXPECT_EQ(unpack(layout, packed.data()), q) << rows << "x" << c;
  }
}

TEST_P(QuantLayout, RandomBytesRoundTrip) {
  // Any bit pattern (not only what quantize writes) survives: nothing is dequantized.
  const GgmlType type = GetParam();
  const int64_t rows = 21, cols = 512;
  std::vector<uint8_t> q(static_cast<size_t>(rows * row_bytes(type, cols)));
  std::mt19937 rng(3);
  for (uint8_t& b : q) b = static_cast<uint8_t>(rng());
  const DeviceLayout layout = device_layout(type, rows, cols);
  EXPECT_EQ(unpack(layout, repack(layout, q.data()).data()), q);
}

TEST(QuantLayout, LargeMatrixRepackedOverThreadsRowForRow) {
  // Large enough (8.7 MB) that repack and unpack split the groups over threads (a partial last
  // group among them); each row read back from the records by unpack_row, which walks alone;
  // repack_into (the native device's load) writes the same bytes.
  const GgmlType type = GgmlType::kQ8_0;
  const int64_t rows = 1000, cols = 8192, rb = row_bytes(type, cols);
  std::vector<uint8_t> q(static_cast<size_t>(rows * rb));
  std::mt19937 rng(4);
  for (uint8_t& b : q) b = static_cast<uint8_t>(rng());
  const DeviceLayout layout = device_layout(type, rows, cols);
  ASSERT_GE(layout.total_bytes, int64_t{8} << 20);
  const std::vector<uint8_t> packed = repack(layout, q.data());
  std::vector<uint8_t> row(static_cast<size_t>(rb));
  for (int64_t r = 0; r < rows; ++r) {
    unpack_row(layout, packed.data(), r, row.data());
    ASSERT_EQ(std::memcmp(row.data(), q.data() + r * rb, static_cast<size_t>(rb)), 0) << "row " << r;
  }
  EXPECT_EQ(unpack(layout, packed.data()), q);
  std::vector<uint8_t> into(static_cast<size_t>(layout.total_bytes), 0);  // as a fresh buffer
  repack_into(layout, q.data(), into.data());
  EXPECT_EQ(into, packed);
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantLayout, ::testing::ValuesIn(supported_weight_types()),
                         [](const auto& info) {
                           return std::string(weight_format(info.param).name);
                         });

TEST(QuantLayout, BadShapes) {
  EXPECT_THROW(device_layout(GgmlType::kQ4_0, 0, 32), ConfigError);
  EXPECT_THROW(device_layout(GgmlType::kQ4_0, 4, 48), ConfigError);
  EXPECT_THROW(device_layout(GgmlType::kIQ2_XS, 4, 256), UnsupportedError);
  EXPECT_EQ(device_layout(GgmlType::kF32, 3, 5).total_bytes, 320);  // one group of 16 rows x 5
}

}  // namespace
