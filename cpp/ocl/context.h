// RAII wrappers over an OpenCL context, its in-order queue, buffers, programs and kernels.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "device/buffer.h"
#include "ocl/cl.h"
#include "ocl/device.h"
#include "ocl/error.h"

namespace specdec::ocl {

class Kernel;

// A context and one in-order command queue on one device, with a cache of built programs
// keyed by (program name, build options). Not copyable; share it through shared_ptr.
class Context {
 public:
  explicit Context(const DeviceInfo& device);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // The device picked by select_device(selector) (SPECDEC_DEVICE when selector is empty).
  static std::shared_ptr<Context> create(const std::string& selector = "");

  const DeviceInfo& device() const { return device_; }
  cl_context get() const { return context_; }
  cl_command_queue queue() const { return queue_; }
  void finish() const;

  // Kernel `kernel_name` of the embedded program `program` built with `options`
  // (SPECDEC_CL_BUILD_OPTIONS is appended). Built once per (program, options, source); the kernel
  // object is created once too and shared, its arguments set right before every launch. So that
  // several threads may use one Context, the returned Kernel holds the context's (recursive)
  // lock from creation to destruction: set the arguments and launch, then let it go (never keep
  // a Kernel beyond one launch sequence). Everything else on a Context is thread-safe: OpenCL
  // queue calls are, and the program caches are guarded by the same lock.
  Kernel kernel(const std::string& program, const std::string& kernel_name,
                const std::string& options = "");
  // Builds `source` as program `name` (cached like embedded programs). The build prints nothing:
  // compiler warnings are off (-w) unless SPECDEC_CL_WARNINGS=1. A failed build throws OclError
  // carrying the program name, the options and the full build log.
  cl_program build(const std::string& name, const std::string& source, const std::string& options);
  size_t num_cached_programs() const;
  // The build log of every program built so far whose log is not empty (warnings, notes), by
  // program name and options: kept so that a caller can show them (tests check there are none).
  std::vector<std::pair<std::string, std::string>> build_logs() const;
  // The lock a Kernel holds; taken by anything that must not interleave with other threads'
  // launches on this context (recursive: a thread may take it again).
  std::unique_lock<std::recursive_mutex> lock() const { return std::unique_lock(mu_); }

  // Kernel profiling, on when SPECDEC_PROFILE is set at creation (the queue then records
  // timestamps: every launch keeps an event until take_profile()). take_profile() waits for the
  // queue and returns, per kernel name in first-launch order, the launches and the device time
  // (start to end of each), and the span from the first launch queued to the last one ended.
  struct KernelProfile {
    std::string kernel;
    int64_t launches = 0;
    double device_us = 0;
  };
  struct Profile {
    std::vector<KernelProfile> kernels;
    double span_us = 0;    // first launch queued -> last launch ended
    int64_t dropped = 0;   // launches past kMaxProfiledLaunches since the last call (not timed)
  };
  static constexpr size_t kMaxProfiledLaunches = 1 << 20;
  bool profiling() const { return profiling_; }
  Profile take_profile();
  void record_launch(const std::string& kernel, cl_event event) const;

 private:
  DeviceInfo device_;
  cl_context context_ = nullptr;
  cl_command_queue queue_ = nullptr;
  // (name, full options, source hash) -> program; (program, kernel name) -> kernel
  std::map<std::tuple<std::string, std::string, size_t>, cl_program> programs_;
  std::map<std::pair<cl_program, std::string>, cl_kernel> kernels_;
  // (program, kernel, options) -> kernel: the per-launch lookup, before any source is hashed.
  // Looked up by string_views (no key strings are built per launch).
  struct LaunchKey {
    std::string program, kernel, options;
  };
  struct LaunchKeyView {
    std::string_view program, kernel, options;
  };
  struct LaunchKeyHash {
    using is_transparent = void;
    size_t operator()(const LaunchKeyView& k) const noexcept;
    size_t operator()(const LaunchKey& k) const noexcept { return (*this)(LaunchKeyView{k.program, k.kernel, k.options}); }
  };
  struct LaunchKeyEq {
    using is_transparent = void;
    static LaunchKeyView view(const LaunchKey& k) { return {k.program, k.kernel, k.options}; }
    static LaunchKeyView view(const LaunchKeyView& k) { return k; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const noexcept {
      const LaunchKeyView x = view(a), y = view(b);
      return x.program == y.program && x.kernel == y.kernel && x.options == y.options;
    }
  };
  std::unordered_map<LaunchKey, std::pair<cl_kernel, std::string>, LaunchKeyHash, LaunchKeyEq> launch_cache_;
  std::vector<std::pair<std::string, std::string>> build_logs_;
  bool profiling_ = false;
  mutable std::recursive_mutex mu_;
  mutable std::vector<std::pair<std::string, cl_event>> launches_;  // while profiling
  mutable int64_t dropped_launches_ = 0;
};

// A device buffer. Move-only.
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Context& ctx, size_t size_bytes, cl_mem_flags flags = CL_MEM_READ_WRITE);
  // A buffer holding a copy of src[0, size_bytes), copied when it is created
  // (CL_MEM_COPY_HOST_PTR): no round trip through the queue, unlike write().
  Buffer(const Context& ctx, const void* src, size_t size_bytes, cl_mem_flags flags = CL_MEM_READ_WRITE);
  // A buffer that lives as long as a model (weights, the KV cache): on a CPU device, 1 MiB or more
  // goes into huge-page host memory of its own (2 MiB aligned, MADV_HUGEPAGE, CL_MEM_USE_HOST_PTR,
  // unmapped once OpenCL deletes the buffer), where streaming kernels read faster than from the
  // runtime's 4 KiB pages; otherwise, or where that fails or SPECDEC_HUGE_PAGES=0, a plain buffer.
  // Not for buffers made per step: each would map, fault in and unmap fresh pages.
  static Buffer long_lived(const Context& ctx, size_t size_bytes, cl_mem_flags flags = CL_MEM_READ_WRITE,
                           const void* src = nullptr);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // Bytes [origin, origin + size_bytes) of `parent` as a buffer of its own (clCreateSubBuffer):
  // origin a multiple of the device's base-address alignment. The parent's memory lives until
  // its last region is released, whether or not the parent Buffer still exists.
  static Buffer region(const Buffer& parent, size_t origin, size_t size_bytes,
                       cl_mem_flags flags = CL_MEM_READ_WRITE);

  cl_mem get() const { return mem_; }
  size_t size_bytes() const { return size_bytes_; }
  // Hands the memory object (and its reference) to the caller; the Buffer is empty after.
  cl_mem release() {
    size_bytes_ = 0;
    return std::exchange(mem_, nullptr);
  }
  // Blocking transfers of [offset_bytes, offset_bytes + n) on the context's queue.
  void write(const Context& ctx, const void* src, size_t n, size_t offset_bytes = 0);
  void read(const Context& ctx, void* dst, size_t n, size_t offset_bytes = 0) const;
  void fill_zero(const Context& ctx);

 private:
  void check_range(size_t n, size_t offset_bytes, const char* what) const;
  cl_mem mem_ = nullptr;
  size_t size_bytes_ = 0;
};

// Whether this context's long-lived large buffers live in huge-page host memory (a CPU device,
// and SPECDEC_HUGE_PAGES is not 0): see Buffer::long_lived (device::Arena pools small ones then).
bool uses_huge_pages(const Context& ctx);

// A kernel object with typed argument setting. Move-only.
class Kernel {
 public:
  // Takes a reference of its own to `kernel`; holds `lock` (the context's) while it lives. `name`
  // (for error messages and profiles) must outlive the Kernel: a literal, or the context's cache.
  Kernel(cl_kernel kernel, std::string_view name, std::unique_lock<std::recursive_mutex> lock = {});
  ~Kernel();
  Kernel(Kernel&& other) noexcept;
  Kernel& operator=(Kernel&&) = delete;
  Kernel(const Kernel&) = delete;
  Kernel& operator=(const Kernel&) = delete;

  template <typename T>
  Kernel& arg(cl_uint index, const T& value) {
    // the error text is formatted only on failure (arguments are set ~10 times per launch)
    if (const cl_int err = clSetKernelArg(kernel_, index, sizeof(T), &value); err != CL_SUCCESS) {
      arg_failed(err, index);
    }
    return *this;
  }
  Kernel& arg(cl_uint index, const Buffer& buffer) { return arg(index, buffer.get()); }
  // An OpenCL device's buffer (device/buffer.h): its memory object.
  Kernel& arg(cl_uint index, const device::Buffer& buffer) {
    return arg(index, static_cast<cl_mem>(buffer.native()));
  }
  // Enqueues over `global` work-items in up to 3 dims. local = nullptr: the driver's choice on a
  // GPU; on a CPU device 1 in every dimension except, in a launch of 2 or 3 dims (whose dim 0 is
  // a width of the model by the kernels' convention), the largest power of two <= 64 dividing
  // global[0]. PoCL builds a work-group function per local size at the first launch with it, and
  // its own choice follows the token count (dims 1 and 2 are tokens or rows in most kernels): every
  // new batch shape compiled kernels inside a request. With this rule a kernel's local sizes
  // depend on the model's widths only, so warming a runner up at load builds all of them.
  void launch(const Context& ctx, cl_uint dims, const size_t* global, const size_t* local = nullptr);
  cl_kernel get() const { return kernel_; }

 private:
  [[noreturn]] void arg_failed(cl_int err, cl_uint index) const;
  cl_kernel kernel_ = nullptr;
  std::string_view name_;
  std::unique_lock<std::recursive_mutex> lock_;
};

}  // namespace specdec::ocl
