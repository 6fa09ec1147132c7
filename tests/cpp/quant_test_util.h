// Shared by the quantized-matmul tests: a device context, random quantized matrices and
// running matmul / embedding on the device.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "device/ocl_device.h"
#include "device_test_util.h"
#include "ocl/context.h"
#include "quant/dequantize.h"
#include "quant/device_weight.h"
#include "quant/matmul.h"
#include "quant/ocl_matmul.h"

namespace specdec::quant::testing {

inline std::shared_ptr<ocl::Context> context() {
  static auto ctx = ocl::Context::create();
  return ctx;
}

// The device under test through the seam (the quant ops take a device::Device&): the OpenCL
// context, or the native CPU device when SPECDEC_DEVICE=native (the *_native CTests); the
// OpenCL-only tests keep context().
inline device::Device& dev() {
  static const std::shared_ptr<device::Device> d =
      specdec::testing::device_under_test([] { return device::wrap(context()); });
  return *d;
}
inline bool native() { return dev().kind() == device::Kind::kCpu; }

inline std::vector<float> gaussian(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A rows x cols matrix of `type` holding quantised Gaussian values (ggml row-major blocks).
inline std::vector<uint8_t> random_weights(GgmlType type, int64_t rows, int64_t cols,
                                           uint32_t seed) {
  const std::vector<float> w = gaussian(static_cast<size_t>(rows * cols), seed, 0.05f);
  return quantize(type, w.data(), rows, cols);
}

inline DeviceWeight upload(GgmlType type, const std::vector<uint8_t>& bytes, int64_t rows,
                           int64_t cols) {
  return upload_weight(dev(), type, bytes.data(), bytes.size(), {cols, rows}, "w");
}

// y [n, rows] = x [n, cols] . W^T on the device.
inline std::vector<float> device_matmul(const DeviceWeight& w, const std::vector<float>& x,
                                        int64_t n) {
  device::Buffer xb = dev().allocate(std::max<size_t>(x.size(), 1) * sizeof(float));
  if (!x.empty()) dev().write(xb, x.data(), x.size() * sizeof(float));
  device::Buffer yb = dev().allocate(static_cast<size_t>(std::max<int64_t>(n, 1) * w.rows()) * sizeof(float));
  matmul(dev(), w, xb, n, yb);
  std::vector<float> y(static_cast<size_t>(n * w.rows()));
  if (!y.empty()) dev().read(yb, y.data(), y.size() * sizeof(float));
  return y;
}

// Rows [first, first + count) of a row-major [*, width] matrix.
inline std::vector<float> row_slice(const std::vector<float>& m, int64_t width, int64_t first,
                                    int64_t count) {
  return {m.begin() + first * width, m.begin() + (first + count) * width};
}

// Number of elements that differ in their bits.
inline int64_t bit_differences(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  int64_t diff = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) ++diff;
  }
  return diff;
}

}  // namespace specdec::quant::testing
