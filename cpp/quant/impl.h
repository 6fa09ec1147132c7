// The quant ops' per-device implementations, called by quant/matmul.cpp after the checks (OpenCL:
// quant/ocl_matmul.cpp). Arguments are checked already.
#pragma once

#include <cstdint>
#include <vector>

#include "device/device.h"
#include "quant/matmul.h"

namespace specdec::quant {

// Which kernel family a weight type takes (float weights read x itself; the others its quantisation).
enum class Family { kFloat, kQ32, kK };
Family family(GgmlType type);

// n > 0; out prepared for [n, cols] with cols % scale_block == 0
void ocl_quantize_activations(device::Device& dev, const device::Buffer& x, int64_t n, int64_t cols,
                              QuantizedActivations& out, int scale_block);
// n > 0; y row i at y_offset + i * ldy
void ocl_matmul(device::Device& dev, const DeviceWeight& w, const device::Buffer& x,
                const QuantizedActivations& xq, int64_t n, device::Buffer& y, int64_t y_offset, int64_t ldy);
// n > 0
void ocl_embedding_lookup(device::Device& dev, const DeviceWeight& w, const device::Buffer& ids, int64_t n,
                          device::Buffer& out, float scale);


// The native CPU device (quant/cpu_*.cpp): the same arguments, recorded on the device.
void cpu_quantize_activations(device::Device& dev, const device::Buffer& x, int64_t n, int64_t cols,
                              QuantizedActivations& out, int scale_block);
void cpu_matmul(device::Device& dev, const DeviceWeight& w, const device::Buffer& x,
                const QuantizedActivations& xq, int64_t n, device::Buffer& y, int64_t y_offset, int64_t ldy);
void cpu_embedding_lookup(device::Device& dev, const DeviceWeight& w, const device::Buffer& ids, int64_t n,
                          device::Buffer& out, float scale);

}  // namespace specdec::quant
