// OpenCL tuning and launch helpers shared by the ops' OpenCL files (ops/ocl_*.cpp): the per-device
// work-group shapes and build options. Below the device seam: dispatch files do not include this.
#pragma once

#include <string>

#include "ocl/context.h"

namespace specdec::ops {

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

constexpr int kTopKCandidates = 4096;  // CAP of kernels/ops_topk.cl: 32 KiB of local memory

// top_k's kernel: a per-row heap in one work-item (where rows get one work-item each: CPUs) or a
// work-group per row (GPUs); SPECDEC_OPS_TOPK=heap|group overrides. Both give the same result.
bool top_k_uses_heap(const ocl::Context& ctx);
// Work-items per work-group of the work-group kernel (more give more subsets and a tighter first
// bound; the result does not depend on it).
int top_k_local_size(const ocl::Context& ctx);

}  // namespace specdec::ops
