// The device seam (cpp/device/): OclDevice over an ocl::Context, its buffers, transfers, regions,
// profile, and the ways between the two (wrap, ocl::context_of, ocl::mem).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <vector>

#include "common/errors.h"
#include "device/arena.h"
#include "device/device.h"
#include "cpu/isa.h"
#include "device/ocl_device.h"
#include "ocl/context.h"
#include "ocl/device.h"

using namespace specdec;

namespace {

bool have_device() { return !ocl::list_devices().empty(); }

// The suite needs an OpenCL device (scripts/setup.sh installs PoCL): a missing one fails, as in
// ocl_test, rather than passing by skipping.
#define REQUIRE_DEVICE() ASSERT_TRUE(have_device()) << "no OpenCL device: is pocl-opencl-icd installed?"

std::vector<int32_t> iota(size_t n, int32_t start = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

}  // namespace

TEST(Device, OpenDescribesTheSelectedOpenClDevice) {
  REQUIRE_DEVICE();
  const auto dev = device::open();
  const ocl::DeviceInfo selected = ocl::select_device();
  EXPECT_EQ(dev->kind(), device::Kind::kOpenCL);
  EXPECT_EQ(dev->info().name, selected.name);
  EXPECT_EQ(dev->info().type, selected.type);
  EXPECT_EQ(dev->info().platform, selected.platform_name);
  EXPECT_EQ(dev->info().max_alloc_bytes, selected.max_alloc_bytes);
  EXPECT_EQ(dev->info().fp64, selected.fp64);
  EXPECT_NE(dev->info().summary().find(selected.name), std::string::npos);
  EXPECT_GE(dev->region_alignment(), 64u);
}

// "auto": the native device unless an OpenCL GPU or accelerator is present (or the CPU lacks
// AVX2 while an OpenCL device exists); "ocl:auto" always OpenCL.
TEST(Device, AutoIsTheNativeDeviceWithoutAnOpenClGpu) {
  REQUIRE_DEVICE();
  bool gpu = false;
  const auto devices = ocl::list_devices();
  for (const auto& d : devices) gpu = gpu || d.type == "gpu" || d.type == "accelerator";
  const bool avx2 = cpu::cpu_isas().back() >= cpu::Isa::kAvx2;
  const bool expected = !gpu && (avx2 || devices.empty());
  EXPECT_EQ(device::auto_is_native(), expected);
  const device::Kind want = expected ? device::Kind::kCpu : device::Kind::kOpenCL;
  EXPECT_EQ(device::open("auto")->kind(), want);
  EXPECT_EQ(device::open("Auto")->kind(), want);
  EXPECT_EQ(device::open("ocl:auto")->kind(), device::Kind::kOpenCL);
}

TEST(Device, WrapSharesTheContext) {
  REQUIRE_DEVICE();
  const auto ctx = ocl::Context::create();
  const auto dev = device::wrap(ctx);
  EXPECT_EQ(&ocl::context_of(*dev), ctx.get());
  EXPECT_EQ(dev->profiling(), ctx->profiling());
  EXPECT_THROW(device::wrap(nullptr), std::logic_error);
}

TEST(Device, BuffersRoundTrip) {
  REQUIRE_DEVICE();
  const auto dev = device::open();
  for (const auto lifetime : {device::Lifetime::kModel, device::Lifetime::kWorkspace, device::Lifetime::kStep}) {
    const std::vector<int32_t> src = iota(1 << 19, 7);  // 2 MiB: huge pages on a CPU device (kModel)
    const size_t bytes = src.size() * sizeof(int32_t);
    device::Buffer b = dev->allocate(bytes, lifetime);
    EXPECT_EQ(b.size_bytes(), bytes);
    EXPECT_FALSE(b.empty());
    EXPECT_NE(ocl::mem(b), nullptr);
    dev->write(b, src.data(), bytes);
    std::vector<int32_t> back(src.size());
    dev->read(b, back.data(), bytes);
    EXPECT_EQ(back, src);
    dev->fill_zero(b);
    dev->read(b, back.data(), bytes);
    EXPECT_EQ(back, std::vector<int32_t>(src.size(), 0));

    const device::Buffer u = dev->upload(src.data(), bytes, lifetime, device::Access::kReadOnly);
    std::vector<int32_t> part(16);
    dev->read(u, part.data(), 16 * sizeof(int32_t), 100 * sizeof(int32_t));
    EXPECT_EQ(part, iota(16, 107));
  }
}

TEST(Device, RegionsSeeTheirParentAndOutliveIt) {
  REQUIRE_DEVICE();
  const auto dev = device::open();
  const std::vector<int32_t> src = iota(4096);
  device::Buffer parent = dev->upload(src.data(), src.size() * 4, device::Lifetime::kModel);
  const size_t origin = dev->region_alignment();
  device::Buffer r = dev->region(parent, origin, 64 * 4);
  EXPECT_NE(r.id(), parent.id());
  parent = device::Buffer();  // the region keeps the memory
  std::vector<int32_t> back(64);
  dev->read(r, back.data(), back.size() * 4);
  EXPECT_EQ(back, iota(64, static_cast<int32_t>(origin / 4)));
}

TEST(Device, MovedBuffersKeepTheirIdentity) {
  REQUIRE_DEVICE();
  const auto dev = device::open();
  device::Buffer a = dev->allocate(256);
  const device::BufferId id = a.id();
  device::Buffer b = std::move(a);
  EXPECT_EQ(b.id(), id);
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(a.id(), device::BufferId{});
  device::Buffer c = dev->allocate(256);
  EXPECT_NE(c.id(), id);
}

TEST(Device, RejectsWhatOclBufferRejects) {
  REQUIRE_DEVICE();
  const auto dev = device::open();
  EXPECT_THROW(dev->allocate(0), ConfigError);
  const auto too_big = static_cast<size_t>(dev->info().max_alloc_bytes) + 1;
  EXPECT_THROW(dev->allocate(too_big), UnsupportedError);
  device::Buffer b = dev->allocate(64);
  int32_t x[32] = {};
  EXPECT_THROW(dev->write(b, x, 128), ConfigError);
  EXPECT_THROW(dev->read(b, x, 4, 64), ConfigError);
  EXPECT_THROW(dev->region(b, 0, 0), ConfigError);
  EXPECT_THROW(dev->region(b, 0, 128), ConfigError);
}

TEST(Device, ProfileCountsLaunchesPerKernel) {
  REQUIRE_DEVICE();
  setenv("SPECDEC_PROFILE", "1", 1);
  const auto ctx = ocl::Context::create();
  unsetenv("SPECDEC_PROFILE");
  const auto dev = device::wrap(ctx);
  ASSERT_TRUE(dev->profiling());
  cl_program program =
      ctx->build("seam_probe", "__kernel void seam_probe(__global int* x) { x[get_global_id(0)] += 1; }", "");
  cl_int err = CL_SUCCESS;
  cl_kernel kernel = clCreateKernel(program, "seam_probe", &err);
  ASSERT_EQ(err, CL_SUCCESS);
  device::Buffer b = dev->allocate(64 * 4);
  dev->fill_zero(b);
  for (int i = 0; i < 3; ++i) {
    ocl::Kernel k(kernel, "seam_probe", ctx->lock());
    k.arg(0, ocl::mem(b));
    const size_t global = 64;
    k.launch(*ctx, 1, &global);
  }
  clReleaseKernel(kernel);
  const device::Profile p = dev->take_profile();
  ASSERT_EQ(p.ops.size(), 1u);
  EXPECT_EQ(p.ops[0].name, "seam_probe");
  EXPECT_EQ(p.ops[0].launches, 3);
  std::vector<int32_t> back(64);
  dev->read(b, back.data(), back.size() * 4);
  EXPECT_EQ(back, std::vector<int32_t>(64, 3));
}

// Small model buffers carved out of shared chunks (regions), each with its own bytes; large ones
// apart; the regions outlive the arena and its chunks' Buffer objects (ocl::BufferArena's test,
// moved with it).
TEST(Device, ArenaPacksSmallBuffersIntoChunks) {
  REQUIRE_DEVICE();
  const auto dev = device::open();
  std::vector<device::Buffer> small;
  std::vector<std::vector<uint8_t>> data;
  size_t chunks = 0;
  device::Buffer big;
  {
    device::Arena arena(*dev, size_t{2} << 20);
    for (int i = 0; i < 14; ++i) {
      const size_t n = 100000 + static_cast<size_t>(i) * 333;
      data.emplace_back(n);
      for (size_t j = 0; j < n; ++j) data.back()[j] = static_cast<uint8_t>(j * 13 + static_cast<size_t>(i) * 101);
      small.push_back(arena.allocate(n));
      dev->write(small.back(), data.back().data(), n);
      EXPECT_EQ(small.back().size_bytes(), n);
    }
    big = arena.allocate(size_t{1} << 20);  // a quarter of a chunk or more: its own buffer
    chunks = arena.chunks();
  }
  EXPECT_EQ(dev->huge_pages(), ocl::uses_huge_pages(ocl::context_of(*dev)));
  if (dev->huge_pages()) {
    EXPECT_EQ(chunks, 1u);
    cl_mem parent = nullptr, big_parent = nullptr;
    ASSERT_EQ(clGetMemObjectInfo(ocl::mem(small[3]), CL_MEM_ASSOCIATED_MEMOBJECT, sizeof(parent),
                                 &parent, nullptr),
              CL_SUCCESS);
    ASSERT_EQ(clGetMemObjectInfo(ocl::mem(big), CL_MEM_ASSOCIATED_MEMOBJECT, sizeof(big_parent), &big_parent, nullptr),
              CL_SUCCESS);
    EXPECT_NE(parent, nullptr);
    EXPECT_EQ(big_parent, nullptr);
    size_t offset = 0;
    ASSERT_EQ(clGetMemObjectInfo(ocl::mem(small[3]), CL_MEM_OFFSET, sizeof(offset), &offset, nullptr), CL_SUCCESS);
    EXPECT_GT(offset, 0u);
    EXPECT_NE(small[3].host(), nullptr);  // the chunk's huge pages, seen from the region
  } else {
    EXPECT_EQ(chunks, 0u);
  }
  for (size_t i = 0; i < small.size(); ++i) {
    std::vector<uint8_t> out(data[i].size());
    dev->read(small[i], out.data(), out.size());
    EXPECT_EQ(out, data[i]) << i;
  }
}
