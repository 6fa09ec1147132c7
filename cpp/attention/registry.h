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

// Backends in the order auto-selection tries them on a device of `device_type`
// ("cpu", "gpu", "accelerator", ...): the specialised kernels first, REFERENCE last.
std::vector<const AttentionBackend*> priority_list(const std::string& device_type);

}  // namespace specdec::attn
