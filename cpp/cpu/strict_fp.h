// Included first by the native CPU device's scalar files: no contraction of a * b + c into an FMA
// in them, as in the OpenCL kernels and the references (docs/ops.md, "Numerics"). The per-ISA
// files get -ffp-contract=off from CMake and write their FMAs explicitly.
#pragma once

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
