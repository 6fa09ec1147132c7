// The CPU device's thread pool (cpp/cpu/thread_pool.h), JSON on stdout (and in --out FILE):
//  - empty_region: µs per run() of a region that does nothing, back to back (workers spinning);
//  - barrier: µs per barrier in one region of many barriers and no work (the wall time per barrier,
//    and the mean wait per barrier and thread from the pool's own stats);
//  - wake: µs of an empty run() after the caller slept gap_ms (the workers stopped spinning after
//    spin_us and sleep on the futex), median and p90, with the workers' wake-up latency
//    (start_wait).
// Each at 1 and 2 threads, and at the CPUs this process may use when that is more, with the pool's
// default yield_after_us; 2 threads also without the yield (-1), for comparison. Best of 5 trials
// where it is a mean (the machine may be shared: the minimum is the least disturbed figure).
// Usage: cpu_pool_bench [--quick] [--out FILE]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "cpu/cpu_limits.h"
#include "cpu/thread_pool.h"

using namespace specdec::cpu;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

namespace {

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * (v.size() - 1) + 0.5))];
}

// The best of 5 trials of the mean µs per call of f over reps calls.
template <typename F>
double best_mean_us(int reps, F&& f) {
  double best = 1e30;
  for (int trial = 0; trial < 5; ++trial) {
    const auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) f();
    best = std::min(best, us_since(t0) / reps);
  }
  return best;
}

json bench_empty_region(ThreadPool& pool, int reps) {
  for (int i = 0; i < 100; ++i) pool.run([](ThreadContext&) {});
  const double us = best_mean_us(reps, [&] { pool.run([](ThreadContext&) {}); });
  return {{"us_per_region", us}};
}

json bench_barrier(ThreadPool& pool, int barriers) {
  const auto region = [&] {
    pool.run([&](ThreadContext& ctx) {
      for (int i = 0; i < barriers; ++i) ctx.barrier();
    });
  };
  region();
  const double us = best_mean_us(1, region) / barriers;
  pool.set_collect_stats(true);
  pool.reset_stats();
  region();
  pool.set_collect_stats(false);
  const RegionStats& s = pool.last_stats();
  return {{"barriers_per_region", barriers},
          {"us_per_barrier", us},
          {"stats_wait_us_per_barrier", s.barrier_us_per_op()},
          {"stats_wait_share", s.wait_share()}};
}

json bench_wake(ThreadPool& pool, double gap_ms, int reps) {
  std::vector<double> run_us, wake_us;
  pool.set_collect_stats(true);
  for (int i = 0; i < reps; ++i) {
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(gap_ms));
    const auto t0 = Clock::now();
    pool.run([](ThreadContext&) {});
    run_us.push_back(us_since(t0));
    const RegionStats& s = pool.last_stats();
    for (int t = 1; t < s.num_threads; ++t) wake_us.push_back(s.start_wait_us[t]);
  }
  pool.set_collect_stats(false);
  return {{"gap_ms", gap_ms},
          {"run_us_median", percentile(run_us, 0.5)},
          {"run_us_p90", percentile(run_us, 0.9)},
          {"worker_wake_us_median", percentile(wake_us, 0.5)},
          {"worker_wake_us_p90", percentile(wake_us, 0.9)}};
}

json bench_threads(int num_threads, int yield_after_us, bool quick) {
  ThreadPoolOptions options;
  options.num_threads = num_threads;
  options.pin = 0;
  options.yield_after_us = yield_after_us;
  ThreadPool pool(options);
  json wake = json::array();
  for (double gap_ms : {0.02, 1.0, 10.0})
    wake.push_back(bench_wake(pool, gap_ms, quick ? 3 : (gap_ms >= 10 ? 50 : 200)));
  return {{"num_threads", num_threads},
          {"spin_us", pool.spin_us()},
          {"yield_after_us", yield_after_us},
          {"empty_region", bench_empty_region(pool, quick ? 100 : 20000)},
          {"barrier", bench_barrier(pool, quick ? 100 : 20000)},
          {"wake", wake}};
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

// Written to FILE.tmp, then renamed: a reader never sees half a file.
bool write_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    if (!(out << text)) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::string out_path;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
      out_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: cpu_pool_bench [--quick] [--out FILE]\n");
      return 2;
    }
  }
  const CpuBudget budget = read_cpu_budget();
  std::vector<int> counts{1, 2};
  if (budget.usable > 2) counts.push_back(budget.usable);
  const int yield_default = ThreadPoolOptions{}.yield_after_us;
  json runs = json::array();
  for (int n : counts) runs.push_back(bench_threads(n, yield_default, quick));
  runs.push_back(bench_threads(2, -1, quick));
  const json result = {{"bench", "cpu_pool"},
                       {"cpu_model", cpu_model()},
                       {"allowed_cpus", budget.allowed.size()},
                       {"usable_cpus", budget.usable},
                       {"quick", quick},
                       {"runs", runs}};
  const std::string text = result.dump(2) + "\n";
  std::fputs(text.c_str(), stdout);
  if (!out_path.empty() && !write_atomic(out_path, text)) {
    std::fprintf(stderr, "cpu_pool_bench: cannot write --out %s\n", out_path.c_str());
    return 1;
  }
  return 0;
}
