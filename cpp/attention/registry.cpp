#include "attention/registry.h"

#include <algorithm>
#include <cctype>

#include "attention/backends/backends.h"
#include "common/errors.h"

namespace specdec::attn {
namespace {

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

}  // namespace

const std::vector<std::unique_ptr<AttentionBackend>>& all_backends() {
  static const std::vector<std::unique_ptr<AttentionBackend>> backends = [] {
    std::vector<std::unique_ptr<AttentionBackend>> out;
    out.push_back(make_reference_backend());
    out.push_back(make_ocl_paged_backend());
    out.push_back(make_ocl_flash_backend());
    out.push_back(make_ocl_mla_backend());
    out.push_back(make_cpu_paged_backend());
    return out;
  }();
  return backends;
}

std::vector<std::string> backend_names() {
  std::vector<std::string> out;
  for (const auto& b : all_backends()) out.push_back(b->name());
  return out;
}

const AttentionBackend& get_backend(const std::string& name) {
  const std::string key = upper(name);
  for (const auto& b : all_backends()) {
    if (b->name() == key) return *b;
  }
  std::string valid = "auto";
  for (const auto& n : backend_names()) valid += ", " + n;
  throw ConfigError("attention_backend", "'" + name + "'", "unknown backend; valid options are " + valid);
}

std::vector<const AttentionBackend*> priority_list(const device::Info& device) {
  std::vector<const char*> names;
  switch (device.kind) {
    case device::Kind::kOpenCL: {
      // CPUs (PoCL): the tiled split-KV kernel first, measured 5-6x faster than OCL_PAGED there
      // (bench/results). Other devices: OCL_FLASH's kernels use one work-item per work-group, a
      // CPU shape, so the general kernel (64 work-items per token and head) goes first until
      // OCL_FLASH has a GPU-shaped variant and a GPU measurement. The host reference is always last.
      const bool cpu = device.type == "cpu";
      names = {cpu ? "OCL_FLASH" : "OCL_PAGED", cpu ? "OCL_PAGED" : "OCL_FLASH", "OCL_MLA", "REFERENCE"};
      break;
    }
    case device::Kind::kCpu:  // the native device's own backend, then the host reference
      names = {"CPU_PAGED", "REFERENCE"};
      break;
  }
  std::vector<const AttentionBackend*> out;
  for (const char* name : names) {
    const AttentionBackend& b = get_backend(name);
    if (b.runs_on(device.kind)) out.push_back(&b);
  }
  return out;
}

std::vector<const AttentionBackend*> priority_list(const std::string& device_type) {
  return priority_list(opencl_device_info(device_type));
}

device::Info opencl_device_info(const std::string& device_type) {
  device::Info info;
  info.kind = device::Kind::kOpenCL;
  info.type = device_type;
  return info;
}

}  // namespace specdec::attn
