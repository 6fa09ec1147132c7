// The attention layer's OpenCL buffers through the device, while metadata and backend buffers are
// ocl::Buffer (step 7 of docs/device_seam.md makes them device::Buffer: then upload_int32s is
// dev.upload(..., kStep) and read_buffer / write_buffer are dev.read / dev.write).
#include <cstdint>
#include <vector>

#include "attention/backend.h"
#include "attention/metadata.h"
#include "device/ocl_device.h"

namespace specdec::attn {
namespace {

// `buffer`'s memory as a device::Buffer that does not own it (the caller's buffer outlives the
// blocking transfer it is used for).
device::Buffer borrow(const ocl::Buffer& buffer) {
  return device::Buffer(device::Kind::kOpenCL, buffer.get(), nullptr, buffer.size_bytes(), nullptr);
}

}  // namespace

ocl::Buffer upload_int32s(device::Device& dev, const std::vector<int32_t>& values) {
  ocl::Context& ctx = ocl::context_of(dev);
  if (values.empty()) return ocl::Buffer(ctx, sizeof(int32_t));
  return ocl::Buffer(ctx, values.data(), values.size() * sizeof(int32_t));
}

void read_buffer(device::Device& dev, const ocl::Buffer& buffer, void* dst, size_t n) {
  dev.read(borrow(buffer), dst, n);
}

void write_buffer(device::Device& dev, const ocl::Buffer& buffer, const void* src, size_t n) {
  dev.write(borrow(buffer), src, n);
}

}  // namespace specdec::attn
