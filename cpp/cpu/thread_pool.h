#pragma once
// The CPU device's thread pool: persistent workers that run one parallel region per call, with a
// phase barrier between the ops inside it, and never sleep inside a step while there is work.
//
//   ThreadPool pool;                       // SPECDEC_CPU_THREADS / the CPUs this process may use
//   pool.run([&](ThreadContext& ctx) {     // every thread, the caller being index 0
//     auto [lo, hi] = ctx.chunk(0, rows, 16);
//     op1(lo, hi);
//     ctx.barrier();                       // every thread's op1 done and visible
//     op2(...);
//   });
//
// Waiting (at a barrier, and the caller waiting for the workers at the end of a region) spins
// with PAUSE for at most spin_us, a worker waiting for the next region for at most idle_spin_us
// (a decode loop's host work between steps: measured on SmolLM2, a 100 µs bound let the worker
// fall asleep before most steps), then blocks on a futex; a region start or a barrier
// release wakes the sleepers (one syscall, only when someone sleeps). After yield_after_us of
// spinning the spin loop also calls sched_yield every 32 PAUSEs: when the thread it waits for
// shares its CPU (a loaded machine, another thread of the engine), that thread then runs within
// µs instead of after the whole spin bound (measured on a loaded 2-CPU VM: an empty region after an
// idle gap took ~205 µs without the yield, 15-50 µs with it); on a CPU of its own sched_yield
// returns at once. With more threads than usable CPUs the pool does not spin at all (spinning
// threads that outnumber CPUs starve the thread they wait for).
//
// Exceptions: the first exception thrown by fn on any thread aborts the region: every other
// thread's barrier() (waiting or still to come) throws RegionAborted, so no thread waits for the
// one that left; when every thread has returned, run() rethrows that first exception in the caller.
// The RegionAborted exceptions of the other threads never reach the caller.
//
// run() is for one thread at a time: from inside one of this pool's regions, or while another
// thread's run() is in progress, it throws std::logic_error. The pool must outlive its regions;
// the destructor stops and joins the workers.
#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace specdec::cpu {

class ThreadPool;

// Thrown by barrier() once another thread's fn threw: the region is being abandoned.
class RegionAborted : public std::runtime_error {
 public:
  RegionAborted()
      : std::runtime_error("the CPU thread pool's region was aborted by an exception") {}
};

// [begin, end) of one thread's share.
struct Chunk {
  int64_t begin = 0;
  int64_t end = 0;
};

// The static split of [begin, end) in units of grain elements over num_threads threads: thread
// index gets a contiguous run of units, the runs differing by at most one unit (the last unit may
// be short). Empty for threads beyond the units. grain >= 1, begin <= end.
Chunk static_chunk(int64_t begin, int64_t end, int64_t grain, int index, int num_threads);

// What fn sees on one thread of a region.
class ThreadContext {
 public:
  int index() const { return index_; }
  int num_threads() const { return num_threads_; }
  // Waits until every thread of the region has arrived; writes before it are visible to every
  // thread after it. Throws RegionAborted when another thread's fn threw. Every thread of a region
  // must call it the same number of times (a thread that skips one hangs the others, as with any
  // barrier).
  void barrier();
  // This thread's static_chunk of [begin, end).
  Chunk chunk(int64_t begin, int64_t end, int64_t grain = 1) const {
    return static_chunk(begin, end, grain, index_, num_threads_);
  }

 private:
  friend class ThreadPool;
  ThreadContext(ThreadPool* pool, int index, int num_threads)
      : pool_(pool), index_(index), num_threads_(num_threads) {}
  ThreadPool* pool_;
  int index_;
  int num_threads_;
};

struct ThreadPoolOptions {
  int num_threads = 0;  // 0: SPECDEC_CPU_THREADS if set, else the CPUs this process may use
  int pin = -1;         // 1: thread i on the i-th allowed CPU; 0: no pinning; -1: SPECDEC_CPU_PIN
  int spin_us = 100;    // spin this long before blocking; 0 = block at once
  // A worker waiting for the next region (between steps: the engine's host work, a step being
  // recorded) spins this long before blocking (at least spin_us; 0 when spin_us is 0)
  int idle_spin_us = 2000;
  int yield_after_us = 10;  // spinning longer than this, sched_yield every 32 PAUSEs; -1: never
  bool collect_stats = false;
};

// Where the threads of one region (or of all regions since reset_stats) spent their waiting time,
// in µs. Filled only while stats are collected; each vector is [num_threads].
struct RegionStats {
  int num_threads = 0;
  int64_t num_regions = 0;
  int64_t num_barriers = 0;             // barriers the caller passed
  double region_us = 0;                 // the caller's time in run()
  std::vector<double> start_wait_us;    // region start until the thread began fn (wake-up)
  std::vector<double> barrier_wait_us;  // arrival at a barrier until its release, summed
  std::vector<double> end_wait_us;      // fn returned until the region ended
  // Waiting (start + barriers + end) over the threads' total time in the region, 0..1.
  double wait_share() const;
  // Mean barrier wait per barrier and thread.
  double barrier_us_per_op() const;
};

class ThreadPool {
 public:
  explicit ThreadPool(ThreadPoolOptions options = {});
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }
  bool pinned() const { return pin_; }
  // The spin bound in µs (0 when oversubscribed or asked for).
  int spin_us() const { return static_cast<int>(spin_ns_ / 1000); }

  // Runs fn(ThreadContext&) once on every thread (the caller is index 0) and returns when all
  // have returned; rethrows the first exception. fn is called concurrently from all threads.
  template <typename Fn>
  void run(Fn&& fn) {
    using F = std::remove_reference_t<Fn>;
    run_region(RegionFn{const_cast<void*>(static_cast<const void*>(std::addressof(fn))),
                        [](void* f, ThreadContext& ctx) { (*static_cast<F*>(f))(ctx); }});
  }
  // One region in which each thread calls fn(chunk_begin, chunk_end) on its static_chunk of
  // [begin, end) (threads with an empty chunk do not call it).
  template <typename Fn>
  void parallel_for(int64_t begin, int64_t end, int64_t grain, Fn&& fn) {
    check_range(begin, end, grain);
    run([&](ThreadContext& ctx) {
      const Chunk c = ctx.chunk(begin, end, grain);
      if (c.begin < c.end) fn(c.begin, c.end);
    });
  }

  // Wakes workers asleep between regions so that they spin (up to spin_us) for the next one:
  // called when a step starts being prepared, their wake-up (tens of µs in a VM) overlaps the
  // preparation instead of delaying the region's first barrier. Costs one syscall when a worker
  // sleeps, nothing otherwise; no effect without spinning.
  void prewake();

  // Stats: cheap when off (one branch per barrier); switch between regions.
  void set_collect_stats(bool on) { collect_stats_.store(on, std::memory_order_relaxed); }
  const RegionStats& last_stats() const { return last_; }
  const RegionStats& total_stats() const { return total_; }
  void reset_stats();

 private:
  friend class ThreadContext;
  struct RegionFn {
    void* obj = nullptr;
    void (*call)(void*, ThreadContext&) = nullptr;
  };
  // One thread's region timings, on its own cache line.
  struct alignas(64) ThreadSlot {
    int64_t start_ns = 0, end_ns = 0, barrier_wait_ns = 0, barriers = 0;
  };
  // A word the pool waits on, with the count of threads asleep on it (both on one line: they are
  // written together by the sleeper and read together by the waker).
  struct alignas(64) WaitWord {
    std::atomic<uint32_t> value{0};
    std::atomic<uint32_t> sleepers{0};
  };

  static void check_range(int64_t begin, int64_t end, int64_t grain);
  void run_region(RegionFn fn);
  void worker_main(int index);
  void stop_workers();
  void execute(int index);
  void barrier(int index);
  void fail(std::exception_ptr error);
  template <typename Done>
  uint32_t wait_for(WaitWord& word, Done done, int64_t spin_ns) const;
  static void wake_all(WaitWord& word);
  void pin_this_thread(int index) const;
  void finish_stats(int64_t start_ns, int64_t end_ns);

  int num_threads_ = 1;
  bool pin_ = false;
  int64_t spin_ns_ = 0;
  int64_t idle_spin_ns_ = 0;
  int64_t yield_after_ns_ = -1;
  std::vector<int> cpus_;  // the allowed CPUs, for pinning

  WaitWord region_;   // +2 per region; bit 0: stop
  WaitWord barrier_;  // +2 per barrier; bit 0: the region is aborted
  WaitWord pending_;  // workers still in the region; the caller waits for 0
  alignas(64) std::atomic<uint32_t> barrier_count_{0};  // arrivals at the current barrier
  alignas(64) std::atomic<bool> busy_{false};           // a run() is in progress

  // Written by the caller before a region starts (published by region_), read by the workers.
  RegionFn fn_;
  bool stats_on_ = false;
  std::atomic<bool> error_claimed_{false};
  std::exception_ptr error_;
  std::atomic<bool> collect_stats_{false};
  std::thread::id pinned_caller_;

  std::unique_ptr<ThreadSlot[]> slots_;
  std::vector<std::thread> workers_;
  RegionStats last_, total_;
};

inline void ThreadContext::barrier() { pool_->barrier(index_); }

}  // namespace specdec::cpu
