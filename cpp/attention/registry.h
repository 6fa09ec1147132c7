// The registry of attention backends and the per-device priority lists the selector walks.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "attention/backend.h"

namespace specdec::attn {

// Every built-in backend, in registration order (REFERENCE, OCL_PAGED, OCL_FLASH, OCL_MLA).
const std::vector<std::unique_ptr<AttentionBackend>>& all_backends();
std::vector<std::string> backend_names();

// The backend named `name`, any case. ConfigError naming attention_backend and listing the
// valid names otherwise.
const AttentionBackend& get_backend(const std::string& name);

// Backends in the order auto-selection tries them on `device`, keyed on its kind and type
// ("cpu", "gpu", "accelerator", ...): the specialised kernels first, REFERENCE last; only those
// that run on the device's kind (AttentionBackend::runs_on).
std::vector<const AttentionBackend*> priority_list(const device::Info& device);
// The same on an OpenCL device of `device_type` (the Python API's device_type).
std::vector<const AttentionBackend*> priority_list(const std::string& device_type);

// What the selector's device_type strings mean: an OpenCL device of that type.
device::Info opencl_device_info(const std::string& device_type);

}  // namespace specdec::attn
