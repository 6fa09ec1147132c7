// OpenCL runtime: device discovery and choice, buffers, program cache, readable errors.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "common/errors.h"
#include "device/ocl_device.h"
#include "ocl/context.h"
#include "ocl/device.h"
#include "ocl/kernel_sources.h"
#include "ops/elementwise.h"

using namespace specdec;
using namespace specdec::ocl;

namespace {

bool have_device() { return !list_devices().empty(); }

}  // namespace

TEST(Ocl, ErrorNamesAreReadable) {
  EXPECT_EQ(error_name(CL_OUT_OF_RESOURCES), "CL_OUT_OF_RESOURCES");
  EXPECT_EQ(error_name(CL_BUILD_PROGRAM_FAILURE), "CL_BUILD_PROGRAM_FAILURE");
  EXPECT_EQ(error_name(CL_INVALID_KERNEL_NAME), "CL_INVALID_KERNEL_NAME");
  EXPECT_EQ(error_name(-9999), "CL_UNKNOWN_ERROR(-9999)");
  try {
    check(CL_INVALID_VALUE, "clFoo", "detail");
    FAIL() << "no throw";
  } catch (const OclError& e) {
    EXPECT_EQ(e.code(), CL_INVALID_VALUE);
    EXPECT_STREQ(e.what(), "clFoo failed: CL_INVALID_VALUE (-30); detail");
  }
}

TEST(Ocl, ListsAndSelectsDevices) {
  const auto devices = list_devices();
  ASSERT_FALSE(devices.empty()) << "no OpenCL device: is pocl-opencl-icd installed?";
  for (size_t i = 0; i < devices.size(); ++i) {
    EXPECT_EQ(devices[i].index, static_cast<int>(i));
    EXPECT_FALSE(devices[i].name.empty());
    EXPECT_GT(devices[i].compute_units, 0);
    EXPECT_GT(devices[i].global_mem_bytes, 0);
  }
  EXPECT_EQ(select_device("0").id, devices[0].id);
  const std::string pd = std::to_string(devices[0].platform_index) + ":" + std::to_string(devices[0].device_index);
  EXPECT_EQ(select_device(pd).id, devices[0].id);
  EXPECT_EQ(select_device(devices[0].type).type, devices[0].type);
  // part of the name, any case
  std::string part = devices[0].name.substr(0, 4);
  for (auto& ch : part) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  EXPECT_EQ(select_device(part).id, devices[0].id);
  EXPECT_NO_THROW(select_device("auto"));
  try {
    select_device("no-such-device-xyz");
    FAIL() << "no throw";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("device = 'no-such-device-xyz'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find(devices[0].name), std::string::npos);  // lists devices
  }
  EXPECT_THROW(select_device("99"), ConfigError);
  EXPECT_THROW(select_device(pd + ":0"), ConfigError);  // P:D:X is not P:D
}

TEST(Ocl, EnvironmentPicksTheDevice) {
  ASSERT_TRUE(have_device()) << "no OpenCL device: is pocl-opencl-icd installed?";
  setenv("SPECDEC_DEVICE", "no-such-device-xyz", 1);
  try {
    select_device("");
    FAIL() << "no throw";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("SPECDEC_DEVICE"), std::string::npos);
  }
  EXPECT_EQ(select_device("0").index, 0);  // an argument wins over the environment
  setenv("SPECDEC_DEVICE", "0", 1);
  EXPECT_EQ(select_device("").index, 0);
  unsetenv("SPECDEC_DEVICE");
}

TEST(Ocl, BufferRoundTripAndBounds) {
  auto ctx = Context::create();
  Buffer b(*ctx, 64);
  std::vector<uint8_t> in(64), out(64);
  for (int i = 0; i < 64; ++i) in[i] = static_cast<uint8_t>(i * 3);
  b.write(*ctx, in.data(), 64);
  b.read(*ctx, out.data(), 64);
  EXPECT_EQ(in, out);
  b.fill_zero(*ctx);
  b.read(*ctx, out.data(), 16, 48);
  EXPECT_EQ(out[0], 0);
  EXPECT_THROW(b.read(*ctx, out.data(), 32, 40), ConfigError);
  EXPECT_THROW(Buffer(*ctx, 0), ConfigError);
  Buffer moved = std::move(b);
  EXPECT_EQ(moved.size_bytes(), 64u);
  EXPECT_EQ(b.get(), nullptr);
}

namespace {

size_t mapping_count() {
  std::ifstream maps("/proc/self/maps");
  size_t n = 0;
  for (std::string line; std::getline(maps, line);) ++n;
  return n;
}

}  // namespace

// On a CPU device, long-lived buffers of 1 MiB or more live in 2 MiB-aligned host memory advised
// as huge pages (CL_MEM_USE_HOST_PTR), filled from src when given, and unmapped when OpenCL
// deletes them; ordinary buffers (made per step) keep the runtime's memory.
TEST(Ocl, LongLivedCpuBuffersTakeHugePageHostMemory) {
  auto ctx = Context::create();
  if (ctx->device().type != "cpu") GTEST_SKIP() << "not a CPU device";
  if (const char* env = std::getenv("SPECDEC_HUGE_PAGES"); env != nullptr && std::string(env) == "0")
    GTEST_SKIP() << "SPECDEC_HUGE_PAGES=0";
  auto host_ptr = [](const Buffer& b) {
    void* p = nullptr;
    EXPECT_EQ(clGetMemObjectInfo(b.get(), CL_MEM_HOST_PTR, sizeof(p), &p, nullptr), CL_SUCCESS);
    return reinterpret_cast<uintptr_t>(p);
  };
  for (size_t size : {size_t{1} << 20, (size_t{3} << 20) + 5, size_t{9} << 20}) {
    std::vector<uint8_t> in(size), out(size);
    for (size_t i = 0; i < size; ++i) in[i] = static_cast<uint8_t>(i * 7 + (i >> 12));
    Buffer copied = Buffer::long_lived(*ctx, size, CL_MEM_READ_WRITE, in.data());
    EXPECT_NE(host_ptr(copied), 0u) << size;
    EXPECT_EQ(host_ptr(copied) % (size_t{2} << 20), 0u) << size;
    copied.read(*ctx, out.data(), size);
    EXPECT_EQ(in, out) << size;
    Buffer empty = Buffer::long_lived(*ctx, size);
    EXPECT_EQ(host_ptr(empty) % (size_t{2} << 20), 0u) << size;
    EXPECT_EQ(host_ptr(Buffer(*ctx, size)), 0u) << size;  // per-step buffers: the runtime's memory
    Buffer read_only = Buffer::long_lived(*ctx, size, CL_MEM_READ_ONLY, in.data());
    read_only.read(*ctx, out.data(), size);
    EXPECT_EQ(in, out) << size;
    empty.write(*ctx, in.data(), size);
    empty.fill_zero(*ctx);
    empty.read(*ctx, out.data(), size);
    EXPECT_EQ(out, std::vector<uint8_t>(size, 0)) << size;
  }
  EXPECT_EQ(host_ptr(Buffer::long_lived(*ctx, (size_t{1} << 20) - 1)), 0u);  // small: the runtime's
  // released buffers give their mappings back
  { Buffer warm = Buffer::long_lived(*ctx, size_t{8} << 20); }
  const size_t before = mapping_count();
  for (int i = 0; i < 100; ++i) {
    Buffer b = Buffer::long_lived(*ctx, size_t{8} << 20);
    b.fill_zero(*ctx);
  }
  ctx->finish();
  EXPECT_LE(mapping_count(), before + 2);
}

// A region's bounds are checked (device::Arena carves weights out of chunks with regions:
// device_test).
TEST(Ocl, BufferRegionBounds) {
  auto ctx = Context::create();
  Buffer parent(*ctx, 4096);
  EXPECT_THROW(Buffer::region(parent, 4096 - 128, 256), ConfigError);
  EXPECT_THROW(Buffer::region(parent, 0, 0), ConfigError);
}

TEST(Ocl, ProgramCacheAndBuildLog) {
  auto ctx = Context::create();
  const std::string src = "__kernel void twice(__global float* x) { x[get_global_id(0)] *= SCALE; }";
  cl_program p1 = ctx->build("twice", src, "-DSCALE=2.0f");
  cl_program p2 = ctx->build("twice", src, "-DSCALE=2.0f");
  EXPECT_EQ(p1, p2);  // cached by (name, options)
  cl_program p3 = ctx->build("twice", src, "-DSCALE=3.0f");
  EXPECT_NE(p1, p3);
  EXPECT_EQ(ctx->num_cached_programs(), 2u);
  // same name and options, other source: a new program, not the cached one
  cl_program p4 = ctx->build("twice", src + "\n// edited", "-DSCALE=2.0f");
  EXPECT_NE(p1, p4);
  try {
    ctx->build("broken", "__kernel void f(__global float* x) { x[0] = undefined_symbol; }", "");
    FAIL() << "no throw";
  } catch (const OclError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.code(), CL_BUILD_PROGRAM_FAILURE);
    EXPECT_NE(what.find("CL_BUILD_PROGRAM_FAILURE"), std::string::npos) << what;
    EXPECT_NE(what.find("program 'broken'"), std::string::npos) << what;
    EXPECT_NE(what.find("undefined_symbol"), std::string::npos) << what;  // the build log
  }
}

TEST(Ocl, EmbeddedKernelsBuild) {
  auto ctx = Context::create();
  const auto names = kernel_program_names();
  ASSERT_FALSE(names.empty());
  for (const auto& k : embedded_kernels()) {
    EXPECT_EQ(k.sha256.size(), 64u);
    EXPECT_FALSE(k.source.empty());
  }
  for (const char* def : {"-DCACHE_F32", "-DCACHE_F16", "-DCACHE_BF16"}) {
    EXPECT_NO_THROW(ctx->kernel("kv_cache", "kv_cache_write", def)) << def;
  }
  EXPECT_THROW(ctx->kernel("kv_cache", "kv_cache_write", ""), OclError);  // #error without a dtype
  EXPECT_THROW(ctx->kernel("kv_cache", "no_such_kernel", "-DCACHE_F32"), OclError);
  EXPECT_THROW(kernel_source("no_such_program"), ConfigError);
}

TEST(Ocl, KernelDirOverride) {
  const std::string embedded = kernel_source("kv_cache");
  setenv("SPECDEC_KERNEL_DIR", SPECDEC_SOURCE_DIR "/kernels", 1);
  EXPECT_EQ(kernel_source("kv_cache"), embedded);
  setenv("SPECDEC_KERNEL_DIR", "/nonexistent", 1);
  EXPECT_THROW(kernel_source("kv_cache"), ConfigError);
  unsetenv("SPECDEC_KERNEL_DIR");
}

// Several threads launching the same cached kernel objects with their own arguments: each Kernel
// holds the context's lock from creation to launch, so no thread's arguments leak into another
// thread's launch (clSetKernelArg on a shared cl_kernel is the one OpenCL call that is not
// thread-safe). Each thread scales its own buffer by 2^(t+1) and back, many times: a leaked
// buffer or factor leaves a value off by a power of two.
TEST(Ocl, ThreadsShareOneContext) {
  auto ctx = Context::create();
  const auto dev = device::wrap(ctx);
  constexpr int kThreads = 4, kRounds = 300, kN = 1024;
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const device::Buffer x = dev->allocate(kN * sizeof(float));
      std::vector<float> host(kN, static_cast<float>(t + 1));
      dev->write(x, host.data(), kN * sizeof(float));
      const float up = std::ldexp(1.0f, t + 1), down = std::ldexp(1.0f, -(t + 1));
      for (int r = 0; r < kRounds; ++r) {
        ops::scale(*dev, x, kN, r % 2 == 0 ? up : down);
        if (r % 50 == 49) ctx->build("thread_test_" + std::to_string(t), "kernel void k() {}", "");
      }
      dev->read(x, host.data(), kN * sizeof(float));
      for (float v : host) wrong += v != static_cast<float>(t + 1);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
}

// A context dropped with work still queued (no finish, no read: a caller that abandoned its
// results) waits for that work before it releases anything; a new context then works as usual.
TEST(Ocl, ContextDroppedWithWorkInFlight) {
  constexpr int kN = 1 << 20;
  for (int round = 0; round < 3; ++round) {
    auto ctx = Context::create();
    const auto dev = device::wrap(ctx);
    const device::Buffer x = dev->allocate(kN * sizeof(float));
    for (int r = 0; r < 20; ++r) ops::scale(*dev, x, kN, 1.0f);
  }  // buffers, device and context released with the scales possibly still queued
  auto ctx = Context::create();
  const auto dev = device::wrap(ctx);
  const device::Buffer x = dev->allocate(4 * sizeof(float));
  std::vector<float> host = {1, 2, 3, 4};
  dev->write(x, host.data(), host.size() * sizeof(float));
  ops::scale(*dev, x, 4, 2.0f);
  dev->read(x, host.data(), host.size() * sizeof(float));
  EXPECT_EQ(host, (std::vector<float>{2, 4, 6, 8}));
}

TEST(Ocl, CpuFeaturesOnlyForCpuDevices) {
  for (const DeviceInfo& d : list_devices()) {
    const CpuFeatures f = cpu_features(d);
    if (d.type != "cpu") {
      EXPECT_EQ(f.summary(), "none") << d.name;
    }
    EXPECT_TRUE(!f.avx512bw || f.avx512f) << d.name;  // BW implies F
  }
}
