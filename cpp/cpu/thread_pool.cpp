#include "cpu/thread_pool.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <mutex>
#include <numeric>

#include "common/errors.h"
#include "cpu/cpu_limits.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace specdec::cpu {

namespace {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "the futex calls need a plain 32-bit atomic word");

constexpr uint32_t kFlagBit = 1;  // bit 0 of region_ (stop) and barrier_ (aborted)
constexpr uint32_t kStep = 2;     // the counters in the upper bits

// The pool this thread is running a region of (nested run() check).
thread_local const ThreadPool* t_region_pool = nullptr;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

uint32_t* futex_addr(std::atomic<uint32_t>& word) { return reinterpret_cast<uint32_t*>(&word); }

void futex_wait(std::atomic<uint32_t>& word, uint32_t expected) {
  // Returns at once (EAGAIN) when word != expected; spurious returns are fine (callers re-check).
  syscall(SYS_futex, futex_addr(word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}

void futex_wake(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, futex_addr(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

// Prints warning on stderr the first time this call site (its `once`) warns in the process.
void warn_once(std::once_flag& once, const std::string& warning) {
  std::call_once(once, [&] { std::fprintf(stderr, "%s\n", warning.c_str()); });
}

std::once_flag g_oversubscribed_warning, g_pin_warning;

std::vector<double> ns_to_us(const std::vector<int64_t>& ns) {
  std::vector<double> us(ns.size());
  std::transform(ns.begin(), ns.end(), us.begin(), [](int64_t v) { return v / 1e3; });
  return us;
}

void add_to(std::vector<double>& sum, const std::vector<double>& v) {
  sum.resize(v.size(), 0.0);
  for (size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
}

}  // namespace

Chunk static_chunk(int64_t begin, int64_t end, int64_t grain, int index, int num_threads) {
  const int64_t units = (end - begin + grain - 1) / grain;
  const int64_t base = units / num_threads, rest = units % num_threads;
  const int64_t first = index * base + std::min<int64_t>(index, rest);
  const int64_t last = first + base + (index < rest ? 1 : 0);
  const int64_t len = end - begin;
  return {begin + std::min(len, first * grain), begin + std::min(len, last * grain)};
}

double RegionStats::wait_share() const {
  if (region_us <= 0 || num_threads == 0) return 0.0;
  double waited = 0;
  for (int i = 0; i < num_threads; ++i)
    waited += start_wait_us[i] + barrier_wait_us[i] + end_wait_us[i];
  return waited / (region_us * num_threads);
}

double RegionStats::barrier_us_per_op() const {
  if (num_barriers == 0 || num_threads == 0) return 0.0;
  const double sum = std::accumulate(barrier_wait_us.begin(), barrier_wait_us.end(), 0.0);
  return sum / static_cast<double>(num_barriers * num_threads);
}

ThreadPool::ThreadPool(ThreadPoolOptions options) {
  check_config(options.num_threads >= 0 && options.num_threads <= kMaxThreads,
               "ThreadPoolOptions.num_threads", options.num_threads,
               str_cat("0 (the default) to ", kMaxThreads));
  check_config(options.pin >= -1 && options.pin <= 1, "ThreadPoolOptions.pin", options.pin,
               "-1 (SPECDEC_CPU_PIN), 0 or 1");
  check_config(options.spin_us >= 0, "ThreadPoolOptions.spin_us", options.spin_us, ">= 0");
  check_config(options.idle_spin_us >= 0, "ThreadPoolOptions.idle_spin_us", options.idle_spin_us, ">= 0");
  const CpuBudget budget = read_cpu_budget();
  ThreadCountChoice choice;
  if (options.num_threads > 0) {
    choice = choose_thread_count(std::to_string(options.num_threads), budget.usable,
                                 "ThreadPoolOptions.num_threads");
  } else {
    choice = choose_thread_count(env_value(kThreadsEnv), budget.usable);
  }
  if (!choice.warning.empty()) warn_once(g_oversubscribed_warning, choice.warning);
  num_threads_ = choice.num_threads;
  pin_ = options.pin >= 0 ? options.pin == 1 : parse_pin(env_value(kPinEnv).value_or(""));
  spin_ns_ = choice.oversubscribed ? 0 : int64_t{options.spin_us} * 1000;
  idle_spin_ns_ = spin_ns_ == 0 ? 0 : std::max<int64_t>(spin_ns_, int64_t{options.idle_spin_us} * 1000);
  yield_after_ns_ = options.yield_after_us < 0 ? -1 : int64_t{options.yield_after_us} * 1000;
  cpus_ = budget.allowed;
  if (cpus_.empty()) pin_ = false;
  collect_stats_.store(options.collect_stats, std::memory_order_relaxed);
  slots_ = std::make_unique<ThreadSlot[]>(num_threads_);
  reset_stats();
  workers_.reserve(num_threads_ - 1);
  try {
    for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker_main(i); });
  } catch (...) {
    stop_workers();  // the ones already started
    throw;
  }
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::stop_workers() {
  region_.value.fetch_or(kFlagBit, std::memory_order_seq_cst);
  wake_all(region_);
  for (std::thread& t : workers_)
    if (t.joinable()) t.join();
  workers_.clear();
}

void ThreadPool::check_range(int64_t begin, int64_t end, int64_t grain) {
  check_config(grain >= 1, "parallel_for grain", grain, ">= 1");
  check_config(begin <= end, "parallel_for range", str_cat("[", begin, ", ", end, ")"),
               "begin <= end");
}

// Waits until done(word.value) holds: spins with PAUSE up to spin_ns, then sleeps on the futex.
// Sleeping: announce in `sleepers` and re-read the word (both seq_cst) before the futex wait; the
// waker changes the word and then reads `sleepers` (both seq_cst), so one of the two sees the other
// and no wake-up is lost. Returns the word's value that satisfied done.
// A sleeper woken while its wait is not over (prewake(), or a spurious return) spins again first.
template <typename Done>
uint32_t ThreadPool::wait_for(WaitWord& word, Done done, int64_t spin_ns) const {
  uint32_t value = word.value.load(std::memory_order_acquire);
  if (done(value)) return value;
  for (;;) {
    if (spin_ns > 0) {
      const int64_t start = now_ns();
      for (uint32_t i = 1;; ++i) {
        cpu_relax();
        value = word.value.load(std::memory_order_acquire);
        if (done(value)) return value;
        if (i % 32 == 0) {
          const int64_t spun = now_ns() - start;
          if (spun > spin_ns) break;
          if (yield_after_ns_ >= 0 && spun > yield_after_ns_) sched_yield();
        }
      }
    }
    word.sleepers.fetch_add(1, std::memory_order_seq_cst);
    value = word.value.load(std::memory_order_seq_cst);
    if (!done(value)) futex_wait(word.value, value);
    word.sleepers.fetch_sub(1, std::memory_order_relaxed);
    value = word.value.load(std::memory_order_acquire);
    if (done(value)) return value;
  }
}

void ThreadPool::prewake() {
  if (num_threads_ > 1 && spin_ns_ > 0) wake_all(region_);
}

void ThreadPool::wake_all(WaitWord& word) {
  if (word.sleepers.load(std::memory_order_seq_cst) > 0) futex_wake(word.value);
}

void ThreadPool::pin_this_thread(int index) const {
  const int cpu = cpus_[static_cast<size_t>(index) % cpus_.size()];
  cpu_set_t* set = CPU_ALLOC(cpu + 1);
  const size_t size = CPU_ALLOC_SIZE(cpu + 1);
  CPU_ZERO_S(size, set);
  CPU_SET_S(cpu, size, set);
  const int error = pthread_setaffinity_np(pthread_self(), size, set);
  CPU_FREE(set);
  if (error != 0) {
    warn_once(g_pin_warning,
              str_cat("specdec: ", kPinEnv, "=1 could not pin a CPU pool thread to CPU ", cpu,
                      " (error ", error, "); it runs unpinned"));
  }
}

void ThreadPool::worker_main(int index) {
  if (pin_) pin_this_thread(index);
  uint32_t seen = 0;
  for (;;) {
    seen = wait_for(region_, [seen](uint32_t v) { return v != seen; }, idle_spin_ns_);
    if (seen & kFlagBit) return;  // stop
    if (stats_on_) slots_[index].start_ns = now_ns();
    execute(index);
    if (stats_on_) slots_[index].end_ns = now_ns();
    if (pending_.value.fetch_sub(1, std::memory_order_seq_cst) == 1) wake_all(pending_);
  }
}

// Runs fn on this thread. An exception aborts the region (and is kept if it is the first);
// RegionAborted from a barrier only says that another thread's exception did.
void ThreadPool::execute(int index) {
  ThreadContext ctx(this, index, num_threads_);
  t_region_pool = this;
  try {
    fn_.call(fn_.obj, ctx);
  } catch (const RegionAborted&) {
    // From a barrier once the region is aborted; only when fn threw it itself is the bit clear.
    if (!(barrier_.value.load(std::memory_order_acquire) & kFlagBit))
      fail(std::current_exception());
  } catch (...) {
    fail(std::current_exception());
  }
  t_region_pool = nullptr;
}

// Keeps the region's first exception (claimed before the abort bit is set, so an exception that
// caused the abort is always the one kept) and aborts the region.
void ThreadPool::fail(std::exception_ptr error) {
  if (!error_claimed_.exchange(true, std::memory_order_acq_rel)) error_ = std::move(error);
  barrier_.value.fetch_or(kFlagBit, std::memory_order_seq_cst);
  wake_all(barrier_);
}

// A generation barrier: read the generation, count in; the last to arrive resets the count and
// moves the generation on (+2, leaving the abort bit alone), the others wait for it to move. The
// count's acq_rel RMWs and the generation's release/acquire make every write before the barrier
// visible after it.
void ThreadPool::barrier(int index) {
  const bool timed = stats_on_;
  const int64_t start = timed ? now_ns() : 0;
  const uint32_t generation = barrier_.value.load(std::memory_order_acquire);
  if (generation & kFlagBit) throw RegionAborted();
  if (num_threads_ > 1) {
    const uint32_t arrived = barrier_count_.fetch_add(1, std::memory_order_acq_rel) + 1;
    if (arrived == static_cast<uint32_t>(num_threads_)) {
      barrier_count_.store(0, std::memory_order_relaxed);
      barrier_.value.fetch_add(kStep, std::memory_order_seq_cst);
      wake_all(barrier_);
    } else {
      const uint32_t now = wait_for(barrier_, [generation](uint32_t v) { return v != generation; }, spin_ns_);
      if (now & kFlagBit) throw RegionAborted();
    }
  }
  if (timed) {
    ThreadSlot& slot = slots_[index];
    slot.barrier_wait_ns += now_ns() - start;
    ++slot.barriers;
  }
}

void ThreadPool::run_region(RegionFn fn) {
  if (t_region_pool == this) {
    throw std::logic_error(
        "ThreadPool::run called from inside one of its own regions: regions do not nest (use "
        "ctx.barrier() between the phases of one region)");
  }
  if (busy_.exchange(true, std::memory_order_acquire)) {
    throw std::logic_error(
        "ThreadPool::run called while another thread's run() on the same pool is in progress: "
        "one pool serves one calling thread at a time");
  }
  struct Release {
    std::atomic<bool>& busy;
    ~Release() { busy.store(false, std::memory_order_release); }
  } release{busy_};
  if (pin_ && pinned_caller_ != std::this_thread::get_id()) {
    pin_this_thread(0);
    pinned_caller_ = std::this_thread::get_id();
  }
  // No worker runs now: the region's state is the caller's until region_ moves.
  fn_ = fn;
  error_ = nullptr;
  error_claimed_.store(false, std::memory_order_relaxed);
  barrier_count_.store(0, std::memory_order_relaxed);
  barrier_.value.fetch_and(~kFlagBit, std::memory_order_relaxed);
  stats_on_ = collect_stats_.load(std::memory_order_relaxed);
  const int64_t start = stats_on_ ? now_ns() : 0;
  if (stats_on_) std::fill(slots_.get(), slots_.get() + num_threads_, ThreadSlot{});
  if (num_threads_ > 1) {
    pending_.value.store(num_threads_ - 1, std::memory_order_relaxed);
    region_.value.fetch_add(kStep, std::memory_order_seq_cst);
    wake_all(region_);
  }
  if (stats_on_) slots_[0].start_ns = now_ns();
  execute(0);
  if (stats_on_) slots_[0].end_ns = now_ns();
  if (num_threads_ > 1) wait_for(pending_, [](uint32_t v) { return v == 0; }, spin_ns_);
  if (stats_on_) finish_stats(start, now_ns());
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void ThreadPool::finish_stats(int64_t start_ns, int64_t end_ns) {
  std::vector<int64_t> start_wait(num_threads_), barrier_wait(num_threads_), end_wait(num_threads_);
  for (int i = 0; i < num_threads_; ++i) {
    start_wait[i] = slots_[i].start_ns - start_ns;
    barrier_wait[i] = slots_[i].barrier_wait_ns;
    end_wait[i] = end_ns - slots_[i].end_ns;
  }
  last_.num_threads = num_threads_;
  last_.num_regions = 1;
  last_.num_barriers = slots_[0].barriers;
  last_.region_us = (end_ns - start_ns) / 1e3;
  last_.start_wait_us = ns_to_us(start_wait);
  last_.barrier_wait_us = ns_to_us(barrier_wait);
  last_.end_wait_us = ns_to_us(end_wait);
  total_.num_regions += 1;
  total_.num_barriers += last_.num_barriers;
  total_.region_us += last_.region_us;
  add_to(total_.start_wait_us, last_.start_wait_us);
  add_to(total_.barrier_wait_us, last_.barrier_wait_us);
  add_to(total_.end_wait_us, last_.end_wait_us);
}

void ThreadPool::reset_stats() {
  last_ = RegionStats{};
  last_.num_threads = num_threads_;
  last_.start_wait_us.assign(num_threads_, 0.0);
  last_.barrier_wait_us.assign(num_threads_, 0.0);
  last_.end_wait_us.assign(num_threads_, 0.0);
  total_ = last_;
}

}  // namespace specdec::cpu
