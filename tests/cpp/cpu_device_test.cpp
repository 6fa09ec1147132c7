// The native CPU device (device/cpu_device.h): host buffers, regions, transfers, ops recorded and
// run at the points where the host could look, memory freed while ops are recorded kept until they
// ran (ordering contract rule 2; ASan checks the reads), the profile.
#include "device/cpu_device.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/errors.h"
#include "cpu/ops.h"

using namespace specdec;
using device::Buffer;
using device::CpuDevice;
using device::Kind;
using device::Lifetime;

namespace {

// Resident bytes of [begin, begin + len) (mincore, page by page; len a multiple of the page
// size), -1 where mincore fails.
int64_t resident_bytes(void* begin, size_t len) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in(len / page);
  if (mincore(begin, len, in.data()) != 0) return -1;
  int64_t pages = 0;
  for (unsigned char c : in) pages += c & 1;
  return pages * static_cast<int64_t>(page);
}

// Whether the kernel may give transparent huge pages at all (not "[never]").
bool thp_possible() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  if (!std::getline(f, mode)) return false;
  return mode.find("[never]") == std::string::npos;
}

std::vector<int32_t> iota(size_t n, int32_t start = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

}  // namespace

TEST(CpuDevice, DescribesTheCpu) {
  CpuDevice dev(device::CpuDeviceOptions{2, 0});
  EXPECT_EQ(dev.kind(), Kind::kCpu);
  EXPECT_EQ(dev.info().type, "cpu");
  EXPECT_EQ(dev.info().compute_units, 2);
  EXPECT_EQ(dev.num_threads(), 2);
  EXPECT_NE(dev.info().platform.find(cpu::isa_name(dev.isa())), std::string::npos);
  EXPECT_GT(dev.info().global_mem_bytes, 0);
  EXPECT_NE(dev.info().summary().find("cpu"), std::string::npos);
  EXPECT_STREQ(device::kind_name(Kind::kCpu), "cpu");
}

TEST(CpuDevice, BuffersRoundTripAndRegionsShareMemory) {
  CpuDevice dev(device::CpuDeviceOptions{1, 0});
  const std::vector<int32_t> src = iota(1000);
  Buffer b = dev.upload(src.data(), src.size() * 4, Lifetime::kWorkspace);
  EXPECT_EQ(b.kind(), Kind::kCpu);
  EXPECT_EQ(b.size_bytes(), 4000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.host()) % 64, 0u);
  std::vector<int32_t> got(1000);
  dev.read(b, got.data(), 4000);
  EXPECT_EQ(got, src);
  Buffer r = dev.region(b, 256, 400);  // elements 64..163
  EXPECT_EQ(r.host(), b.host() + 256);
  const std::vector<int32_t> seven(100, 7);
  dev.write(r, seven.data(), 400);
  dev.read(b, got.data(), 4000);
  EXPECT_EQ(got[63], 63);
  EXPECT_EQ(got[64], 7);
  EXPECT_EQ(got[163], 7);
  EXPECT_EQ(got[164], 164);
  b = Buffer();  // the region keeps the parent's memory
  dev.read(r, got.data(), 400);
  EXPECT_EQ(got[0], 7);
  dev.fill_zero(r);
  dev.read(r, got.data(), 4);
  EXPECT_EQ(got[0], 0);
}

// The step's RoPE angles: computed once for the ops recorded until a flush, from the positions
// the buffer holds when recorded; a write (which flushes) and the next step's angles are new.
TEST(CpuDevice, RopeAnglesAreSharedUntilAFlush) {
  CpuDevice dev;
  const std::vector<float> inv = {1.0f, 0.5f, 0.25f};
  std::vector<int32_t> pos = {3, 4};
  Buffer positions = dev.upload(pos.data(), pos.size() * 4, Lifetime::kWorkspace);
  const auto* p = reinterpret_cast<const int32_t*>(positions.host());
  const auto a = dev.rope_angles(p, 2, inv.data(), 3);
  EXPECT_EQ(dev.rope_angles(p, 2, inv.data(), 3), a);        // the same table for the next layer
  EXPECT_NE(dev.rope_angles(p, 1, inv.data(), 3), a);        // another shape: its own
  std::vector<float> want(12);
  cpu::rope_angles(pos.data(), 0, 2, inv.data(), 3, want.data());
  EXPECT_EQ(*a, want);
  pos = {9, 10};
  dev.write(positions, pos.data(), pos.size() * 4);  // flushes: the next step
  const auto b = dev.rope_angles(p, 2, inv.data(), 3);
  EXPECT_NE(b, a);
  cpu::rope_angles(pos.data(), 0, 2, inv.data(), 3, want.data());
  EXPECT_EQ(*b, want);
  EXPECT_NE(*a, *b);
}

TEST(CpuDevice, BadRequestsNameWhatIsAllowed) {
  CpuDevice dev(device::CpuDeviceOptions{1, 0});
  EXPECT_THROW(dev.allocate(0), ConfigError);
  EXPECT_THROW(dev.allocate(size_t{1} << 62), UnsupportedError);
  Buffer b = dev.allocate(1024);
  std::vector<char> host(2048);
  EXPECT_THROW(dev.read(b, host.data(), 1025), ConfigError);
  EXPECT_THROW(dev.write(b, host.data(), 8, 1020), ConfigError);
  EXPECT_THROW(dev.region(b, 32, 64), ConfigError);    // origin not a multiple of 64
  EXPECT_THROW(dev.region(b, 1024, 64), ConfigError);  // past the end
  EXPECT_THROW(dev.read(Buffer(), host.data(), 4), ConfigError);
}

TEST(CpuDevice, ModelBuffersAreZeroAndHugePageAligned) {
  CpuDevice dev(device::CpuDeviceOptions{1, 0});
  Buffer b = dev.allocate(3 << 20, Lifetime::kModel);
  const char* env = std::getenv("SPECDEC_HUGE_PAGES");
  if (env == nullptr || std::string(env) != "0") {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.host()) % (2 << 20), 0u);
  }
  std::vector<char> got(3 << 20, 1);
  dev.read(b, got.data(), got.size());
  EXPECT_TRUE(std::all_of(got.begin(), got.end(), [](char c) { return c == 0; }));
  Buffer small = dev.allocate(100, Lifetime::kModel);
  dev.read(small, got.data(), 100);
  EXPECT_EQ(got[99], 0);
}

// A model buffer past one huge page keeps its padding out of memory: huge pages cover its whole
// 2 MiB pages only, so writing every byte makes at most its size resident (4 KiB pages at the
// end), not the 2 MiB page its last bytes fall in.
TEST(CpuDevice, ModelBufferPaddingIsNotResident) {
  CpuDevice dev(device::CpuDeviceOptions{1, 0});
  if (!dev.huge_pages()) GTEST_SKIP() << "huge pages off (SPECDEC_HUGE_PAGES=0)";
  if (!thp_possible()) GTEST_SKIP() << "no transparent huge pages on this kernel";
  const size_t bytes = (size_t{5} << 20) + 4096 * 3 + 100;  // 2.5 huge pages
  Buffer b = dev.allocate(bytes, Lifetime::kModel);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(b.host()) % (2 << 20), 0u);  // its own huge-page mapping
  std::memset(b.host(), 7, bytes);
  const int64_t rss = resident_bytes(b.host(), size_t{6} << 20);  // the mapping's span
  ASSERT_GE(rss, 0) << "mincore failed";
  EXPECT_GE(rss, static_cast<int64_t>(bytes));
  EXPECT_LE(rss, static_cast<int64_t>((bytes + 4095) / 4096 * 4096));
}

TEST(CpuDevice, RecordedOpsRunInOrderWhenTheHostLooks) {
  CpuDevice dev(device::CpuDeviceOptions{2, 0});
  Buffer b = dev.upload(iota(4096).data(), 4096 * 4, Lifetime::kWorkspace);
  Buffer c = dev.allocate(4096 * 4);
  int32_t* p = reinterpret_cast<int32_t*>(b.host());
  int32_t* q = reinterpret_cast<int32_t*>(c.host());
  dev.record("double", 4096, 64, [p](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) p[i] *= 2;
  });
  // after the barrier: reads values other threads doubled
  dev.record("mirror", 4096, 64, [p, q](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) q[i] = p[i] + p[4095 - i];
  });
  EXPECT_EQ(dev.num_recorded(), 2u);
  EXPECT_EQ(p[10], 10);  // nothing ran yet
  std::vector<int32_t> got(4096);
  dev.read(c, got.data(), got.size() * 4);  // runs them first
  EXPECT_EQ(dev.num_recorded(), 0u);
  for (int i = 0; i < 4096; ++i) ASSERT_EQ(got[i], 2 * 4095) << i;
}

TEST(CpuDevice, MemoryFreedWhileOpsAreRecordedLivesUntilTheyRan) {
  CpuDevice dev(device::CpuDeviceOptions{2, 0});
  auto out = std::make_shared<std::vector<int64_t>>(1);
  {
    Buffer b = dev.upload(iota(1 << 16).data(), (1 << 16) * 4, Lifetime::kStep);
    const int32_t* p = reinterpret_cast<const int32_t*>(b.host());
    std::atomic<int64_t>* sum = new std::atomic<int64_t>(0);
    dev.record("sum", 1 << 16, 1024, [p, sum](int64_t i0, int64_t i1) {
      int64_t s = 0;
      for (int64_t i = i0; i < i1; ++i) s += p[i];
      sum->fetch_add(s);
    });
    dev.record("out", 1, 1, [sum, out](int64_t, int64_t) {
      (*out)[0] = sum->load();
      delete sum;
    });
  }  // b released here, before the ops ran
  dev.sync();
  EXPECT_EQ((*out)[0], int64_t{65535} * 65536 / 2);
}

TEST(CpuDevice, AnOpsErrorComesBackAtFlushAndTheDeviceGoesOn) {
  CpuDevice dev(device::CpuDeviceOptions{2, 0});
  dev.record("fails", 8, 1, [](int64_t i0, int64_t) {
    if (i0 == 0) throw std::runtime_error("op failed");
  });
  EXPECT_THROW(dev.flush(), std::runtime_error);
  EXPECT_EQ(dev.num_recorded(), 0u);
  Buffer b = dev.allocate(64);
  int32_t* p = reinterpret_cast<int32_t*>(b.host());
  dev.record("set", 1, 1, [p](int64_t, int64_t) { p[0] = 5; });
  int32_t got = 0;
  dev.read(b, &got, 4);
  EXPECT_EQ(got, 5);
}

TEST(CpuDevice, ProfileCountsOpsByName) {
  setenv("SPECDEC_PROFILE", "1", 1);
  CpuDevice dev(device::CpuDeviceOptions{1, 0});
  unsetenv("SPECDEC_PROFILE");
  ASSERT_TRUE(dev.profiling());
  for (int i = 0; i < 3; ++i) dev.record("a", 4, 1, [](int64_t, int64_t) {});
  dev.record("b", 4, 1, [](int64_t, int64_t) {});
  const device::Profile p = dev.take_profile();
  ASSERT_EQ(p.ops.size(), 2u);
  EXPECT_EQ(p.ops[0].name, "a");
  EXPECT_EQ(p.ops[0].launches, 3);
  EXPECT_EQ(p.ops[1].launches, 1);
  EXPECT_TRUE(dev.take_profile().ops.empty());
}
