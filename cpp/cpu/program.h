// A step of the native CPU device as one parallel region: ops are recorded (each a name, a count
// of independent work items and a function over an item range), then run in one ThreadPool
// region in record order, every thread taking its static share of an op's items, with a phase
// barrier between ops (docs/cpu_thread_pool.md). No per-op hand-off to sleeping workers: the
// cost between two ops is one barrier. An op whose items are fewer than the threads runs on the
// first threads; the others go straight to the barrier. A dynamic op (Schedule::kDynamic: many
// items of uneven cost, e.g. a matmul's weight groups, where memory serves the threads unevenly)
// hands its items out in runs from a shared counter instead, so that no thread waits at the
// barrier while another still has a static share to finish; an item's result must not depend
// on the thread that runs it (every op here).
//
// With profiling on, the caller's thread times each op (its share plus the barrier after it) and
// the totals per op name come back from take_profile(), like the OpenCL device's profile; every
// thread also times its wait at the barrier after each op, summed per op name (`wait_us`: the
// threads that finished their share early, waiting for the others; where a step's waiting is).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cpu/thread_pool.h"

namespace specdec::cpu {

class Program {
 public:
  using Body = std::function<void(int64_t begin, int64_t end)>;
  enum class Schedule { kStatic, kDynamic };

  // Appends an op of `items` work items, handed out in runs of `grain` items (items >= 0, grain >= 1):
  // static shares, or (kDynamic) runs of at least `grain` taken from a counter until none is left.
  void add(const char* name, int64_t items, int64_t grain, Body body, Schedule schedule = Schedule::kStatic);
  size_t size() const { return ops_.size(); }
  bool empty() const { return ops_.empty(); }

  // Runs every recorded op in one region of `pool`, then forgets them. The first exception an op
  // throws ends the region (the pool's rules) and is rethrown here; the ops are forgotten either way.
  void run(ThreadPool& pool);

  struct OpTime {
    std::string name;
    int64_t launches = 0;
    double us = 0;
    double wait_us = 0;  // every thread's wait at the barrier after the op, summed
  };
  void set_profiling(bool on) { profiling_ = on; }
  bool profiling() const { return profiling_; }
  // Per op name, in first-run order, since the last call.
  std::vector<OpTime> take_profile();

 private:
  struct Op {
    const char* name;
    int64_t items;
    int64_t grain;
    Body body;
    Schedule schedule;
  };
  std::vector<Op> ops_;
  bool profiling_ = false;
  std::vector<OpTime> times_;
};

}  // namespace specdec::cpu
