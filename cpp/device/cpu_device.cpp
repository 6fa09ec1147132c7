#include "device/cpu_device.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <vector>

#include "common/errors.h"
#include "common/huge_pages.h"
#include "cpu/matmul.h"
#include "cpu/ops.h"

namespace specdec::device {

// Memory freed while ops are recorded: the ops may still read it (contract rule 2).
struct CpuDevice::Deferred {
  std::mutex mu;
  bool recording = false;
  std::vector<std::function<void()>> frees;

  void release(std::function<void()> free) {
    std::unique_lock guard(mu);
    if (recording) {
      frees.push_back(std::move(free));
      return;
    }
    guard.unlock();
    free();
  }
  // After the recorded ops ran (or were dropped): no op reads anything any more.
  void ran() {
    std::vector<std::function<void()>> now;
    {
      std::lock_guard guard(mu);
      recording = false;
      now.swap(frees);
    }
    for (auto& f : now) f();
  }
};

namespace {

constexpr size_t kAlign = 64;

std::string cpuinfo_field(const char* key) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  const size_t n = std::strlen(key);
  while (std::getline(in, line)) {
    if (line.compare(0, n, key) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    return start == std::string::npos ? std::string() : line.substr(start);
  }
  return {};
}

int64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
}

}  // namespace

CpuDevice& cpu_of(Device& dev) {
  if (dev.kind() != Kind::kCpu) {
    throw std::logic_error(
        str_cat("a native CPU op was given a device of kind ", kind_name(dev.kind())));
  }
  return static_cast<CpuDevice&>(dev);
}

Info cpu_info(int num_threads, cpu::Isa isa) {
  Info info;
  info.kind = Kind::kCpu;
  info.name = cpuinfo_field("model name");
  if (info.name.empty()) info.name = "CPU";
  info.vendor = cpuinfo_field("vendor_id");
  // a path with no integer kernels of its own (amx_int8) says whose run (docs/cpu.md)
  const cpu::Isa runs = cpu::matmul_isa_for(GgmlType::kQ8_0, isa);
  info.platform = runs == isa ? str_cat("specdec native (", cpu::isa_name(isa), ")")
                              : str_cat("specdec native (", cpu::isa_name(isa), ", ",
                                        cpu::isa_name(runs), " kernels)");
  info.type = "cpu";
  info.compute_units = num_threads;
  info.global_mem_bytes = physical_memory_bytes();
  info.max_alloc_bytes = info.global_mem_bytes;
  info.local_mem_bytes = 0;
  info.fp64 = true;
  return info;
}

namespace {
cpu::ThreadPoolOptions pool_options(const CpuDeviceOptions& o) {
  cpu::ThreadPoolOptions p;
  p.num_threads = o.num_threads;
  p.pin = o.pin;
  return p;
}
}  // namespace

CpuDevice::CpuDevice(CpuDeviceOptions options)
    : Device(Info{}),
      pool_(pool_options(options)),
      isa_(cpu::cpu_isa()),
      deferred_(std::make_shared<Deferred>()) {
  set_info(cpu_info(pool_.num_threads(), isa_));
  const char* profile = std::getenv("SPECDEC_PROFILE");
  program_.set_profiling(profile != nullptr && std::string_view(profile) != "" &&
                         std::string_view(profile) != "0");
  pool_.set_collect_stats(program_.profiling());
}

CpuDevice::~CpuDevice() {
  try {
    flush();
  } catch (...) {  // an op's error at teardown has no one to go to; the memory is released below
  }
  deferred_->ran();
}

Buffer CpuDevice::allocate(size_t size_bytes, Lifetime lifetime, Access /*access*/) {
  if (size_bytes == 0) throw ConfigError("size_bytes", "0", "a device buffer must be > 0 bytes");
  if (static_cast<uint64_t>(size_bytes) > static_cast<uint64_t>(info().max_alloc_bytes)) {
    throw UnsupportedError(str_cat("a buffer of ", size_bytes,
                                   " bytes exceeds this machine's memory (", info().max_alloc_bytes,
                                   " bytes); use a smaller KV-cache budget"));
  }
  const std::shared_ptr<Deferred> deferred = deferred_;  // the deleters may outlive the device
  if (lifetime == Lifetime::kModel && size_bytes >= huge_page_min_bytes && huge_pages()) {
    size_t span = 0;
    if (void* p = map_huge_pages(size_bytes, &span)) {
      std::shared_ptr<void> keep(
          p, [deferred, span](void* m) { deferred->release([m, span] { munmap(m, span); }); });
      return Buffer(Kind::kCpu, nullptr, static_cast<std::byte*>(p), size_bytes, std::move(keep));
    }
  }
  const size_t rounded = (size_bytes + kAlign - 1) / kAlign * kAlign;
  void* p = std::aligned_alloc(kAlign, rounded);
  if (p == nullptr) throw std::bad_alloc();
  if (lifetime == Lifetime::kModel) std::memset(p, 0, rounded);
  std::shared_ptr<void> keep(p, [deferred](void* m) { deferred->release([m] { std::free(m); }); });
  return Buffer(Kind::kCpu, nullptr, static_cast<std::byte*>(p), size_bytes, std::move(keep));
}

bool CpuDevice::huge_pages() const { return huge_pages_enabled(); }

Buffer CpuDevice::upload(const void* src, size_t size_bytes, Lifetime lifetime, Access access) {
  Buffer b = allocate(size_bytes, lifetime, access);
  std::memcpy(b.host(), src, size_bytes);  // fresh memory: no recorded op can touch it
  return b;
}

void CpuDevice::check_buffer(const Buffer& buffer, const char* what) const {
  SPECDEC_CHECK(buffer.kind() == Kind::kCpu && buffer.host() != nullptr, what,
                buffer.host() == nullptr ? "an empty buffer" : kind_name(buffer.kind()),
                "a buffer of the native CPU device");
}

Buffer CpuDevice::region(const Buffer& parent, size_t origin, size_t size_bytes,
                         Access /*access*/) {
  check_buffer(parent, "parent");
  if (size_bytes == 0) throw ConfigError("size_bytes", "0", "a region must be > 0 bytes");
  if (origin % region_alignment() != 0 || origin > parent.size_bytes() ||
      size_bytes > parent.size_bytes() - origin) {
    throw ConfigError("region", str_cat("[", origin, ", ", origin + size_bytes, ")"),
                      str_cat("must lie inside the parent's ", parent.size_bytes(),
                              " bytes, origin a multiple of ", region_alignment()));
  }
  return Buffer(Kind::kCpu, nullptr, parent.host() + origin, size_bytes, parent.owner());
}

namespace {
void check_range(const Buffer& b, size_t n, size_t offset_bytes, const char* what) {
  if (offset_bytes > b.size_bytes() || n > b.size_bytes() - offset_bytes) {
    throw ConfigError(what, str_cat("[", offset_bytes, ", ", offset_bytes + n, ")"),
                      str_cat("must lie inside the buffer of ", b.size_bytes(), " bytes"));
  }
}
}  // namespace

void CpuDevice::write(const Buffer& buffer, const void* src, size_t n, size_t offset_bytes) {
  check_buffer(buffer, "buffer");
  check_range(buffer, n, offset_bytes, "write");
  flush();
  if (n) std::memcpy(buffer.host() + offset_bytes, src, n);
}

void CpuDevice::read(const Buffer& buffer, void* dst, size_t n, size_t offset_bytes) {
  check_buffer(buffer, "buffer");
  check_range(buffer, n, offset_bytes, "read");
  flush();
  if (n) std::memcpy(dst, buffer.host() + offset_bytes, n);
}

void CpuDevice::fill_zero(const Buffer& buffer) {
  check_buffer(buffer, "buffer");
  flush();
  std::memset(buffer.host(), 0, buffer.size_bytes());
}

void CpuDevice::record(const char* name, int64_t items, int64_t grain, cpu::Program::Body body,
                       cpu::Program::Schedule schedule) {
  std::lock_guard guard(mu_);
  {
    std::lock_guard d(deferred_->mu);
    deferred_->recording = true;
  }
  if (program_.empty()) pool_.prewake();  // a step starts: the workers spin while it is recorded
  program_.add(name, items, grain, std::move(body), schedule);
}

std::shared_ptr<const std::vector<float>> CpuDevice::rope_angles(const int32_t* positions, int64_t num_tokens,
                                                                 const float* inv_freq, int half) {
  std::lock_guard guard(mu_);
  for (const Angles& a : angles_) {
    if (a.positions == positions && a.num_tokens == num_tokens && a.inv_freq == inv_freq && a.half == half)
      return a.values;
  }
  auto values = std::make_shared<std::vector<float>>(static_cast<size_t>(num_tokens * half * 2));
  cpu::rope_angles(positions, 0, num_tokens, inv_freq, half, values->data());
  angles_.push_back({positions, num_tokens, inv_freq, half, values});
  return values;
}

void CpuDevice::flush() {
  std::lock_guard guard(mu_);
  angles_.clear();  // positions may be rewritten after this
  if (program_.empty()) return;
  struct Ran {  // the deferred memory goes once the ops ran or failed
    Deferred& d;
    ~Ran() { d.ran(); }
  } ran{*deferred_};
  program_.run(pool_);
}

Profile CpuDevice::take_profile() {
  std::lock_guard guard(mu_);
  flush();
  Profile p;
  for (cpu::Program::OpTime& t : program_.take_profile()) {
    p.span_us += t.us;
    p.ops.push_back(Profile::Op{std::move(t.name), t.launches, t.us, t.wait_us});
  }
  if (program_.profiling()) {
    const cpu::RegionStats& st = pool_.total_stats();
    p.pool.threads = st.num_threads;
    p.pool.regions = st.num_regions;
    p.pool.barriers = st.num_barriers;
    p.pool.thread_us = st.region_us * st.num_threads;
    for (int i = 0; i < st.num_threads; ++i) {
      const auto at = static_cast<size_t>(i);
      p.pool.wait_us += st.start_wait_us[at] + st.barrier_wait_us[at] + st.end_wait_us[at];
      p.pool.barrier_wait_us += st.barrier_wait_us[at];
    }
    pool_.reset_stats();
  }
  return p;
}

}  // namespace specdec::device
