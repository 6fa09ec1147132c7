#include "ocl/device.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <utility>

#include "common/errors.h"
#include "ocl/error.h"

namespace specdec::ocl {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string platform_string(cl_platform_id p, cl_platform_info what) {
  size_t n = 0;
  SPECDEC_CL_CHECK(clGetPlatformInfo(p, what, 0, nullptr, &n));
  std::string s(n, '\0');
  SPECDEC_CL_CHECK(clGetPlatformInfo(p, what, n, s.data(), nullptr));
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

std::string device_string(cl_device_id d, cl_device_info what) {
  size_t n = 0;
  SPECDEC_CL_CHECK(clGetDeviceInfo(d, what, 0, nullptr, &n));
  std::string s(n, '\0');
  SPECDEC_CL_CHECK(clGetDeviceInfo(d, what, n, s.data(), nullptr));
  while (!s.empty() && s.back() == '\0') s.pop_back();
  return s;
}

template <typename T>
T device_value(cl_device_id d, cl_device_info what) {
  T value{};
  SPECDEC_CL_CHECK(clGetDeviceInfo(d, what, sizeof(T), &value, nullptr));
  return value;
}

std::string type_name(cl_device_type t) {
  if (t & CL_DEVICE_TYPE_GPU) return "gpu";
  if (t & CL_DEVICE_TYPE_CPU) return "cpu";
  if (t & CL_DEVICE_TYPE_ACCELERATOR) return "accelerator";
  return "other";
}

DeviceInfo describe(cl_platform_id p, cl_device_id d) {
  DeviceInfo info;
  info.platform = p;
  info.id = d;
  info.platform_name = platform_string(p, CL_PLATFORM_NAME);
  info.platform_version = platform_string(p, CL_PLATFORM_VERSION);
  info.name = device_string(d, CL_DEVICE_NAME);
  info.vendor = device_string(d, CL_DEVICE_VENDOR);
  info.version = device_string(d, CL_DEVICE_VERSION);
  info.driver_version = device_string(d, CL_DRIVER_VERSION);
  info.opencl_c_version = device_string(d, CL_DEVICE_OPENCL_C_VERSION);
  info.extensions = device_string(d, CL_DEVICE_EXTENSIONS);
  info.type = type_name(device_value<cl_device_type>(d, CL_DEVICE_TYPE));
  info.compute_units = static_cast<int>(device_value<cl_uint>(d, CL_DEVICE_MAX_COMPUTE_UNITS));
  info.global_mem_bytes = static_cast<int64_t>(device_value<cl_ulong>(d, CL_DEVICE_GLOBAL_MEM_SIZE));
  info.max_alloc_bytes = static_cast<int64_t>(device_value<cl_ulong>(d, CL_DEVICE_MAX_MEM_ALLOC_SIZE));
  info.local_mem_bytes = static_cast<int64_t>(device_value<cl_ulong>(d, CL_DEVICE_LOCAL_MEM_SIZE));
  info.max_work_group_size =
      static_cast<int64_t>(device_value<size_t>(d, CL_DEVICE_MAX_WORK_GROUP_SIZE));
  info.max_clock_mhz = device_value<cl_uint>(d, CL_DEVICE_MAX_CLOCK_FREQUENCY);
  info.fp16 = info.extensions.find("cl_khr_fp16") != std::string::npos;
  info.fp64 = info.extensions.find("cl_khr_fp64") != std::string::npos;
  info.subgroups = info.extensions.find("cl_khr_subgroups") != std::string::npos ||
                   info.extensions.find("cl_intel_subgroups") != std::string::npos;
  return info;
}

std::string device_list_text(const std::vector<DeviceInfo>& devices) {
  std::string out;
  for (const auto& d : devices) out += "\n  " + d.summary();
  return out;
}

const DeviceInfo* first_of_type(const std::vector<DeviceInfo>& devices, const std::string& type) {
  for (const auto& d : devices) {
    if (d.type == type) return &d;
  }
  return nullptr;
}

const DeviceInfo* match(const std::vector<DeviceInfo>& devices, const std::string& sel) {
  if (sel.empty() || sel == "auto") {
    for (const char* t : {"gpu", "accelerator"}) {
      if (auto* d = first_of_type(devices, t)) return d;
    }
    return &devices.front();
  }
  if (sel == "gpu" || sel == "cpu" || sel == "accelerator") return first_of_type(devices, sel);
  const bool digits = std::all_of(sel.begin(), sel.end(), [](unsigned char c) { return std::isdigit(c); });
  if (digits && sel.size() < 6) {
    const int i = std::stoi(sel);
    return i < static_cast<int>(devices.size()) ? &devices[i] : nullptr;
  }
  const auto colon = sel.find(':');
  if (colon != std::string::npos && colon > 0 && colon + 1 < sel.size() && colon < 6 &&
      sel.find(':', colon + 1) == std::string::npos &&
      sel.size() - colon < 7 &&
      std::all_of(sel.begin(), sel.end(), [](unsigned char c) { return std::isdigit(c) || c == ':'; })) {
    const int p = std::stoi(sel.substr(0, colon));
    const int k = std::stoi(sel.substr(colon + 1));
    for (const auto& d : devices) {
      if (d.platform_index == p && d.device_index == k) return &d;
    }
    return nullptr;
  }
  const std::string needle = lower(sel);
  for (const auto& d : devices) {
    if (lower(d.name + " " + d.vendor + " " + d.platform_name).find(needle) != std::string::npos) {
      return &d;
    }
  }
  return nullptr;
}

}  // namespace

std::string CpuFeatures::summary() const {
  std::string out;
  const std::pair<bool, const char*> names[] = {{avx2, "avx2"},         {fma, "fma"},
                                                {avx512f, "avx512f"},   {avx512bw, "avx512bw"},
                                                {avx512vnni, "avx512vnni"}};
  for (const auto& [on, name] : names) {
    if (on) out += (out.empty() ? "" : " ") + std::string(name);
  }
  return out.empty() ? "none" : out;
}

CpuFeatures cpu_features(const DeviceInfo& device) {
  CpuFeatures f;
  if (device.type != "cpu") return f;
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
  // libgcc / compiler-rt read cpuid and XCR0: a feature is reported only when the OS saves its
  // registers too.
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vnni = __builtin_cpu_supports("avx512vnni");
#endif
  return f;
}

std::string DeviceInfo::summary() const {
  return str_cat(index, ": [", platform_index, ":", device_index, "] ", name, " (", type, ", ",
                 platform_name, ", ", version, ", ", compute_units, " CUs, ",
                 global_mem_bytes >> 20, " MiB)");
}

std::vector<DeviceInfo> list_devices() {
  cl_uint num_platforms = 0;
  const cl_int err = clGetPlatformIDs(0, nullptr, &num_platforms);
  if (err == -1001 || num_platforms == 0) return {};  // CL_PLATFORM_NOT_FOUND_KHR: no ICD
  SPECDEC_CL_CHECK(err);
  std::vector<cl_platform_id> platforms(num_platforms);
  SPECDEC_CL_CHECK(clGetPlatformIDs(num_platforms, platforms.data(), nullptr));
  std::vector<DeviceInfo> out;
  for (cl_uint p = 0; p < num_platforms; ++p) {
    cl_uint n = 0;
    const cl_int e = clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, 0, nullptr, &n);
    if (e == CL_DEVICE_NOT_FOUND || n == 0) continue;
    SPECDEC_CL_CHECK(e);
    std::vector<cl_device_id> ids(n);
    SPECDEC_CL_CHECK(clGetDeviceIDs(platforms[p], CL_DEVICE_TYPE_ALL, n, ids.data(), nullptr));
    for (cl_uint k = 0; k < n; ++k) {
      DeviceInfo info = describe(platforms[p], ids[k]);
      info.index = static_cast<int>(out.size());
      info.platform_index = static_cast<int>(p);
      info.device_index = static_cast<int>(k);
      out.push_back(std::move(info));
    }
  }
  return out;
}

DeviceInfo select_device(const std::string& selector) {
  std::string sel = selector;
  std::string field = "device";
  if (sel.empty()) {
    if (const char* env = std::getenv("SPECDEC_DEVICE")) {
      sel = env;
      field = "SPECDEC_DEVICE";
    }
  }
  // device::open's forms: "ocl:<selector>" names an OpenCL device; "native" (the native CPU
  // device) leaves OpenCL's own choice, for what needs an OpenCL device beside it, to auto
  if (sel.rfind("ocl:", 0) == 0) sel = sel.substr(4);
  if (lower(sel) == "native") sel = "auto";
  const auto devices = list_devices();
  if (devices.empty()) {
    throw UnsupportedError(
        "no OpenCL device found: install an OpenCL driver (on a CPU-only Debian machine: "
        "apt-get install pocl-opencl-icd) and check with `clinfo -l`");
  }
  const std::string key = lower(sel);
  if (const DeviceInfo* d = match(devices, key)) return *d;
  throw ConfigError(field, str_cat("'", sel, "'"),
                    str_cat("no such device; use native (specdec's own CPU device), auto, an OpenCL "
                            "device's index, P:D, gpu/cpu/accelerator or part of its name (ocl:<that> "
                            "forces OpenCL). OpenCL devices:",
                            device_list_text(devices)));
}

}  // namespace specdec::ocl
