// Arguments shared by the forward ops (cpp/ops/*.h): a device buffer seen from an element offset,
// the range checks every op runs before it launches, and the per-device work-group shapes.
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

// Work-items per work-group of the per-row reduction kernels (norm, sampling): a tuning value per
// device type (-DLOCAL), fixed for every launch on a device so that a row's result never depends
// on the batch. SPECDEC_OPS_LOCAL overrides it (rounded down to a power of two in 1..256).
int reduction_local_size(const ocl::Context& ctx);

// Launches a per-row reduction kernel whose argument `num_rows_arg` is the row count (long):
// work-groups of `local` work-items, one per row; local 1: one work-item per row, rows dealt to
// about 4 work-groups per compute unit (so that a few rows still use every core), the last
// work-group padded.
void launch_rows(ocl::Context& ctx, ocl::Kernel& kernel, int64_t rows, int local,
                 cl_uint num_rows_arg);

// Build options every ops program gets: -DLOCAL=<local> (0: reduction_local_size) and -DUSE_FP64
// when the device has cl_khr_fp64 (double accumulators, correctly rounded f32 sqrt / division).
const std::string& ops_build_options(const ocl::Context& ctx, int local = 0);

}  // namespace specdec::ops
