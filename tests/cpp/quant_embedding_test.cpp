// Embedding lookup from device weights in block format against dequantize_row: bitwise equal
// (same float operations), for every format, rows in several groups and lanes, odd lengths for
// the float formats, a scale, clamping of out-of-range ids on the device and the host's check.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/errors.h"
#include "quant_test_util.h"

using namespace specdec;
using namespace specdec::quant;
using namespace specdec::quant::testing;

namespace {

std::vector<float> device_lookup(const DeviceWeight& w, const std::vector<int32_t>& ids,
                                 float scale, bool host_ids) {
  device::Buffer out = dev().allocate(ids.size() * static_cast<size_t>(w.cols()) * sizeof(float));
  if (host_ids) {
    embedding_lookup(dev(), w, std::span<const int32_t>(ids), out, scale);
  } else {
    device::Buffer idb = dev().allocate(ids.size() * sizeof(int32_t));
    dev().write(idb, ids.data(), ids.size() * sizeof(int32_t));
    embedding_lookup(dev(), w, idb, static_cast<int64_t>(ids.size()), out, scale);
  }
  std::vector<float> y(ids.size() * static_cast<size_t>(w.cols()));
  dev().read(out, y.data(), y.size() * sizeof(float));
  return y;
}

class QuantEmbedding : public ::testing::TestWithParam<GgmlType> {};

TEST_P(QuantEmbedding, RowsMatchDequantizeBitwise) {
  const GgmlType t = GetParam();
  const int64_t rows = 53, cols = weight_format(t).block_size == 1 ? 77 : 512;
  const std::vector<uint8_t> wq = random_weights(t, rows, cols, 21);
  const DeviceWeight w = upload(t, wq, rows, cols);
  const std::vector<float> ref = dequantize(t, wq.data(), rows, cols);
  const std::vector<int32_t> ids = {0, 52, 17, 16, 15, 33, 17, 48};
  for (float scale : {1.0f, 0.125f}) {
    const std::vector<float> y = device_lookup(w, ids, scale, true);
    std::vector<float> expect;
    for (int32_t id : ids) {
      for (int64_t k = 0; k < cols; ++k)
        expect.push_back(ref[static_cast<size_t>(id * cols + k)] * scale);
    }
    EXPECT_EQ(bit_differences(y, expect), 0) << weight_type_name(t) << " scale " << scale;
  }
}

TEST_P(QuantEmbedding, OutOfRangeIdsAreClampedOnDeviceAndRejectedOnHost) {
  const GgmlType t = GetParam();
  const int64_t rows = 20, cols = weight_format(t).block_size == 1 ? 40 : 256;
  const std::vector<uint8_t> wq = random_weights(t, rows, cols, 22);
  const DeviceWeight w = upload(t, wq, rows, cols);
  const std::vector<float> clamped = device_lookup(w, {-5, 1000}, 1.0f, false);
  const std::vector<float> edges = device_lookup(w, {0, 19}, 1.0f, false);
  EXPECT_EQ(bit_differences(clamped, edges), 0);
  EXPECT_THROW(device_lookup(w, {3, 20}, 1.0f, true), ConfigError);
  EXPECT_THROW(device_lookup(w, {-1}, 1.0f, true), ConfigError);
}

INSTANTIATE_TEST_SUITE_P(Formats, QuantEmbedding, ::testing::ValuesIn(supported_weight_types()),
                         [](const auto& info) {
                           return std::string(weight_format(info.param).name);
                         });

}  // namespace
