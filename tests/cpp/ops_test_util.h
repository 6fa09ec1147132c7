// Shared by the forward-op tests (ops_*_test.cpp): a device (device::open()), buffers from host vectors
// and back, random data, error statistics against the C++ references, bitwise comparison.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "device/device.h"

namespace specdec::ops::testing {

// The device every op test runs on (SPECDEC_DEVICE picks it, as for the package).
inline const std::shared_ptr<device::Device>& shared_device() {
  static const auto d = device::open();
  return d;
}

inline device::Device& dev() { return *shared_device(); }

template <typename T>
device::Buffer upload(const std::vector<T>& v, size_t min_elems = 1) {
  const size_t n = std::max(v.size(), min_elems);
  device::Buffer b = dev().allocate(n * sizeof(T));
  if (!v.empty()) dev().write(b, v.data(), v.size() * sizeof(T));
  return b;
}

template <typename T>
std::vector<T> download(const device::Buffer& b, size_t n, size_t offset_elems = 0) {
  std::vector<T> out(n);
  if (n > 0) dev().read(b, out.data(), n * sizeof(T), offset_elems * sizeof(T));
  return out;
}

inline std::vector<float> random_floats(size_t n, std::mt19937& rng, float stddev = 1.0f,
                                        float mean = 0.0f) {
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<float> out(n);
  for (auto& x : out) x = dist(rng);
  return out;
}

// Error of got against want: |got - want| / max(|want|, floor), and how many are bitwise equal
// (NaN matches NaN).
struct ErrorStats {
  double max_rel = 0.0;
  size_t exact = 0;
  size_t n = 0;
};

inline bool same_bits(float a, float b) {
  if (std::isnan(a) && std::isnan(b)) return true;
  uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  return ua == ub;
}

inline ErrorStats compare(const std::vector<float>& got, const std::vector<float>& want,
                          double floor = 1e-30) {
  ErrorStats s;
  s.n = want.size();
  EXPECT_EQ(got.size(), want.size());
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    if (same_bits(got[i], want[i])) {
      ++s.exact;
      continue;
    }
    const double d = std::abs(static_cast<double>(got[i]) - want[i]);
    const double rel =
        std::isnan(d) ? INFINITY : d / std::max(std::abs(static_cast<double>(want[i])), floor);
    s.max_rel = std::max(s.max_rel, rel);
  }
  return s;
}

inline ::testing::AssertionResult bitwise_equal(const std::vector<float>& a,
                                                const std::vector<float>& b) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure() << "sizes " << a.size() << " vs " << b.size();
  for (size_t i = 0; i < a.size(); ++i) {
    if (!same_bits(a[i], b[i])) {
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i];
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace specdec::ops::testing
