// Shared by the suites that run on OpenCL and again on the native CPU device (the *_native CTests).
#pragma once

#include <cstdlib>
#include <memory>
#include <string>

#include "device/device.h"
#include "device/ocl_device.h"
#include "ocl/context.h"

namespace specdec::testing {

// The device under test through the seam: the OpenCL context `ctx` (the one a suite's OpenCL-only
// tests use), or the native CPU device when SPECDEC_DEVICE=native.
inline std::shared_ptr<device::Device> device_under_test(const std::shared_ptr<ocl::Context>& ctx) {
  const char* env = std::getenv("SPECDEC_DEVICE");
  if (env != nullptr && std::string(env) == "native") return device::open("native");
  return device::wrap(ctx);
}

}  // namespace specdec::testing
