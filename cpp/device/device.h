// A device: its memory, transfers, ordering and profile. Runner, ops, quant, KV-cache ops and
// attention backends are to see only this (docs/device_seam.md; /work/shared/DESIGN.md section 2).
//
// The ordering contract, which every device meets (code above the seam relies on it by name
// where it reuses or replaces a buffer right after enqueuing ops on it):
// 1. Ops run as if one after another in enqueue order; a transfer waits for all earlier ops. So a
//    buffer may be overwritten by an op enqueued after the ops that read it (runner/blocks.cpp
//    reuses the step's quantised activations this way).
// 2. A Buffer may be destroyed or reassigned right after enqueuing ops that read it; the device
//    keeps the memory until they ran (the runner replaces its per-step ids and positions, and
//    quant::prepare_activations regrows buffers matmuls may still read).
// 3. Host code sees results only through read, sync or take_profile.
// OpenCL meets it with its in-order queue (clReleaseMemObject defers the free). A device that
// records ops meets (1) with a barrier between them and (2) by deferring every free until the
// recorded ops ran.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "device/buffer.h"
#include "device/kind.h"

namespace specdec::device {

// Per op name (kernel name on OpenCL), in first-launch order: launches and device time.
struct Profile {
  struct Op {
    std::string name;
    int64_t launches = 0;
    double device_us = 0;
    double wait_us = 0;  // the native device: its threads' waits at the barrier after the op
  };
  std::vector<Op> ops;
  double span_us = 0;   // first op queued -> last op ended
  int64_t dropped = 0;  // ops not timed since the last take_profile()
  // The native device's thread pool (threads 0 on OpenCL): its regions' time over all threads, and
  // the part spent waiting (woken at a region's start, at the barriers between ops, at its end).
  struct Pool {
    int threads = 0;
    int64_t regions = 0;
    int64_t barriers = 0;  // barriers between ops, per thread
    double thread_us = 0;  // region time x threads
    double wait_us = 0;    // of which waiting
    double barrier_wait_us = 0;  // of which at the barriers between ops
  } pool;
};

// Shared through shared_ptr. Calls here run per buffer or per step, never per launch.
class Device {
 public:
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  Kind kind() const { return info_.kind; }
  const Info& info() const { return info_; }

  // Memory. Size 0 is a ConfigError, above info().max_alloc_bytes an UnsupportedError.
  virtual Buffer allocate(size_t size_bytes, Lifetime lifetime = Lifetime::kWorkspace,
                          Access access = Access::kReadWrite) = 0;
  // A buffer holding a copy of src[0, size_bytes).
  virtual Buffer upload(const void* src, size_t size_bytes, Lifetime lifetime,
                        Access access = Access::kReadWrite) = 0;
  // Bytes [origin, origin + size_bytes) of parent: origin a multiple of region_alignment().
  virtual Buffer region(const Buffer& parent, size_t origin, size_t size_bytes,
                        Access access = Access::kReadWrite) = 0;
  virtual size_t region_alignment() const = 0;
  // Whether kModel buffers of huge_page_min_bytes or more take huge pages (OpenCL: a CPU-type
  // device with SPECDEC_HUGE_PAGES not 0): then an Arena packs small ones into shared chunks.
  virtual bool huge_pages() const = 0;
  static constexpr size_t huge_page_min_bytes = size_t{1} << 20;

  // Transfers: blocking, ordered after every op enqueued before them.
  virtual void write(const Buffer& buffer, const void* src, size_t n, size_t offset_bytes = 0) = 0;
  virtual void read(const Buffer& buffer, void* dst, size_t n, size_t offset_bytes = 0) = 0;
  virtual void fill_zero(const Buffer& buffer) = 0;

  // Ordering: flush hands recorded work to the device; sync waits for all of it.
  virtual void flush() = 0;
  virtual void sync() = 0;

  // Profiling (SPECDEC_PROFILE at creation): the ops since the last call, after a sync.
  virtual bool profiling() const = 0;
  virtual Profile take_profile() = 0;
  // Taken by anything that must not interleave with other threads' ops on this device.
  virtual std::unique_lock<std::recursive_mutex> lock() const = 0;

 protected:
  explicit Device(Info info) : info_(std::move(info)) {}
  void set_info(Info info) { info_ = std::move(info); }  // a device that learns it after its members

 private:
  Info info_;
};

// The device for `selector` ("" -> SPECDEC_DEVICE, else "auto"): "native" is the native CPU device
// (device/cpu_device.h); "ocl:<selector>" an OpenCL device chosen by <selector>; "auto" the native
// device when auto_is_native(), else OpenCL's auto; any other string an OpenCL device, chosen as
// ocl::select_device chooses (ocl/device.h), the string keeping that meaning.
std::shared_ptr<Device> open(const std::string& selector = "");

// What "auto" picks: the native device when no OpenCL GPU or accelerator is present and this CPU
// runs the native kernels' AVX2 path or better (measured: the native device is 1.0-2.3x PoCL's
// CPU device and 1.5-2.8x llama.cpp on a 2-vCPU AVX-512 VNNI Xeon, docs/cpu.md), or when there is
// no OpenCL device at all; otherwise OpenCL (a GPU first).
bool auto_is_native();

}  // namespace specdec::device
