// Attention-backend selection: for one layer's requirements, validate a requested backend
// (failing with every reason it does not fit) or walk the device's priority list and take the
// first that fits (failing with every backend and its reasons when none does).
#pragma once

#include <string>
#include <vector>

#include "attention/backend.h"

namespace specdec::attn {

struct BackendVerdict {
  const AttentionBackend* backend = nullptr;
  std::vector<std::string> reasons;  // empty: it fits
};

struct BackendChoice {
  const AttentionBackend* backend = nullptr;
  bool requested = false;               // true: named by the user, false: auto
  std::vector<BackendVerdict> verdicts;  // every candidate considered, in priority order
  std::string explain() const;           // one line per candidate, readable by a person
};

// Every backend of the device's priority list with its reasons for `r`.
std::vector<BackendVerdict> evaluate_backends(const AttentionRequirements& r, const device::Info& device);

// requested: "" or "auto" (any case) selects automatically; otherwise a backend name (any case).
// Throws ConfigError for an unknown name and UnsupportedError (a ValueError in Python) when the
// requested backend does not fit (with all its reasons, among them a device kind it does not run
// on) or no backend fits (with every backend's reasons).
BackendChoice select_backend(const AttentionRequirements& r, const std::string& requested,
                             const device::Info& device);

// The same on an OpenCL device of `device_type` (the Python API's device_type).
std::vector<BackendVerdict> evaluate_backends(const AttentionRequirements& r, const std::string& device_type = "cpu");
BackendChoice select_backend(const AttentionRequirements& r, const std::string& requested = "",
                             const std::string& device_type = "cpu");

}  // namespace specdec::attn
