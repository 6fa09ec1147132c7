// The OpenCL device: Device over an ocl::Context (its in-order queue meets the ordering contract
// of device.h as it is). For device files (ocl_*.cpp) and the bindings only.
#pragma once

#include <memory>

#include "device/device.h"
#include "ocl/context.h"

namespace specdec::device {

class OclDevice final : public Device {
 public:
  explicit OclDevice(std::shared_ptr<ocl::Context> ctx);

  ocl::Context& context() const { return *ctx_; }
  const std::shared_ptr<ocl::Context>& shared_context() const { return ctx_; }

  Buffer allocate(size_t size_bytes, Lifetime lifetime = Lifetime::kWorkspace,
                  Access access = Access::kReadWrite) override;
  Buffer upload(const void* src, size_t size_bytes, Lifetime lifetime,
                Access access = Access::kReadWrite) override;
  Buffer region(const Buffer& parent, size_t origin, size_t size_bytes,
                Access access = Access::kReadWrite) override;
  size_t region_alignment() const override { return region_alignment_; }
  bool huge_pages() const override { return ocl::uses_huge_pages(*ctx_); }
  void write(const Buffer& buffer, const void* src, size_t n, size_t offset_bytes = 0) override;
  void read(const Buffer& buffer, void* dst, size_t n, size_t offset_bytes = 0) override;
  void fill_zero(const Buffer& buffer) override;
  void flush() override {}
  void sync() override { ctx_->finish(); }
  bool profiling() const override { return ctx_->profiling(); }
  Profile take_profile() override;
  std::unique_lock<std::recursive_mutex> lock() const override { return ctx_->lock(); }

  // Takes over an ocl::Buffer (same cl_mem, same memory).
  static Buffer adopt(ocl::Buffer buffer);

 private:
  static Buffer adopt_plain(ocl::Buffer buffer);
  std::shared_ptr<ocl::Context> ctx_;
  size_t region_alignment_ = 128;
};

// The Device over an existing context (the context stays shared: both see one queue).
std::shared_ptr<Device> wrap(std::shared_ptr<ocl::Context> ctx);

Info info_of(const ocl::DeviceInfo& device);

}  // namespace specdec::device

namespace specdec::ocl {

// The context under an OpenCL device; a logic_error on another kind.
Context& context_of(device::Device& dev);
// The cl_mem of an OpenCL buffer.
inline cl_mem mem(const device::Buffer& buffer) { return static_cast<cl_mem>(buffer.native()); }

}  // namespace specdec::ocl
