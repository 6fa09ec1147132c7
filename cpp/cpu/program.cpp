#include "cpu/program.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <stdexcept>
#include <utility>

#include "common/errors.h"

namespace specdec::cpu {

void Program::add(const char* name, int64_t items, int64_t grain, Body body, Schedule schedule) {
  SPECDEC_CHECK(items >= 0, "items", items, str_cat("must be >= 0 (op ", name, ")"));
  SPECDEC_CHECK(grain >= 1, "grain", grain, str_cat("must be >= 1 (op ", name, ")"));
  ops_.push_back(Op{name, items, grain, std::move(body), schedule});
}

namespace {
// SPECDEC_CPU_SCHEDULE=static runs every op on static shares (for comparisons), read once.
bool dynamic_allowed() {
  static const bool allowed = [] {
    const char* v = std::getenv("SPECDEC_CPU_SCHEDULE");
    return v == nullptr || std::string(v) != "static";
  }();
  return allowed;
}

// Runs of a dynamic op: about 8 per thread (a counter's cost per run stays small), at least grain.
int64_t dynamic_run(int64_t items, int64_t grain, int threads) {
  const int64_t per = (items + 8 * int64_t{threads} - 1) / (8 * int64_t{threads});
  return std::max(grain, (per + grain - 1) / grain * grain);
}
}  // namespace

void Program::run(ThreadPool& pool) {
  std::vector<Op> ops;
  ops.swap(ops_);  // forgotten whatever happens
  if (ops.empty()) return;
  std::vector<double> us(profiling_ ? ops.size() : 0, 0.0);
  const bool timed = profiling_;
  const auto nt = static_cast<size_t>(pool.num_threads());
  std::vector<double> waits(timed ? ops.size() * nt : 0, 0.0);  // [op][thread]
  // one counter per dynamic op (a cache line each: threads take runs of different ops at once)
  struct alignas(64) Counter {
    std::atomic<int64_t> next{0};
  };
  std::vector<Counter> counters(ops.size());
  const bool dynamic = dynamic_allowed();
  pool.run([&](ThreadContext& ctx) {
    using Clock = std::chrono::steady_clock;
    auto t0 = Clock::now();
    for (size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      if (op.schedule == Schedule::kDynamic && ctx.num_threads() > 1 && dynamic) {
        const int64_t run = dynamic_run(op.items, op.grain, ctx.num_threads());
        std::atomic<int64_t>& next = counters[i].next;
        for (int64_t b = next.fetch_add(run, std::memory_order_relaxed); b < op.items;
             b = next.fetch_add(run, std::memory_order_relaxed)) {
          op.body(b, std::min(op.items, b + run));
        }
      } else {
        const Chunk c = ctx.chunk(0, op.items, op.grain);
        if (c.begin < c.end) op.body(c.begin, c.end);
      }
      if (i + 1 < ops.size()) {  // the region's end waits for the last op
        if (timed) {
          const auto b0 = Clock::now();
          ctx.barrier();
          waits[i * nt + static_cast<size_t>(ctx.index())] =
              std::chrono::duration<double, std::micro>(Clock::now() - b0).count();
        } else {
          ctx.barrier();
        }
      }
      if (timed && ctx.index() == 0) {
        const auto t1 = Clock::now();
        us[i] = std::chrono::duration<double, std::micro>(t1 - t0).count();
        t0 = t1;
      }
    }
  });
  if (!timed) return;
  for (size_t i = 0; i < ops.size(); ++i) {
    OpTime* slot = nullptr;
    for (OpTime& t : times_) {
      if (t.name == ops[i].name) slot = &t;
    }
    if (slot == nullptr) {
      times_.push_back(OpTime{ops[i].name, 0, 0, 0});
      slot = &times_.back();
    }
    ++slot->launches;
    slot->us += us[i];
    for (size_t t = 0; t < nt; ++t) slot->wait_us += waits[i * nt + t];
  }
}

std::vector<Program::OpTime> Program::take_profile() {
  std::vector<OpTime> out;
  out.swap(times_);
  return out;
}

}  // namespace specdec::cpu
