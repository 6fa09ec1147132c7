// Arguments shared by the forward ops (cpp/ops/*.h): a device buffer seen from an element offset
// and the range checks every op runs before it dispatches to its device's implementation.
#pragma once

#include <cstdint>
#include <string>

#include "device/buffer.h"

namespace specdec::ops {

// A device buffer from an element offset on, and its range check (device/buffer.h).
using Slice = device::Slice;
using device::check_slice;

// ConfigError naming `what` unless value >= min_value.
void check_at_least(int64_t value, int64_t min_value, const std::string& what);

// The OpenCL launch helpers (reduction_local_size, launch_rows, ops_build_options): ops/ocl_common.h.

}  // namespace specdec::ops
