#include "ocl/context.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <utility>

#include <sys/mman.h>

#include "common/errors.h"
#include "common/huge_pages.h"
#include "ocl/kernel_sources.h"

namespace specdec::ocl {
namespace {

std::string build_log(cl_program program, cl_device_id device) {
  size_t n = 0;
  if (clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n) != CL_SUCCESS) {
    return "(no build log)";
  }
  std::string log(n, '\0');
  clGetProgramBuildInfo(program, device, CL_PROGRAM_BUILD_LOG, n, log.data(), nullptr);
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

}  // namespace

Context::Context(const DeviceInfo& device) : device_(device) {
  cl_int err = CL_SUCCESS;
  const cl_context_properties props[] = {
      CL_CONTEXT_PLATFORM, reinterpret_cast<cl_context_properties>(device.platform), 0};
  context_ = clCreateContext(props, 1, &device.id, nullptr, nullptr, &err);
  check(err, "clCreateContext", device.name);
  const char* profile = std::getenv("SPECDEC_PROFILE");
  profiling_ = profile != nullptr && *profile != '\0' && std::string(profile) != "0";
  queue_ = clCreateCommandQueue(context_, device.id, profiling_ ? CL_QUEUE_PROFILING_ENABLE : 0, &err);
  if (err != CL_SUCCESS) {
    clReleaseContext(context_);
    check(err, "clCreateCommandQueue", device.name);
  }
}

Context::~Context() {
  // Work still queued (a caller that dropped its results, a test that ends on an enqueue) runs to
  // its end before anything it uses is released. A test whose last call was an enqueue, holding
  // its context in a static, once crashed at process exit on PoCL 3.1 under load after its
  // assertions had passed; with the queue drained, no kernel runs while the context goes.
  if (queue_ != nullptr) clFinish(queue_);
  for (auto& [name, event] : launches_) clReleaseEvent(event);
  for (auto& [key, kernel] : kernels_) clReleaseKernel(kernel);
  for (auto& [key, program] : programs_) clReleaseProgram(program);
  if (queue_ != nullptr) clReleaseCommandQueue(queue_);
  if (context_ != nullptr) clReleaseContext(context_);
}

std::shared_ptr<Context> Context::create(const std::string& selector) {
  return std::make_shared<Context>(select_device(selector));
}

void Context::finish() const { SPECDEC_CL_CHECK(clFinish(queue_)); }

namespace {

// "-w" (no compiler warnings: a successful build prints nothing) unless SPECDEC_CL_WARNINGS=1.
const char* warning_option() {
  static const char* option = [] {
    const char* env = std::getenv("SPECDEC_CL_WARNINGS");
    return env != nullptr && std::string(env) == "1" ? "" : " -w";
  }();
  return option;
}

}  // namespace

size_t Context::num_cached_programs() const {
  auto guard = lock();
  return programs_.size();
}

std::vector<std::pair<std::string, std::string>> Context::build_logs() const {
  auto guard = lock();
  return build_logs_;
}

cl_program Context::build(const std::string& name, const std::string& source,
                          const std::string& options) {
  auto guard = lock();
  std::string full_options = "-cl-std=CL1.2 " + options + warning_option();
  if (const char* extra = std::getenv("SPECDEC_CL_BUILD_OPTIONS")) full_options += std::string(" ") + extra;
  const auto key = std::make_tuple(name, full_options, std::hash<std::string>{}(source));
  if (auto it = programs_.find(key); it != programs_.end()) return it->second;

  const char* text = source.c_str();
  const size_t length = source.size();
  cl_int err = CL_SUCCESS;
  cl_program program = clCreateProgramWithSource(context_, 1, &text, &length, &err);
  check(err, "clCreateProgramWithSource", "program " + name);
  err = clBuildProgram(program, 1, &device_.id, full_options.c_str(), nullptr, nullptr);
  if (err != CL_SUCCESS) {
    const std::string log = build_log(program, device_.id);
    clReleaseProgram(program);
    check(err, "clBuildProgram",
          str_cat("program '", name, "' with options '", full_options, "' on ", device_.name,
                  "; build log:\n", log));
  }
  if (std::string log = build_log(program, device_.id); !log.empty() && log != "(no build log)") {
    build_logs_.emplace_back(name + " [" + full_options + "]", std::move(log));
  }
  programs_.emplace(key, program);
  return program;
}

size_t Context::LaunchKeyHash::operator()(const LaunchKeyView& k) const noexcept {
  const std::hash<std::string_view> h;
  size_t seed = h(k.program);
  seed ^= h(k.kernel) + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2);
  seed ^= h(k.options) + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2);
  return seed;
}

Kernel Context::kernel(const std::string& program, const std::string& kernel_name,
                       const std::string& options) {
  auto guard = lock();
  if (auto it = launch_cache_.find(LaunchKeyView{program, kernel_name, options}); it != launch_cache_.end()) {
    return Kernel(it->second.first, it->second.second, std::move(guard));
  }
  cl_program p = build(program, kernel_source(program), options);
  const auto key = std::make_pair(p, kernel_name);
  cl_kernel k = nullptr;
  if (auto it = kernels_.find(key); it != kernels_.end()) {
    k = it->second;
  } else {
    cl_int err = CL_SUCCESS;
    k = clCreateKernel(p, kernel_name.c_str(), &err);
    check(err, "clCreateKernel", str_cat("kernel '", kernel_name, "' of program '", program, "'"));
    kernels_.emplace(key, k);
  }
  const auto it = launch_cache_.emplace(LaunchKey{program, kernel_name, options}, std::make_pair(k, kernel_name)).first;
  return Kernel(k, it->second.second, std::move(guard));
}

namespace {

// Host memory for a CPU device's long-lived buffers (Buffer::long_lived), in transparent huge
// pages (common/huge_pages.h): PoCL's own allocations get 4 KiB pages where THP is `madvise` (the
// Debian default). The mapping lives until OpenCL deletes the buffer (destructor callback).
struct HugePages {
  void* ptr = nullptr;
  size_t span = 0;
};

void CL_CALLBACK release_huge_pages(cl_mem /*mem*/, void* user_data) {
  const auto* pages = static_cast<HugePages*>(user_data);
  munmap(pages->ptr, pages->span);
  delete pages;
}

// 2 MiB-aligned anonymous memory advised as huge pages, or nullptr (not a CPU device, too small,
// turned off, or the mapping failed: the buffer then takes the runtime's own memory).
HugePages* huge_page_memory(const Context& ctx, size_t size_bytes) {
  if (ctx.device().type != "cpu" || size_bytes < kHugePageMinBytes || !huge_pages_enabled() ||
      static_cast<uint64_t>(size_bytes) > static_cast<uint64_t>(ctx.device().max_alloc_bytes))
    return nullptr;
  size_t span = 0;
  void* p = map_huge_pages(size_bytes, &span);
  return p == nullptr ? nullptr : new HugePages{p, span};
}

}  // namespace

Buffer::Buffer(const Context& ctx, size_t size_bytes, cl_mem_flags flags)
    : Buffer(ctx, nullptr, size_bytes, flags) {}

Buffer::Buffer(const Context& ctx, const void* src, size_t size_bytes, cl_mem_flags flags)
    : size_bytes_(size_bytes) {
  if (size_bytes == 0) throw ConfigError("size_bytes", "0", "a device buffer must be > 0 bytes");
  if (static_cast<uint64_t>(size_bytes) > static_cast<uint64_t>(ctx.device().max_alloc_bytes)) {
    throw UnsupportedError(str_cat("a buffer of ", size_bytes, " bytes exceeds the device's largest "
                                   "allocation (", ctx.device().max_alloc_bytes, " bytes on ",
                                   ctx.device().name, "); use a smaller KV-cache budget"));
  }
  cl_int err = CL_SUCCESS;
  if (src != nullptr) flags |= CL_MEM_COPY_HOST_PTR;
  mem_ = clCreateBuffer(ctx.get(), flags, size_bytes, const_cast<void*>(src), &err);
  check(err, "clCreateBuffer", str_cat(size_bytes, " bytes"));
}

Buffer Buffer::long_lived(const Context& ctx, size_t size_bytes, cl_mem_flags flags, const void* src) {
  constexpr cl_mem_flags kHostFlags = CL_MEM_USE_HOST_PTR | CL_MEM_ALLOC_HOST_PTR | CL_MEM_COPY_HOST_PTR;
  HugePages* pages = (flags & kHostFlags) == 0 ? huge_page_memory(ctx, size_bytes) : nullptr;
  if (pages == nullptr) return Buffer(ctx, src, size_bytes, flags);
  if (src != nullptr) std::memcpy(pages->ptr, src, size_bytes);
  cl_int err = CL_SUCCESS;
  cl_mem mem = clCreateBuffer(ctx.get(), flags | CL_MEM_USE_HOST_PTR, size_bytes, pages->ptr, &err);
  if (err == CL_SUCCESS) err = clSetMemObjectDestructorCallback(mem, release_huge_pages, pages);
  if (err != CL_SUCCESS) {  // a runtime that refuses host memory: its own buffer instead
    if (mem != nullptr) clReleaseMemObject(mem);
    release_huge_pages(nullptr, pages);
    return Buffer(ctx, src, size_bytes, flags);
  }
  Buffer b;
  b.mem_ = mem;
  b.size_bytes_ = size_bytes;
  return b;
}

Buffer Buffer::region(const Buffer& parent, size_t origin, size_t size_bytes, cl_mem_flags flags) {
  if (size_bytes == 0) throw ConfigError("size_bytes", "0", "a buffer region must be > 0 bytes");
  parent.check_range(size_bytes, origin, "buffer region");
  const cl_buffer_region r{origin, size_bytes};
  cl_int err = CL_SUCCESS;
  Buffer b;
  b.mem_ = clCreateSubBuffer(parent.get(), flags, CL_BUFFER_CREATE_TYPE_REGION, &r, &err);
  check(err, "clCreateSubBuffer", str_cat("[", origin, ", ", origin + size_bytes, ") of ", parent.size_bytes(), " bytes"));
  b.size_bytes_ = size_bytes;
  return b;
}

bool uses_huge_pages(const Context& ctx) { return ctx.device().type == "cpu" && huge_pages_enabled(); }

Buffer::~Buffer() {
  if (mem_ != nullptr) clReleaseMemObject(mem_);
}

Buffer::Buffer(Buffer&& other) noexcept : mem_(other.mem_), size_bytes_(other.size_bytes_) {
  other.mem_ = nullptr;
  other.size_bytes_ = 0;
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    if (mem_ != nullptr) clReleaseMemObject(mem_);
    mem_ = other.mem_;
    size_bytes_ = other.size_bytes_;
    other.mem_ = nullptr;
    other.size_bytes_ = 0;
  }
  return *this;
}

void Buffer::check_range(size_t n, size_t offset_bytes, const char* what) const {
  if (offset_bytes > size_bytes_ || n > size_bytes_ - offset_bytes) {
    throw ConfigError(what, str_cat("[", offset_bytes, ", ", offset_bytes + n, ")"),
                      str_cat("must lie inside the buffer of ", size_bytes_, " bytes"));
  }
}

void Buffer::write(const Context& ctx, const void* src, size_t n, size_t offset_bytes) {
  check_range(n, offset_bytes, "write range");
  if (n == 0) return;
  SPECDEC_CL_CHECK(clEnqueueWriteBuffer(ctx.queue(), mem_, CL_TRUE, offset_bytes, n, src, 0,
                                        nullptr, nullptr));
}

void Buffer::read(const Context& ctx, void* dst, size_t n, size_t offset_bytes) const {
  check_range(n, offset_bytes, "read range");
  if (n == 0) return;
  SPECDEC_CL_CHECK(clEnqueueReadBuffer(ctx.queue(), mem_, CL_TRUE, offset_bytes, n, dst, 0,
                                       nullptr, nullptr));
}

void Buffer::fill_zero(const Context& ctx) {
  // The widest pattern that divides the size (OpenCL allows up to 128 bytes): a CPU runtime
  // copies the pattern once per element, so one byte at a time fills at a fraction of the
  // memory bandwidth (PoCL 3.1: ~0.5 GB/s, several seconds for a multi-GiB KV cache).
  static constexpr cl_uchar kZeros[128] = {};
  size_t pattern = sizeof(kZeros);
  while (pattern > 1 && size_bytes_ % pattern != 0) pattern /= 2;
  if (size_bytes_ == 0) return;
  SPECDEC_CL_CHECK(clEnqueueFillBuffer(ctx.queue(), mem_, kZeros, pattern, 0, size_bytes_, 0,
                                       nullptr, nullptr));
}

Kernel::Kernel(cl_kernel kernel, std::string_view name, std::unique_lock<std::recursive_mutex> lock)
    : kernel_(kernel), name_(name), lock_(std::move(lock)) {
  SPECDEC_CL_CHECK(clRetainKernel(kernel_));
}

Kernel::~Kernel() {
  if (kernel_ != nullptr) clReleaseKernel(kernel_);
}

Kernel::Kernel(Kernel&& other) noexcept
    : kernel_(other.kernel_), name_(other.name_), lock_(std::move(other.lock_)) {
  other.kernel_ = nullptr;
}

void Kernel::arg_failed(cl_int err, cl_uint index) const {
  check(err, "clSetKernelArg", str_cat(name_, " arg ", index));
  throw OclError(err, "clSetKernelArg");  // not reached: check throws for err != CL_SUCCESS
}

void Kernel::launch(const Context& ctx, cl_uint dims, const size_t* global, const size_t* local) {
  for (cl_uint i = 0; i < dims; ++i) {
    if (global[i] == 0) return;  // nothing to do (e.g. an empty batch or a zero-sized part)
  }
  size_t fixed[3] = {1, 1, 1};
  if (local == nullptr && ctx.device().type == "cpu" && dims <= 3) {
    // dims >= 2: dim 0 is a width of the model (columns, heads), the others rows or tokens
    if (dims >= 2) {
      while (fixed[0] < 64 && global[0] % (fixed[0] * 2) == 0) fixed[0] *= 2;
    }
    local = fixed;
  }
  cl_event event = nullptr;
  const cl_int err = clEnqueueNDRangeKernel(ctx.queue(), kernel_, dims, nullptr, global, local, 0,
                                            nullptr, ctx.profiling() ? &event : nullptr);
  if (err != CL_SUCCESS) check(err, "clEnqueueNDRangeKernel", std::string(name_));
  if (event != nullptr) ctx.record_launch(std::string(name_), event);
}

void Context::record_launch(const std::string& kernel, cl_event event) const {
  if (launches_.size() >= kMaxProfiledLaunches) {  // nobody is taking the profile: keep memory bounded
    clReleaseEvent(event);
    ++dropped_launches_;
    return;
  }
  launches_.emplace_back(kernel, event);
}

Context::Profile Context::take_profile() {
  auto guard = lock();
  finish();
  // The events leave launches_ first and are released on every path (a failed query throws).
  struct Events {
    std::vector<std::pair<std::string, cl_event>> list;
    ~Events() {
      for (auto& [name, event] : list) clReleaseEvent(event);
    }
  } events{std::exchange(launches_, {})};
  Profile p;
  p.dropped = std::exchange(dropped_launches_, 0);
  std::map<std::string, size_t> index;
  cl_ulong first = 0, last = 0;
  for (auto& [name, event] : events.list) {
    cl_ulong queued = 0, start = 0, end = 0;
    check(clGetEventProfilingInfo(event, CL_PROFILING_COMMAND_QUEUED, sizeof(queued), &queued, nullptr),
          "clGetEventProfilingInfo", name);
    check(clGetEventProfilingInfo(event, CL_PROFILING_COMMAND_START, sizeof(start), &start, nullptr),
          "clGetEventProfilingInfo", name);
    check(clGetEventProfilingInfo(event, CL_PROFILING_COMMAND_END, sizeof(end), &end, nullptr),
          "clGetEventProfilingInfo", name);
    if (first == 0 || queued < first) first = queued;
    last = std::max(last, end);
    auto [it, fresh] = index.try_emplace(name, p.kernels.size());
    if (fresh) p.kernels.push_back({name, 0, 0.0});
    KernelProfile& k = p.kernels[it->second];
    k.launches += 1;
    k.device_us += static_cast<double>(end - start) * 1e-3;
  }
  p.span_us = last > first ? static_cast<double>(last - first) * 1e-3 : 0.0;
  return p;
}

}  // namespace specdec::ocl
