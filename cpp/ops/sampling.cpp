#include "ops/sampling.h"

#include <algorithm>
#include <cstdlib>

#include "common/errors.h"
#include "common/math.h"

namespace specdec::ops {
namespace {

constexpr int kTopKCandidates = 4096;  // CAP of kernels/ops_topk.cl: 32 KiB of local memory

void check_logits(Slice logits, int64_t rows, int vocab, const std::string& op) {
  check_at_least(rows, 0, op + ".rows");
  check_at_least(vocab, 1, op + ".vocab");
  check_slice(logits, checked_mul(rows, vocab, "rows * vocab"), op + ".logits");
}

void launch_logsumexp(ocl::Context& ctx, Slice logits, Slice lse, Slice out, int64_t rows,
                      int vocab, bool write_out) {
  ocl::Kernel k = ctx.kernel("ops_sampling", "logsumexp", ops_build_options(ctx));
  k.arg(0, *logits.buffer).arg(1, cl_long{logits.offset});
  k.arg(2, *lse.buffer).arg(3, cl_long{lse.offset});
  k.arg(4, *out.buffer).arg(5, cl_long{out.offset});
  k.arg(6, cl_int{vocab}).arg(7, cl_int{write_out ? 1 : 0});
  launch_rows(ctx, k, rows, reduction_local_size(ctx), 8);
}

}  // namespace

bool top_k_uses_heap(const ocl::Context& ctx) {
  if (const char* env = std::getenv("SPECDEC_OPS_TOPK")) return std::string(env) != "group";
  return reduction_local_size(ctx) == 1;
}

int top_k_local_size(const ocl::Context& ctx) {
  // NSUB = local * 16 subsets must be >= kMaxTopK and fit the candidate buffer.
  return std::clamp(std::max(reduction_local_size(ctx), 64), kMaxTopK / 16, kTopKCandidates / 16);
}

void argmax(ocl::Context& ctx, Slice logits, Slice ids, int64_t rows, int vocab) {
  check_logits(logits, rows, vocab, "argmax");
  check_slice(ids, rows, "argmax.ids");
  ocl::Kernel k = ctx.kernel("ops_sampling", "argmax", ops_build_options(ctx));
  k.arg(0, *logits.buffer).arg(1, cl_long{logits.offset});
  k.arg(2, *ids.buffer).arg(3, cl_long{ids.offset}).arg(4, cl_int{vocab});
  launch_rows(ctx, k, rows, reduction_local_size(ctx), 5);
}

void top_k(ocl::Context& ctx, Slice logits, Slice values, Slice ids, int64_t rows, int vocab,
           int k) {
  check_logits(logits, rows, vocab, "top_k");
  SPECDEC_CHECK(k >= 1 && k <= std::min(kMaxTopK, vocab), "top_k.k", k,
               str_cat("must be in [1, min(", kMaxTopK, ", vocab = ", vocab, ")]"));
  const int64_t n = checked_mul(rows, k, "top_k.rows * k");
  check_slice(values, n, "top_k.values");
  check_slice(ids, n, "top_k.ids");
  const bool heap = top_k_uses_heap(ctx);
  const int local = top_k_local_size(ctx);
  ocl::Kernel kern = ctx.kernel("ops_topk", heap ? "top_k_heap" : "top_k",
                                str_cat(ops_build_options(ctx, local), " -DCAP=", kTopKCandidates));
  kern.arg(0, *logits.buffer).arg(1, cl_long{logits.offset});
  kern.arg(2, *values.buffer).arg(3, cl_long{values.offset});
  kern.arg(4, *ids.buffer).arg(5, cl_long{ids.offset});
  kern.arg(6, cl_int{vocab}).arg(7, cl_int{k});
  launch_rows(ctx, kern, rows, heap ? 1 : local, 8);
}

void logsumexp_rows(ocl::Context& ctx, Slice logits, Slice lse, int64_t rows, int vocab) {
  check_logits(logits, rows, vocab, "logsumexp_rows");
  check_slice(lse, rows, "logsumexp_rows.lse");
  launch_logsumexp(ctx, logits, lse, logits, rows, vocab, false);
}

void log_softmax_rows(ocl::Context& ctx, Slice logits, Slice out, Slice lse, int64_t rows,
                      int vocab) {
  check_logits(logits, rows, vocab, "log_softmax_rows");
  check_slice(out, checked_mul(rows, vocab, "rows * vocab"), "log_softmax_rows.out");
  check_slice(lse, rows, "log_softmax_rows.lse");
  launch_logsumexp(ctx, logits, lse, out, rows, vocab, true);
}

}  // namespace specdec::ops
