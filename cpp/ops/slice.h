// Arguments shared by the forward ops (cpp/ops/*.h): a device buffer seen from an element offset
// and the range checks every op runs before it dispatches to its device's implementation.
#pragma once

#include <cstdint>
#include <string>

#include "ocl/context.h"

namespace specdec::ops {

// A device buffer from an element offset on. Every op element is 4 bytes (f32 activations,
// int32 ids and positions), so offsets count elements. Converts implicitly from a Buffer, so a
// whole buffer can be passed where a Slice is expected; {buffer, offset} selects a later part
// (one row of a batch, the k part of a fused projection).
struct Slice {
  Slice(const ocl::Buffer& b, int64_t offset_elems = 0)
      : buffer(&b), offset(offset_elems) {}  // NOLINT

  const ocl::Buffer* buffer;
  int64_t offset;  // in 4-byte elements
};

// ConfigError naming `what` unless elements [offset, offset + num_elems) lie inside the buffer.
void check_slice(const Slice& s, int64_t num_elems, const std::string& what);
// ConfigError naming `what` unless value >= min_value.
void check_at_least(int64_t value, int64_t min_value, const std::string& what);

// The OpenCL launch helpers (reduction_local_size, launch_rows, ops_build_options): ops/ocl_common.h.

}  // namespace specdec::ops
