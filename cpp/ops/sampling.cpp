#include "ops/sampling.h"

#include <algorithm>

#include "common/errors.h"
#include "common/math.h"
#include "ops/impl.h"

namespace specdec::ops {
namespace {

void check_logits(Slice logits, int64_t rows, int vocab, const std::string& op) {
  check_at_least(rows, 0, op + ".rows");
  check_at_least(vocab, 1, op + ".vocab");
  check_slice(logits, checked_mul(rows, vocab, "rows * vocab"), op + ".logits");
}

}  // namespace

void argmax(device::Device& dev, Slice logits, Slice ids, int64_t rows, int vocab) {
  check_logits(logits, rows, vocab, "argmax");
  check_slice(ids, rows, "argmax.ids");
  switch (dev.kind()) {
    case device::Kind::kOpenCL: return ocl_argmax(dev, logits, ids, rows, vocab);
    case device::Kind::kCpu: return cpu_argmax(dev, logits, ids, rows, vocab);
  }
}

void top_k(device::Device& dev, Slice logits, Slice values, Slice ids, int64_t rows, int vocab,
           int k) {
  check_logits(logits, rows, vocab, "top_k");
  SPECDEC_CHECK(k >= 1 && k <= std::min(kMaxTopK, vocab), "top_k.k", k,
               str_cat("must be in [1, min(", kMaxTopK, ", vocab = ", vocab, ")]"));
  const int64_t n = checked_mul(rows, k, "top_k.rows * k");
  check_slice(values, n, "top_k.values");
  check_slice(ids, n, "top_k.ids");
  switch (dev.kind()) {
    case device::Kind::kOpenCL: return ocl_top_k(dev, logits, values, ids, rows, vocab, k);
    case device::Kind::kCpu: return cpu_top_k(dev, logits, values, ids, rows, vocab, k);
  }
}

void logsumexp_rows(device::Device& dev, Slice logits, Slice lse, int64_t rows, int vocab) {
  check_logits(logits, rows, vocab, "logsumexp_rows");
  check_slice(lse, rows, "logsumexp_rows.lse");
  switch (dev.kind()) {
    case device::Kind::kOpenCL: return ocl_logsumexp(dev, logits, lse, logits, rows, vocab, false);
    case device::Kind::kCpu: return cpu_logsumexp(dev, logits, lse, logits, rows, vocab, false);
  }
}

void log_softmax_rows(device::Device& dev, Slice logits, Slice out, Slice lse, int64_t rows,
                      int vocab) {
  check_logits(logits, rows, vocab, "log_softmax_rows");
  check_slice(out, checked_mul(rows, vocab, "rows * vocab"), "log_softmax_rows.out");
  check_slice(lse, rows, "log_softmax_rows.lse");
  switch (dev.kind()) {
    case device::Kind::kOpenCL: return ocl_logsumexp(dev, logits, lse, out, rows, vocab, true);
    case device::Kind::kCpu: return cpu_logsumexp(dev, logits, lse, out, rows, vocab, true);
  }
}

}  // namespace specdec::ops
