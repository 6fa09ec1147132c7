#include "device/device.h"
#include "device/ocl_device.h"
#include "common/errors.h"

namespace specdec::device {

const char* kind_name(Kind kind) {
  switch (kind) {
    case Kind::kOpenCL: return "opencl";
  }
  return "unknown";
}

std::string Info::summary() const {
  return str_cat(name, " (", kind_name(kind), " ", type, ", ", vendor, ", ", platform, "), ", compute_units,
                 " compute units, ", global_mem_bytes >> 20, " MiB");
}

std::shared_ptr<Device> open(const std::string& selector) {
  return wrap(ocl::Context::create(selector));  // the selector keeps ocl::select_device's meaning
}

}  // namespace specdec::device
