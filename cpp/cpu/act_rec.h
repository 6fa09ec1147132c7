// One record per (activation row, 32-value block) of quantised activations, the same 16 bytes
// kernels/quant_common.clh's act_rec holds, so the native and the OpenCL matmuls read one format.
// A leaf header (<cstdint> only): the per-ISA kernel files include it.
#pragma once

#include <cstdint>

namespace specdec::cpu {

struct ActRec {
  float d = 0.0f;     // the block's scale (a 256-value group's scale on each of its 8 blocks)
  float dsum = 0.0f;  // d * (float)(s0 + s1)
  int32_t s0 = 0;     // sum of q over elements 0..15 of the block
  int32_t s1 = 0;     // ... over 16..31
};
static_assert(sizeof(ActRec) == 16, "ActRec is OpenCL's float4 act_rec");

}  // namespace specdec::cpu
