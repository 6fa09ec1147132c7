// The KV-cache tensors on OpenCL: allocation, zero fill and read-back for kv/allocator.cpp.
#include "device/ocl_device.h"
#include "kv/allocator.h"
#include "kv/impl.h"

namespace specdec::kv {

ocl::Buffer ocl_allocate_zeroed(device::Device& dev, size_t bytes) {
  ocl::Context& ctx = ocl::context_of(dev);
  ocl::Buffer b = ocl::Buffer::long_lived(ctx, bytes);
  b.fill_zero(ctx);
  return b;
}

void ocl_read(device::Device& dev, const ocl::Buffer& b, void* dst, size_t n) {
  b.read(ocl::context_of(dev), dst, n);
}

ocl::Context& KvCacheAllocation::context() const { return ocl::context_of(*dev_); }

}  // namespace specdec::kv
