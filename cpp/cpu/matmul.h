// Native CPU quantized matmul over the device layout (quant/layout.h): the same packed bytes the
// OpenCL kernels read, so one weight copy serves both devices. y [n, rows] = x [n, cols] . W^T,
// bitwise equal to quant::matmul_reference(..., Numerics::kDevice) on every path (the same exact
// integer block dots and the same float operations in the same order, docs/quant.md "Numerics
// and batch invariance"), hence batch invariant and equal to the OpenCL kernels.
//
// A multi-row kernel: each group of 16 weight rows is decoded once per block for up to 16
// activation rows (more rows: tiles of 16 over the same group while it is in cache). Work is
// split by row groups, [group_begin, group_end), so a thread pool can hand out ranges.
#pragma once

#include <cstdint>

#include "cpu/activations.h"
#include "cpu/isa.h"
#include "quant/layout.h"
#include "quant/reference.h"

namespace specdec::cpu {

// The activations of one matmul: for block formats xq, quantised with the weight's
// quant::activation_scale_block (cpu/activations.h); for F32 / F16 / BF16 weights x, read as f32.
struct MatmulInput {
  int64_t n = 0;                      // activation rows
  const float* x = nullptr;           // [n, cols]: float formats
  const Activations* xq = nullptr;    // [n, cols]: block formats
};

// A packed weight in host memory: its layout and the bytes quant::repack made.
struct PackedWeight {
  const quant::DeviceLayout* layout = nullptr;
  const uint8_t* data = nullptr;  // layout->total_bytes
};

// Writes y[i * layout.rows + r] for every activation row i < in.n and every weight row r of
// groups [group_begin, group_end) (r < layout.rows; the zero rows padding the last group are not
// written). `isa` must be one of cpu_isas(); formats without a kernel on that path run the next
// lower path's. ConfigError for a group range outside [0, layout.groups], a missing or mismatched
// input (cols, n, scale block) or a path this CPU cannot run.
void matmul(const PackedWeight& w, const MatmulInput& in, int64_t group_begin, int64_t group_end,
            float* y,  // [in.n, layout.rows]
            Isa isa = cpu_isa());

// The same writing row i of the result at y + i * ldy (ldy >= layout.rows: a column range of a
// wider row, as quant::OutputColumns places it).
void matmul(const PackedWeight& w, const MatmulInput& in, int64_t group_begin, int64_t group_end,
            float* y, int64_t ldy, Isa isa);

// The whole matrix: matmul(w, in, 0, layout.groups, y, isa).
void matmul(const PackedWeight& w, const MatmulInput& in, float* y, Isa isa = cpu_isa());

// The path that actually runs `type` when `isa` is asked for (the first of isa, its lower paths
// down to portable that has a kernel for the type).
Isa matmul_isa_for(quant::GgmlType type, Isa isa);

}  // namespace specdec::cpu
