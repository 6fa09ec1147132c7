// What layers above the device seam may know of a device: its kind, a buffer's lifetime and
// access, and the device's description (no OpenCL types: docs/device_seam.md).
#pragma once

#include <cstdint>
#include <string>

namespace specdec::device {

enum class Kind : uint8_t { kOpenCL, kCpu };  // kCpu: the native CPU device (device/cpu_device.h)

enum class Access : uint8_t { kReadWrite, kReadOnly };  // kReadOnly: CL_MEM_READ_ONLY on OpenCL

enum class Lifetime : uint8_t {
  kModel,      // weights, KV cache: until the model goes (huge pages where the device has them)
  kWorkspace,  // reused across steps (step buffers, activations, attention scratch): plain memory
  kStep,       // made per step with its contents (ids, positions, metadata): may be released
};             // right after the ops that read it are enqueued

// What the layers above may read of a device (today filled from ocl::DeviceInfo).
struct Info {
  Kind kind = Kind::kOpenCL;
  std::string name, vendor, platform;
  std::string type;  // "gpu", "cpu", "accelerator", "other"
  int compute_units = 0;
  int64_t global_mem_bytes = 0;
  int64_t max_alloc_bytes = 0;
  int64_t local_mem_bytes = 0;
  bool fp64 = false;
  std::string summary() const;  // one line a person can read
};

const char* kind_name(Kind kind);  // "opencl", "cpu"

}  // namespace specdec::device
