#include "device/device.h"
#include "device/cpu_device.h"
#include "device/ocl_device.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include "common/errors.h"
#include "cpu/isa.h"
#include "ocl/device.h"

namespace specdec::device {

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kOpenCL: return "opencl";
    case Kind::kCpu: return "cpu";
  }
  return "unknown";
}

std::string Info::summary() const {
  return str_cat(name, " (", kind_name(kind), " ", type, ", ", vendor, ", ", platform, "), ", compute_units,
                 " compute units, ", global_mem_bytes >> 20, " MiB");
}

bool auto_is_native() {
  std::vector<ocl::DeviceInfo> devices;
  try {
    devices = ocl::list_devices();
  } catch (const std::exception&) {  // a broken OpenCL driver: the native device still runs
    return true;
  }
  for (const ocl::DeviceInfo& d : devices) {
    if (d.type == "gpu" || d.type == "accelerator") return false;
  }
  const std::vector<cpu::Isa>& paths = cpu::cpu_isas();
  return devices.empty() || (!paths.empty() && paths.back() >= cpu::Isa::kAvx2);
}

std::shared_ptr<Device> open(const std::string& selector) {
  std::string chosen = selector;
  if (chosen.empty()) {
    const char* env = std::getenv("SPECDEC_DEVICE");
    chosen = env != nullptr ? env : "";
  }
  std::string key = chosen;
  std::transform(key.begin(), key.end(), key.begin(), [](unsigned char c) { return std::tolower(c); });
  if (key == "native" || ((key.empty() || key == "auto") && auto_is_native())) {
    return std::make_shared<CpuDevice>();
  }
  if (chosen.rfind("ocl:", 0) == 0) return wrap(ocl::Context::create(chosen.substr(4)));
  return wrap(ocl::Context::create(selector));  // the selector keeps ocl::select_device's meaning
}

}  // namespace specdec::device
