// Shared by the suites that run on OpenCL and again on the native CPU device (the *_native CTests).
#pragma once

#include <cstdlib>
#include <memory>
#include <string>

#include "device/device.h"

namespace specdec::testing {

// The device under test through the seam: the native CPU device when SPECDEC_DEVICE=native, else
// the one `opencl()` gives (the suite's OpenCL context, the one its OpenCL-only tests use).
template <typename MakeOpenCl>
std::shared_ptr<device::Device> device_under_test(MakeOpenCl opencl) {
  const char* env = std::getenv("SPECDEC_DEVICE");
  if (env != nullptr && std::string(env) == "native") return device::open("native");
  return opencl();
}

}  // namespace specdec::testing
