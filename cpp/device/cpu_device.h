// The native CPU device (issue 35): buffers in host memory, and ops recorded into one cpu::Program
// that runs in one region of a spinning cpu::ThreadPool when the host could look (flush, sync, a
// transfer, take_profile): a step's ops then cost one barrier each instead of a hand-off to a
// sleeping worker (docs/device_seam.md, "Recording a step"; docs/cpu_thread_pool.md).
//
// The ordering contract of device.h: (1) ops run in record order with a barrier between them, and
// every transfer runs the recorded ops first; (2) memory freed while ops are recorded is released
// only after they ran (the buffers' deleters defer it); (3) results reach the host through read,
// sync or take_profile. For device files (cpu_*.cpp), tests and the bindings.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cpu/isa.h"
#include "cpu/program.h"
#include "cpu/thread_pool.h"
#include "device/device.h"

namespace specdec::device {

struct CpuDeviceOptions {
  int num_threads = 0;  // 0: SPECDEC_CPU_THREADS if set, else the CPUs this process may use
  int pin = -1;         // -1: SPECDEC_CPU_PIN
};

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(CpuDeviceOptions options = {});
  ~CpuDevice() override;

  // Memory: 64-byte aligned host memory; a kModel buffer of 1 MiB or more in 2 MiB-aligned
  // memory advised as huge pages (SPECDEC_HUGE_PAGES=0 turns that off), as the OpenCL device
  // gives PoCL. allocate() leaves the memory uninitialised except kModel (zero, fresh pages).
  Buffer allocate(size_t size_bytes, Lifetime lifetime = Lifetime::kWorkspace,
                  Access access = Access::kReadWrite) override;
  Buffer upload(const void* src, size_t size_bytes, Lifetime lifetime,
                Access access = Access::kReadWrite) override;
  Buffer region(const Buffer& parent, size_t origin, size_t size_bytes,
                Access access = Access::kReadWrite) override;
  size_t region_alignment() const override { return 64; }
  bool huge_pages() const override;
  void write(const Buffer& buffer, const void* src, size_t n, size_t offset_bytes = 0) override;
  void read(const Buffer& buffer, void* dst, size_t n, size_t offset_bytes = 0) override;
  void fill_zero(const Buffer& buffer) override;
  void flush() override;
  void sync() override { flush(); }
  bool profiling() const override { return program_.profiling(); }
  Profile take_profile() override;
  std::unique_lock<std::recursive_mutex> lock() const override { return std::unique_lock(mu_); }

  // For the device files: appends an op of `items` work items handed out in runs of `grain`
  // (cpu::Program::add); it runs at the next flush. `body` must hold its arguments by value.
  void record(const char* name, int64_t items, int64_t grain, cpu::Program::Body body,
              cpu::Program::Schedule schedule = cpu::Program::Schedule::kStatic);
  size_t num_recorded() const { return program_.size(); }
  // The RoPE angles (cpu::rope_angles) of tokens [0, num_tokens) at `positions` with `inv_freq`
  // (host memory of this device's buffers, read now: a transfer runs the recorded ops first, so
  // they hold what the ops will read), computed once and shared by the ops recorded until the next
  // flush (a step's layers). Both must have been filled by host transfers (upload / write), not by
  // an op still recorded: that op has not run yet.
  std::shared_ptr<const std::vector<float>> rope_angles(const int32_t* positions, int64_t num_tokens,
                                                        const float* inv_freq, int half);
  cpu::Isa isa() const { return isa_; }
  int num_threads() const { return pool_.num_threads(); }

 private:
  struct Deferred;  // memory freed while ops were recorded, released after the next flush
  void check_buffer(const Buffer& buffer, const char* what) const;

  mutable std::recursive_mutex mu_;
  cpu::ThreadPool pool_;
  cpu::Program program_;
  cpu::Isa isa_;
  std::shared_ptr<Deferred> deferred_;
  struct Angles {
    const int32_t* positions;
    int64_t num_tokens;
    const float* inv_freq;
    int half;
    std::shared_ptr<const std::vector<float>> values;
  };
  std::vector<Angles> angles_;  // since the last flush
};

// The CPU device under `dev` (device files); a logic_error on another kind.
CpuDevice& cpu_of(Device& dev);

// A CPU device's description: the CPU's model name and vendor, "specdec native (<isa>)" as its
// platform ("specdec native (amx_int8, avx512_vnni kernels)" for a path with no kernels of its own), its threads as compute units, the machine's memory.
Info cpu_info(int num_threads, cpu::Isa isa);

}  // namespace specdec::device
