#include "cpu/program.h"

#include <chrono>
#include <stdexcept>
#include <utility>

#include "common/errors.h"

namespace specdec::cpu {

void Program::add(const char* name, int64_t items, int64_t grain, Body body) {
  SPECDEC_CHECK(items >= 0, "items", items, str_cat("must be >= 0 (op ", name, ")"));
  SPECDEC_CHECK(grain >= 1, "grain", grain, str_cat("must be >= 1 (op ", name, ")"));
  ops_.push_back(Op{name, items, grain, std::move(body)});
}

void Program::run(ThreadPool& pool) {
  std::vector<Op> ops;
  ops.swap(ops_);  // forgotten whatever happens
  if (ops.empty()) return;
  std::vector<double> us(profiling_ ? ops.size() : 0, 0.0);
  const bool timed = profiling_;
  pool.run([&](ThreadContext& ctx) {
    using Clock = std::chrono::steady_clock;
    auto t0 = Clock::now();
    for (size_t i = 0; i < ops.size(); ++i) {
      const Op& op = ops[i];
      const Chunk c = ctx.chunk(0, op.items, op.grain);
      if (c.begin < c.end) op.body(c.begin, c.end);
      if (i + 1 < ops.size()) ctx.barrier();  // the region's end waits for the last op
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
      times_.push_back(OpTime{ops[i].name, 0, 0});
      slot = &times_.back();
    }
    ++slot->launches;
    slot->us += us[i];
  }
}

std::vector<Program::OpTime> Program::take_profile() {
  std::vector<OpTime> out;
  out.swap(times_);
  return out;
}

}  // namespace specdec::cpu
