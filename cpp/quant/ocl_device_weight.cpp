// A weight's device buffer on OpenCL: the upload and read-back of quant/device_weight.cpp.
#include "device/ocl_device.h"
#include "quant/impl.h"

namespace specdec::quant {

ocl::Buffer ocl_weight_buffer(device::Device& dev, const std::vector<uint8_t>& packed,
                              ocl::BufferArena* arena) {
  ocl::Context& ctx = ocl::context_of(dev);
  ocl::Buffer b = arena != nullptr ? arena->allocate(packed.size(), CL_MEM_READ_ONLY)
                                   : ocl::Buffer::long_lived(ctx, packed.size(), CL_MEM_READ_ONLY);
  b.write(ctx, packed.data(), packed.size());
  return b;
}

void ocl_read_weight(device::Device& dev, const DeviceWeight& w, std::vector<uint8_t>& packed) {
  w.buffer.read(ocl::context_of(dev), packed.data(), packed.size());
}

}  // namespace specdec::quant
