#include "device/ocl_device.h"

#include <stdexcept>
#include <utility>

#include "common/errors.h"

namespace specdec::device {
namespace {

cl_mem_flags flags_of(Access access) {
  return access == Access::kReadOnly ? CL_MEM_READ_ONLY : CL_MEM_READ_WRITE;
}

// Owns one reference to `mem`: released when the last Buffer sharing it goes.
std::shared_ptr<void> keep_mem(cl_mem mem) {
  return std::shared_ptr<void>(mem, [](void* m) { clReleaseMemObject(static_cast<cl_mem>(m)); });
}

std::byte* host_ptr_of(cl_mem mem) {  // the USE_HOST_PTR memory (huge pages), else nullptr
  void* host = nullptr;
  if (clGetMemObjectInfo(mem, CL_MEM_HOST_PTR, sizeof(host), &host, nullptr) != CL_SUCCESS) return nullptr;
  cl_mem_flags flags = 0;
  if (clGetMemObjectInfo(mem, CL_MEM_FLAGS, sizeof(flags), &flags, nullptr) != CL_SUCCESS ||
      (flags & CL_MEM_USE_HOST_PTR) == 0)
    return nullptr;
  return static_cast<std::byte*>(host);
}

void check_range(const Buffer& b, size_t n, size_t offset_bytes, const char* what) {
  if (offset_bytes > b.size_bytes() || n > b.size_bytes() - offset_bytes) {
    throw ConfigError(what, str_cat("[", offset_bytes, ", ", offset_bytes + n, ")"),
                      str_cat("must lie inside the buffer of ", b.size_bytes(), " bytes"));
  }
}

}  // namespace

Info info_of(const ocl::DeviceInfo& d) {
  Info info;
  info.kind = Kind::kOpenCL;
  info.name = d.name;
  info.vendor = d.vendor;
  info.platform = d.platform_name;
  info.type = d.type;
  info.compute_units = d.compute_units;
  info.global_mem_bytes = d.global_mem_bytes;
  info.max_alloc_bytes = d.max_alloc_bytes;
  info.local_mem_bytes = d.local_mem_bytes;
  info.fp64 = d.fp64;
  return info;
}

OclDevice::OclDevice(std::shared_ptr<ocl::Context> ctx) : Device(info_of(ctx->device())), ctx_(std::move(ctx)) {
  cl_uint bits = 0;
  if (clGetDeviceInfo(ctx_->device().id, CL_DEVICE_MEM_BASE_ADDR_ALIGN, sizeof(bits), &bits, nullptr) == CL_SUCCESS &&
      bits >= 8)
    region_alignment_ = std::max<size_t>(bits / 8, 64);  // device::Arena aligns regions to it
}

Buffer OclDevice::adopt(ocl::Buffer buffer) {
  const size_t size = buffer.size_bytes();
  cl_mem mem = buffer.release();
  if (mem == nullptr) return Buffer();
  return Buffer(Kind::kOpenCL, mem, host_ptr_of(mem), size, keep_mem(mem));
}

// A plain buffer (no USE_HOST_PTR memory): taken over without asking OpenCL for its host pointer,
// as these are made per step too.
Buffer OclDevice::adopt_plain(ocl::Buffer buffer) {
  const size_t size = buffer.size_bytes();
  cl_mem mem = buffer.release();
  return Buffer(Kind::kOpenCL, mem, nullptr, size, keep_mem(mem));
}

Buffer OclDevice::allocate(size_t size_bytes, Lifetime lifetime, Access access) {
  if (lifetime == Lifetime::kModel) return adopt(ocl::Buffer::long_lived(*ctx_, size_bytes, flags_of(access)));
  return adopt_plain(ocl::Buffer(*ctx_, size_bytes, flags_of(access)));
}

Buffer OclDevice::upload(const void* src, size_t size_bytes, Lifetime lifetime, Access access) {
  if (lifetime == Lifetime::kModel) {
    return adopt(ocl::Buffer::long_lived(*ctx_, size_bytes, flags_of(access), src));
  }
  return adopt_plain(ocl::Buffer(*ctx_, src, size_bytes, flags_of(access)));
}

Buffer OclDevice::region(const Buffer& parent, size_t origin, size_t size_bytes, Access access) {
  if (size_bytes == 0) throw ConfigError("size_bytes", "0", "a buffer region must be > 0 bytes");
  check_range(parent, size_bytes, origin, "buffer region");
  const cl_buffer_region r{origin, size_bytes};
  cl_int err = CL_SUCCESS;
  cl_mem mem = clCreateSubBuffer(ocl::mem(parent), flags_of(access), CL_BUFFER_CREATE_TYPE_REGION, &r, &err);
  ocl::check(err, "clCreateSubBuffer",
             str_cat("[", origin, ", ", origin + size_bytes, ") of ", parent.size_bytes(), " bytes"));
  std::byte* host = parent.host() != nullptr ? parent.host() + origin : nullptr;
  return Buffer(Kind::kOpenCL, mem, host, size_bytes, keep_mem(mem));
}

void OclDevice::write(const Buffer& buffer, const void* src, size_t n, size_t offset_bytes) {
  check_range(buffer, n, offset_bytes, "write range");
  if (n == 0) return;
  SPECDEC_CL_CHECK(clEnqueueWriteBuffer(ctx_->queue(), ocl::mem(buffer), CL_TRUE, offset_bytes, n, src, 0,
                                        nullptr, nullptr));
}

void OclDevice::read(const Buffer& buffer, void* dst, size_t n, size_t offset_bytes) {
  check_range(buffer, n, offset_bytes, "read range");
  if (n == 0) return;
  SPECDEC_CL_CHECK(clEnqueueReadBuffer(ctx_->queue(), ocl::mem(buffer), CL_TRUE, offset_bytes, n, dst, 0,
                                       nullptr, nullptr));
}

void OclDevice::fill_zero(const Buffer& buffer) {
  // as ocl::Buffer::fill_zero: the widest pattern (up to 128 bytes) that divides the size
  static constexpr cl_uchar kZeros[128] = {};
  const size_t size = buffer.size_bytes();
  if (size == 0) return;
  size_t pattern = sizeof(kZeros);
  while (pattern > 1 && size % pattern != 0) pattern /= 2;
  SPECDEC_CL_CHECK(clEnqueueFillBuffer(ctx_->queue(), ocl::mem(buffer), kZeros, pattern, 0, size, 0,
                                       nullptr, nullptr));
}

Profile OclDevice::take_profile() {
  const ocl::Context::Profile p = ctx_->take_profile();
  Profile out;
  out.ops.reserve(p.kernels.size());
  for (const auto& k : p.kernels) out.ops.push_back({k.kernel, k.launches, k.device_us});
  out.span_us = p.span_us;
  out.dropped = p.dropped;
  return out;
}

std::shared_ptr<Device> wrap(std::shared_ptr<ocl::Context> ctx) {
  if (ctx == nullptr) throw std::logic_error("device::wrap: no context");
  return std::make_shared<OclDevice>(std::move(ctx));
}

}  // namespace specdec::device

namespace specdec::ocl {

Context& context_of(device::Device& dev) {
  if (dev.kind() != device::Kind::kOpenCL) {
    throw std::logic_error(str_cat("ocl::context_of: a ", device::kind_name(dev.kind()), " device"));
  }
  return static_cast<device::OclDevice&>(dev).context();
}

}  // namespace specdec::ocl
