// The CPU device's thread pool (cpp/cpu/thread_pool.h) and its CPU budget (cpp/cpu/cpu_limits.h).
// Also built under ThreadSanitizer (scripts/test.sh, build/tsan): the barrier tests write plain
// (non-atomic) memory before a barrier and read it after, so a missing happens-before is reported.
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "common/errors.h"
#include "cpu/cpu_limits.h"
#include "cpu/thread_pool.h"

using namespace specdec;
using namespace specdec::cpu;

namespace {

ThreadPool make_pool(int num_threads, bool stats = false) {
  ThreadPoolOptions options;
  options.num_threads = num_threads;
  options.pin = 0;
  options.collect_stats = stats;
  return ThreadPool(options);
}

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

int usable_cpus() { return read_cpu_budget().usable; }

}  // namespace

// ThreadPool is neither copyable nor movable: make_pool relies on guaranteed copy elision.
TEST(CpuThreadPool, EveryIndexRunsOncePerRegion) {
  for (int n : {1, 2, 3, 8}) {
    ThreadPool pool = make_pool(n);
    ASSERT_EQ(pool.num_threads(), n);
    std::vector<std::atomic<int>> runs(n);
    std::atomic<int> bad_count{0};
    const std::thread::id caller = std::this_thread::get_id();
    for (int region = 0; region < 200; ++region) {
      pool.run([&](ThreadContext& ctx) {
        if (ctx.num_threads() != n) ++bad_count;
        if ((ctx.index() == 0) != (std::this_thread::get_id() == caller)) ++bad_count;
        runs[ctx.index()].fetch_add(1);
      });
    }
    EXPECT_EQ(bad_count.load(), 0) << n << " threads";
    for (int i = 0; i < n; ++i) EXPECT_EQ(runs[i].load(), 200) << "index " << i << " of " << n;
  }
}

TEST(CpuThreadPool, BarriersOrderPhases) {
  for (int n : {1, 2, 4}) {
    ThreadPool pool = make_pool(n);
    std::vector<int64_t> slots(n, -1);  // plain memory: the barrier must order it
    std::atomic<int> wrong{0};
    pool.run([&](ThreadContext& ctx) {
      for (int64_t iter = 0; iter < 2000; ++iter) {
        slots[ctx.index()] = iter * n + ctx.index();
        ctx.barrier();
        for (int j = 0; j < n; ++j)
          if (slots[j] != iter * n + j) ++wrong;
        ctx.barrier();
      }
    });
    EXPECT_EQ(wrong.load(), 0) << n << " threads";
  }
}

TEST(CpuThreadPool, StaticChunkIsContiguousAndBalanced) {
  for (int n : {1, 2, 3, 7}) {
    for (int64_t len : {0, 1, 5, 16, 17, 1000}) {
      for (int64_t grain : {1, 4, 16, 5000}) {
        int64_t next = 10;
        std::vector<int64_t> units;
        for (int i = 0; i < n; ++i) {
          const Chunk c = static_chunk(10, 10 + len, grain, i, n);
          ASSERT_EQ(c.begin, next) << n << " " << len << " " << grain << " thread " << i;
          ASSERT_LE(c.begin, c.end);
          if (c.end < 10 + len) {
            EXPECT_EQ((c.end - c.begin) % grain, 0);
          }
          units.push_back((c.end - c.begin + grain - 1) / grain);
          next = c.end;
        }
        EXPECT_EQ(next, 10 + len);
        const auto [lo, hi] = std::minmax_element(units.begin(), units.end());
        EXPECT_LE(*hi - *lo, 1) << n << " " << len << " " << grain;
      }
    }
  }
}

TEST(CpuThreadPool, ParallelForCoversEachIndexOnce) {
  for (int n : {1, 2, 3, 5}) {
    ThreadPool pool = make_pool(n);
    for (int64_t begin : {0, -7, 100}) {
      for (int64_t len : {0, 1, 2, 7, 64, 1001}) {
        for (int64_t grain : {1, 3, 16, 2000}) {
          std::vector<std::atomic<int>> hits(len);
          std::atomic<int> calls{0};
          pool.parallel_for(begin, begin + len, grain, [&](int64_t lo, int64_t hi) {
            ++calls;
            for (int64_t i = lo; i < hi; ++i) hits[i - begin].fetch_add(1);
          });
          for (int64_t i = 0; i < len; ++i) {
            ASSERT_EQ(hits[i].load(), 1) << n << " threads, [" << begin << ", " << begin + len
                                         << ") grain " << grain << " index " << i;
          }
          EXPECT_LE(calls.load(), n);
        }
      }
    }
    EXPECT_THROW(pool.parallel_for(0, 10, 0, [](int64_t, int64_t) {}), ConfigError);
    EXPECT_THROW(pool.parallel_for(5, 4, 1, [](int64_t, int64_t) {}), ConfigError);
  }
}

TEST(CpuThreadPool, OneThreadRunsOnTheCaller) {
  ThreadPool pool = make_pool(1);
  std::thread::id ran_on;
  int barriers = 0;
  pool.run([&](ThreadContext& ctx) {
    ran_on = std::this_thread::get_id();
    for (; barriers < 10; ++barriers) ctx.barrier();
  });
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(barriers, 10);
}

TEST(CpuThreadPool, MoreThreadsThanCpusBlocksInsteadOfSpinning) {
  const int n = std::max(8, 3 * usable_cpus());
  ThreadPool pool = make_pool(n);
  EXPECT_EQ(pool.num_threads(), n);
  EXPECT_EQ(pool.spin_us(), 0);
  std::vector<int> slots(n, 0);
  std::atomic<int> wrong{0};
  for (int region = 0; region < 20; ++region) {
    pool.run([&](ThreadContext& ctx) {
      for (int iter = 1; iter <= 20; ++iter) {
        slots[ctx.index()] = iter;
        ctx.barrier();
        for (int j = 0; j < n; ++j) wrong += slots[j] != iter;
        ctx.barrier();
      }
    });
  }
  EXPECT_EQ(wrong.load(), 0);
}

// A thread that throws leaves the region; the others' barriers throw RegionAborted instead of
// waiting for it, and run() rethrows the first exception.
TEST(CpuThreadPool, ExceptionFromWorkerIsRethrown) {
  ThreadPool pool = make_pool(4);
  std::atomic<int> after_abort{0};
  EXPECT_THROW(
      {
        try {
          pool.run([&](ThreadContext& ctx) {
            ctx.barrier();
            if (ctx.index() == 2) throw std::runtime_error("worker 2 failed");
            for (int i = 0; i < 5; ++i) ctx.barrier();
            ++after_abort;  // never reached: the barriers above throw
          });
        } catch (const std::runtime_error& e) {
          EXPECT_STREQ(e.what(), "worker 2 failed");
          throw;
        }
      },
      std::runtime_error);
  EXPECT_EQ(after_abort.load(), 0);
  // The pool runs normally afterwards.
  std::atomic<int> runs{0};
  pool.run([&](ThreadContext& ctx) {
    ctx.barrier();
    ++runs;
  });
  EXPECT_EQ(runs.load(), 4);
}

TEST(CpuThreadPool, ExceptionFromCallerReleasesSleepingWorkers) {
  ThreadPool pool = make_pool(3);
  EXPECT_THROW(pool.run([&](ThreadContext& ctx) {
    if (ctx.index() == 0) {
      sleep_ms(5);  // the workers have stopped spinning and sleep at the barrier by now
      throw std::invalid_argument("caller failed");
    }
    ctx.barrier();
  }),
               std::invalid_argument);
  std::atomic<int> runs{0};
  pool.run([&](ThreadContext&) { ++runs; });
  EXPECT_EQ(runs.load(), 3);
}

TEST(CpuThreadPool, ExceptionsFromEveryThreadRethrowOne) {
  ThreadPool pool = make_pool(4);
  for (int round = 0; round < 50; ++round) {
    EXPECT_THROW(pool.run([](ThreadContext& ctx) {
      if (ctx.index() % 2 == 0) ctx.barrier();
      throw std::out_of_range("thread " + std::to_string(ctx.index()));
    }),
                 std::out_of_range);
  }
  std::atomic<int> runs{0};
  pool.run([&](ThreadContext& ctx) {
    ctx.barrier();
    ++runs;
  });
  EXPECT_EQ(runs.load(), 4);
}

// fn throwing RegionAborted itself (not from a barrier) is an exception like any other.
TEST(CpuThreadPool, RegionAbortedThrownByFnIsRethrown) {
  ThreadPool pool = make_pool(3);
  EXPECT_THROW(pool.run([](ThreadContext& ctx) {
    if (ctx.index() == 1) throw RegionAborted();
    ctx.barrier();
  }),
               RegionAborted);
}

TEST(CpuThreadPool, NestedRunIsRefused) {
  ThreadPool pool = make_pool(3);
  std::atomic<int> refused{0};
  pool.run([&](ThreadContext&) {
    try {
      pool.run([](ThreadContext&) {});
    } catch (const std::logic_error&) {
      ++refused;
    }
  });
  EXPECT_EQ(refused.load(), 3);
  // Another pool's region may be run from inside one.
  ThreadPool inner = make_pool(2);
  std::atomic<int> inner_runs{0};
  pool.run([&](ThreadContext& ctx) {
    if (ctx.index() == 0) inner.run([&](ThreadContext&) { ++inner_runs; });
  });
  EXPECT_EQ(inner_runs.load(), 2);
}

TEST(CpuThreadPool, RunFromTwoThreadsAtOnceIsRefused) {
  ThreadPool pool = make_pool(2);
  std::atomic<bool> entered{false}, tried{false};
  std::thread other([&] {
    pool.run([&](ThreadContext& ctx) {
      if (ctx.index() != 0) return;
      entered = true;
      while (!tried) std::this_thread::yield();
    });
  });
  while (!entered) std::this_thread::yield();
  EXPECT_THROW(pool.run([](ThreadContext&) {}), std::logic_error);
  tried = true;
  other.join();
  std::atomic<int> runs{0};
  pool.run([&](ThreadContext&) { ++runs; });  // from a third thread: fine once the other is done
  EXPECT_EQ(runs.load(), 2);
}

TEST(CpuThreadPool, RepeatedCreateAndDestroy) {
  for (int round = 0; round < 100; ++round) {
    ThreadPool pool = make_pool(1 + round % 4);
    if (round % 3 == 1) {
      std::atomic<int> runs{0};
      pool.run([&](ThreadContext& ctx) {
        ctx.barrier();
        ++runs;
      });
      EXPECT_EQ(runs.load(), pool.num_threads());
    }
    if (round % 10 == 0) sleep_ms(1);  // destroyed while its workers sleep on the futex
  }
}

TEST(CpuThreadPool, WakesAfterIdleGaps) {
  ThreadPool pool = make_pool(3);
  for (int gap_ms : {0, 1, 5, 0, 12}) {
    sleep_ms(gap_ms);
    std::atomic<int> runs{0};
    pool.run([&](ThreadContext& ctx) {
      ctx.barrier();
      ++runs;
    });
    EXPECT_EQ(runs.load(), 3) << "after " << gap_ms << " ms";
  }
}

// prewake() between regions (asleep or still spinning workers, or none: one thread), called
// again before the region, or with no region after it: every region still runs on every thread,
// its phases in order (a lost or doubled wake-up hangs or fails here).
TEST(CpuThreadPool, PrewakeBeforeRegions) {
  for (int n : {1, 2, 3}) {
    ThreadPoolOptions options;
    options.num_threads = n;
    options.pin = 0;
    options.spin_us = 20;  // workers fall asleep within the gaps below
    ThreadPool pool(options);
    std::vector<int> phase(static_cast<size_t>(n), 0);
    int bad = 0;
    for (int i = 0; i < 60; ++i) {
      if (i % 3 != 2) pool.prewake();
      if (i % 5 == 0) pool.prewake();
      if (i % 4 == 1) std::this_thread::sleep_for(std::chrono::microseconds(i % 8 == 1 ? 2000 : 50));
      if (i % 7 == 3) continue;  // woken for a region that does not come
      std::atomic<int> runs{0};
      pool.run([&](ThreadContext& ctx) {
        phase[static_cast<size_t>(ctx.index())] = i;
        ctx.barrier();
        for (int t = 0; t < n; ++t)
          if (phase[static_cast<size_t>(t)] != i) ++runs;  // counted as bad below
        ++runs;
      });
      if (runs.load() != n) ++bad;
    }
    EXPECT_EQ(bad, 0) << n << " threads";
  }
}

TEST(CpuThreadPool, StatsMeasureBarrierWaits) {
  ThreadPool pool = make_pool(2, /*stats=*/true);
  pool.run([](ThreadContext& ctx) {
    for (int i = 0; i < 10; ++i) ctx.barrier();
  });
  const RegionStats& s = pool.last_stats();
  EXPECT_EQ(s.num_threads, 2);
  EXPECT_EQ(s.num_barriers, 10);
  ASSERT_EQ(s.barrier_wait_us.size(), 2u);
  EXPECT_GE(s.wait_share(), 0.0);
  EXPECT_LE(s.wait_share(), 1.0 + 1e-9);
  // Thread 1 arrives 3 ms late at the one barrier: thread 0 waits for it there.
  pool.run([](ThreadContext& ctx) {
    if (ctx.index() == 1) sleep_ms(3);
    ctx.barrier();
  });
  EXPECT_EQ(pool.last_stats().num_barriers, 1);
  EXPECT_GE(pool.last_stats().barrier_wait_us[0], 2500.0);
  EXPECT_GT(pool.last_stats().wait_share(), 0.3);
  EXPECT_EQ(pool.total_stats().num_regions, 2);
  EXPECT_EQ(pool.total_stats().num_barriers, 11);

  pool.set_collect_stats(false);
  pool.run([](ThreadContext& ctx) { ctx.barrier(); });
  EXPECT_EQ(pool.total_stats().num_regions, 2);
  pool.reset_stats();
  EXPECT_EQ(pool.total_stats().num_regions, 0);
  EXPECT_EQ(pool.last_stats().barrier_wait_us.size(), 2u);
}

TEST(CpuThreadPool, PinsThreadsToAllowedCpus) {
  const std::vector<int> cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  {
    ThreadPoolOptions options;
    options.num_threads = std::min<int>(2, cpus.size());
    options.pin = 1;
    ThreadPool pool(options);
    EXPECT_TRUE(pool.pinned());
    std::vector<int> pinned_to(pool.num_threads(), -1);
    pool.run([&](ThreadContext& ctx) {
      cpu_set_t set;
      CPU_ZERO(&set);
      pthread_getaffinity_np(pthread_self(), sizeof(set), &set);
      if (CPU_COUNT(&set) == 1)
        for (int c = 0; c < CPU_SETSIZE; ++c)
          if (CPU_ISSET(c, &set)) pinned_to[ctx.index()] = c;
    });
    for (int i = 0; i < pool.num_threads(); ++i) EXPECT_EQ(pinned_to[i], cpus[i]) << "thread " << i;
  }
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);  // the caller was pinned too
}

TEST(CpuThreadPool, OptionsAreChecked) {
  ThreadPoolOptions options;
  options.num_threads = -1;
  EXPECT_THROW(ThreadPool{options}, ConfigError);
  options.num_threads = kMaxThreads + 1;
  EXPECT_THROW(ThreadPool{options}, ConfigError);
  options.num_threads = 1;
  options.pin = 2;
  EXPECT_THROW(ThreadPool{options}, ConfigError);
  options.pin = 0;
  options.idle_spin_us = -1;
  EXPECT_THROW(ThreadPool{options}, ConfigError);
  options.idle_spin_us = 0;  // no longer than spin_us: allowed
  EXPECT_NO_THROW(ThreadPool{options});
}

TEST(CpuThreadPool, DefaultThreadCountFollowsEnvironment) {
  const std::optional<std::string> saved = env_value(kThreadsEnv);
  unsetenv(kThreadsEnv);
  EXPECT_EQ(ThreadPool().num_threads(), usable_cpus());
  setenv(kThreadsEnv, "3", 1);
  EXPECT_EQ(ThreadPool().num_threads(), 3);
  setenv(kThreadsEnv, "three", 1);
  EXPECT_THROW(ThreadPool(), ConfigError);
  if (saved) {
    setenv(kThreadsEnv, saved->c_str(), 1);
  } else {
    unsetenv(kThreadsEnv);
  }
}

TEST(CpuLimits, ThreadCountParsing) {
  EXPECT_EQ(parse_thread_count("4"), 4);
  EXPECT_EQ(parse_thread_count(" 16\n"), 16);
  EXPECT_EQ(parse_thread_count("1024"), 1024);
  for (const char* bad :
       {"", "abc", "0", "-1", "-0", "1025", "4x", "1.5", "0x10", "99999999999999999999"}) {
    try {
      parse_thread_count(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ConfigError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("SPECDEC_CPU_THREADS"), std::string::npos) << message;
      EXPECT_NE(message.find(std::string("= ") + bad), std::string::npos) << message;
      EXPECT_NE(message.find("from 1 to 1024"), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  }
}

TEST(CpuLimits, PinParsing) {
  EXPECT_FALSE(parse_pin(""));
  EXPECT_FALSE(parse_pin("0"));
  EXPECT_TRUE(parse_pin("1"));
  EXPECT_THROW(parse_pin("yes"), ConfigError);
  EXPECT_THROW(parse_pin("2"), ConfigError);
}

TEST(CpuLimits, ThreadCountChoice) {
  ThreadCountChoice c = choose_thread_count(std::nullopt, 6);
  EXPECT_EQ(c.num_threads, 6);
  EXPECT_FALSE(c.oversubscribed);
  c = choose_thread_count(std::string("2"), 6);
  EXPECT_EQ(c.num_threads, 2);
  EXPECT_TRUE(c.warning.empty());
  c = choose_thread_count(std::string("8"), 2);
  EXPECT_EQ(c.num_threads, 8);
  EXPECT_TRUE(c.oversubscribed);
  EXPECT_NE(c.warning.find("SPECDEC_CPU_THREADS=8"), std::string::npos) << c.warning;
  EXPECT_THROW(choose_thread_count(std::string("0"), 2), ConfigError);
}

TEST(CpuLimits, QuotaParsing) {
  EXPECT_EQ(parse_cpu_max("max 100000\n"), std::nullopt);
  EXPECT_EQ(parse_cpu_max("max"), std::nullopt);
  EXPECT_EQ(parse_cpu_max("200000 100000\n"), 2);
  EXPECT_EQ(parse_cpu_max("150000 100000"), 1);  // rounded down: no spinning past the quota
  EXPECT_EQ(parse_cpu_max("50000 100000"), 1);   // at least 1
  EXPECT_EQ(parse_cpu_max("400000"), 4);         // default period 100 ms
  EXPECT_EQ(parse_cpu_max("junk 100000"), std::nullopt);
  EXPECT_EQ(parse_cpu_max(""), std::nullopt);
  EXPECT_EQ(parse_cfs_quota("-1\n", "100000\n"), std::nullopt);
  EXPECT_EQ(parse_cfs_quota("300000\n", "100000\n"), 3);
  EXPECT_EQ(parse_cfs_quota("", "100000"), std::nullopt);
}

TEST(CpuLimits, FindsCgroupPathsInMountinfo) {
  // A hybrid host: v1 controllers plus cgroup2 at /sys/fs/cgroup/unified.
  const std::string cgroup = "4:memory:/job\n2:cpu,cpuacct:/job/step\n0::/job\n";
  const std::string mountinfo =
      "30 25 0:26 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw\n"
      "31 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw shared:11 - cgroup cgroup rw,cpu,cpuacct\n"
      "32 25 0:28 / /sys/fs/cgroup/memory rw shared:12 - cgroup cgroup rw,memory\n";
  const CgroupPaths p = find_cgroup_paths(cgroup, mountinfo);
  EXPECT_EQ(p.v2_mount, "/sys/fs/cgroup/unified");
  EXPECT_EQ(p.v2_dir, "/sys/fs/cgroup/unified/job");
  EXPECT_EQ(p.v1_cpu_mount, "/sys/fs/cgroup/cpu,cpuacct");
  EXPECT_EQ(p.v1_cpu_dir, "/sys/fs/cgroup/cpu,cpuacct/job/step");
  // A container: the mount's root is the container's own cgroup.
  const CgroupPaths c = find_cgroup_paths(
      "0::/docker/abc\n", "40 30 0:30 /docker/abc /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n");
  EXPECT_EQ(c.v2_dir, "/sys/fs/cgroup");
  EXPECT_TRUE(c.v1_cpu_dir.empty());
  EXPECT_TRUE(find_cgroup_paths("", "").v2_dir.empty());
}

TEST(CpuLimits, CgroupLimitFromFakeFiles) {
  namespace fs = std::filesystem;
  const fs::path root =
      fs::temp_directory_path() / ("specdec_cgroup_test_" + std::to_string(getpid()));
  fs::remove_all(root);
  const auto write = [&](const std::string& path, const std::string& text) {
    fs::create_directories((root / path.substr(1)).parent_path());
    std::ofstream(root / path.substr(1)) << text;
  };
  CgroupPaths v2{"/cg/a/b", "/cg", "", ""};
  write("/cg/a/b/cpu.max", "max 100000\n");
  EXPECT_EQ(cgroup_cpu_limit(v2, root.string()), std::nullopt);
  write("/cg/a/cpu.max", "300000 100000\n");  // a parent's quota limits its children
  EXPECT_EQ(cgroup_cpu_limit(v2, root.string()), 3);
  write("/cg/a/b/cpu.max", "200000 100000\n");
  EXPECT_EQ(cgroup_cpu_limit(v2, root.string()), 2);

  CgroupPaths v1{"", "", "/cpu/job", "/cpu"};
  write("/cpu/job/cpu.cfs_quota_us", "-1\n");
  write("/cpu/job/cpu.cfs_period_us", "100000\n");
  EXPECT_EQ(cgroup_cpu_limit(v1, root.string()), std::nullopt);
  write("/cpu/cpu.cfs_quota_us", "100000\n");
  write("/cpu/cpu.cfs_period_us", "50000\n");
  EXPECT_EQ(cgroup_cpu_limit(v1, root.string()), 2);
  EXPECT_EQ(cgroup_cpu_limit(CgroupPaths{}, root.string()), std::nullopt);
  fs::remove_all(root);
}

TEST(CpuLimits, RealBudgetIsSane) {
  const CpuBudget b = read_cpu_budget();
  EXPECT_FALSE(b.allowed.empty());
  EXPECT_GE(b.usable, 1);
  EXPECT_LE(b.usable, static_cast<int>(b.allowed.size()));
}
