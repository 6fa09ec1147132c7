// Embedding rows of the native CPU device from a packed weight (quant/layout.h): out [t, cols] =
// scale * dequantize_row(W[ids[t]]), bitwise what the OpenCL kernel (kernels/quant_embedding.cl)
// and quant::dequantize_row give; ids clamped to [0, rows) as on the OpenCL device (the host
// checks them before). Tokens [t0, t1), so a thread pool can split them.
#pragma once

#include <cstdint>

#include "cpu/matmul.h"

namespace specdec::cpu {

void embedding(const PackedWeight& w, const int32_t* ids, int64_t t0, int64_t t1, float* out, float scale = 1.0f);

}  // namespace specdec::cpu
