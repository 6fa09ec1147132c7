// OpenCL device discovery and choice.
//
// A device is chosen by a selector string (API argument, else the SPECDEC_DEVICE environment
// variable, else the default): "" or "auto" (first GPU, else first accelerator, else first
// device), "N" (index in list_devices()), "P:D" (platform P, device D), "gpu" / "cpu" /
// "accelerator" (first of that type), or any other text (first device whose name, vendor or
// platform name contains it, case-insensitive). An unmatched selector is a ConfigError that
// lists the devices.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ocl/cl.h"

namespace specdec::ocl {

struct DeviceInfo {
  int index = 0;           // position in list_devices()
  int platform_index = 0;
  int device_index = 0;    // within its platform
  std::string platform_name;
  std::string platform_version;
  std::string name;
  std::string vendor;
  std::string type;        // "gpu", "cpu", "accelerator", "other"
  std::string version;     // CL_DEVICE_VERSION
  std::string driver_version;
  std::string opencl_c_version;
  int compute_units = 0;
  int64_t global_mem_bytes = 0;
  int64_t max_alloc_bytes = 0;
  int64_t local_mem_bytes = 0;
  int64_t max_work_group_size = 0;
  int64_t max_clock_mhz = 0;
  bool fp16 = false;
  bool fp64 = false;
  bool subgroups = false;
  std::string extensions;
  cl_platform_id platform = nullptr;
  cl_device_id id = nullptr;

  std::string summary() const;  // one line a person can read
};

// x86 SIMD features of the CPU that an OpenCL CPU device runs on (the host: PoCL's CPU devices and
// other CPU runtimes execute here), read with cpuid, the OS's enabling of the AVX / AVX-512
// register state included. All false for other device types and on non-x86 hosts. Kernels choose
// their integer-dot paths from these instead of compiling probe kernels.
struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vnni = false;
  std::string summary() const;  // "avx2 fma avx512f avx512bw" or "none"
};
CpuFeatures cpu_features(const DeviceInfo& device);

// Every device of every platform; an empty list when there is no OpenCL platform.
std::vector<DeviceInfo> list_devices();

// The device for `selector` (see the header comment). Throws ConfigError when nothing matches
// and UnsupportedError when there is no OpenCL device at all.
DeviceInfo select_device(const std::string& selector = "");

}  // namespace specdec::ocl
