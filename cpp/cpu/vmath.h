// The exp-based row loops of the path `isa` (cpu/vmath_kernels.h): portable (glibc's expf, the
// references' order: bitwise ops/reference.h), AVX2 or AVX-512 (vector exp, within the OpenCL
// kernels' documented tolerances). Internal to cpp/cpu/ops*.cpp.
#pragma once

#include "cpu/isa.h"
#include "cpu/vmath_kernels.h"

namespace specdec::cpu {

const vmath::Kernels& vmath_for(Isa isa);

}  // namespace specdec::cpu
