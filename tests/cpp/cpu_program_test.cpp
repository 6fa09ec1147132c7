// cpu::Program: a step's ops in one pool region. Every item of every op runs exactly once, an op
// sees everything the ops before it wrote (on any thread), ops with fewer items than threads,
// empty ops and an empty program; an exception ends the region, reaches the caller and leaves no
// op behind; the profile counts launches per op name.
#include <gtest/gtest.h>

#include <atomic>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "common/errors.h"
#include "cpu/program.h"
#include "cpu/thread_pool.h"

namespace specdec::cpu {
namespace {

ThreadPool& pool() {
  static ThreadPool p(ThreadPoolOptions{.num_threads = 3, .pin = 0});
  return p;
}

TEST(CpuProgram, OpsRunInOrderEveryItemOnceAcrossThreads) {
  const int64_t n = 1000;
  std::vector<int64_t> a(n, 0), b(n, 0);
  std::vector<std::atomic<int>> seen(n);
  Program prog;
  prog.add("fill", n, 7, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      a[i] = i;
      seen[i].fetch_add(1);
    }
  });
  // reads a in reverse: items another thread wrote in the op before
  prog.add("reverse", n, 16, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) b[i] = a[n - 1 - i] * 2;
  });
  prog.add("one_item", 1, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) b[0] += 1;
  });
  prog.add("nothing", 0, 1, [&](int64_t, int64_t) { FAIL() << "an empty op runs no body"; });
  prog.run(pool());
  EXPECT_TRUE(prog.empty());
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(seen[i].load(), 1) << i;
    ASSERT_EQ(b[i], 2 * (n - 1 - i) + (i == 0 ? 1 : 0)) << i;
  }
  Program empty;
  EXPECT_NO_THROW(empty.run(pool()));
}

TEST(CpuProgram, DynamicOpsRunEveryItemOnceInRunsOfTheirGrain) {
  for (int64_t n : {0, 1, 5, 97, 1000, 4099}) {
    for (int64_t grain : {1, 3, 16}) {
      std::vector<std::atomic<int>> seen(static_cast<size_t>(n));
      std::vector<int64_t> out(static_cast<size_t>(n), 0);
      std::atomic<bool> misaligned{false};
      Program prog;
      prog.add("dynamic", n, grain, [&](int64_t lo, int64_t hi) {
        if (lo % grain != 0 || (hi % grain != 0 && hi != n)) misaligned = true;
        for (int64_t i = lo; i < hi; ++i) seen[static_cast<size_t>(i)].fetch_add(1);
      }, Program::Schedule::kDynamic);
      // the next op reads what every thread wrote in the dynamic one
      prog.add("after", n, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) out[static_cast<size_t>(i)] = seen[static_cast<size_t>(n - 1 - i)].load();
      });
      prog.run(pool());
      EXPECT_FALSE(misaligned.load()) << n << " " << grain;
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(seen[static_cast<size_t>(i)].load(), 1) << n << " " << grain << " item " << i;
        ASSERT_EQ(out[static_cast<size_t>(i)], 1);
      }
    }
  }
}

TEST(CpuProgram, AnExceptionReachesTheCallerAndClearsTheOps) {
  Program prog;
  std::atomic<int> after{0};
  prog.add("throws", 8, 1, [&](int64_t lo, int64_t hi) {
    if (lo <= 5 && 5 < hi) throw std::runtime_error("item 5");
  });
  prog.add("after", 8, 1, [&](int64_t, int64_t) { after.fetch_add(1); });
  EXPECT_THROW(prog.run(pool()), std::runtime_error);
  EXPECT_TRUE(prog.empty());
  EXPECT_EQ(after.load(), 0) << "no op after the one that threw";
  prog.add("ok", 4, 1, [](int64_t, int64_t) {});
  EXPECT_NO_THROW(prog.run(pool()));  // the pool and the program are usable again
}

TEST(CpuProgram, ProfileCountsLaunchesPerName) {
  Program prog;
  prog.set_profiling(true);
  for (int rep = 0; rep < 3; ++rep) {
    prog.add("norm", 4, 1, [](int64_t, int64_t) {});
    prog.add("matmul", 64, 16, [](int64_t, int64_t) {});
    prog.add("norm", 4, 1, [](int64_t, int64_t) {});
    prog.run(pool());
  }
  const auto t = prog.take_profile();
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].name, "norm");
  EXPECT_EQ(t[0].launches, 6);
  EXPECT_EQ(t[1].name, "matmul");
  EXPECT_EQ(t[1].launches, 3);
  EXPECT_GE(t[0].us, 0.0);
  EXPECT_TRUE(prog.take_profile().empty());
  EXPECT_THROW(prog.add("bad", -1, 1, [](int64_t, int64_t) {}), ConfigError);
  EXPECT_THROW(prog.add("bad", 1, 0, [](int64_t, int64_t) {}), ConfigError);
}

}  // namespace
}  // namespace specdec::cpu
