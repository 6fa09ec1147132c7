#include "runner/logits_head.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/errors.h"
#include "ops/elementwise.h"
#include "ops/rows.h"
#include "ops/sampling.h"
#include "quant/formats.h"
#include "quant/matmul.h"
#include "runner/blocks.h"

namespace specdec::runner {

namespace {

const model::GgufTensor& lm_head_tensor(const model::GgufFile& file, const model::ModelConfig& c) {
  return file.tensor(c.tied_embeddings ? "token_embd.weight" : "output.weight");
}

// The lm_head rows of `ids` (checked by the caller) as their own matrix: rows of a ggml block
// format are independent, so row j holds token ids[j]'s bytes as they are in the file.
quant::DeviceWeight logit_rows(device::Device& dev, const model::GgufFile& file, const model::ModelConfig& c,
                               const std::vector<int32_t>& ids, const std::string& what) {
  const model::GgufTensor& t = lm_head_tensor(file, c);
  const int64_t cols = t.dims.at(0);
  const int64_t rb = quant::row_bytes(t.type, cols);
  std::vector<uint8_t> bytes(ids.size() * static_cast<size_t>(rb));
  for (size_t j = 0; j < ids.size(); ++j) {
    std::memcpy(bytes.data() + j * static_cast<size_t>(rb), t.data + static_cast<int64_t>(ids[j]) * rb,
                static_cast<size_t>(rb));
  }
  return quant::upload_weight(dev, t.type, bytes.data(), bytes.size(), {cols, static_cast<int64_t>(ids.size())},
                              t.name + "[" + what + "]");
}

int64_t lm_head_rows(const model::GgufFile& file, const model::ModelConfig& c) {
  const model::GgufTensor& t = lm_head_tensor(file, c);
  return std::min<int64_t>(t.num_elements / t.dims.at(0), c.vocab_size);
}

}  // namespace

LogitsHead::LogitsHead(device::Device& dev, const model::GgufFile& file, const model::ModelConfig& config,
                       const RunnerOptions& options, ModelWeights& weights)
    : dev_(dev), file_(file), config_(config), logit_token_ids_(options.logit_token_ids),
      max_num_logits_(options.max_num_logits) {
  const auto& ids = logit_token_ids_;
  SPECDEC_CHECK(!config.is_dflash() || ids.empty(), "logit_token_ids", str_cat(ids.size(), " ids"),
               "none for a DFlash drafter (it uses the target's head)");
  if (ids.empty()) return;
  // the reduced lm_head replaces the whole one
  const int64_t vocab = lm_head_rows(file, config);
  for (size_t j = 0; j < ids.size(); ++j) {
    const int32_t lo = j == 0 ? 0 : ids[j - 1] + 1;
    SPECDEC_CHECK(ids[j] >= lo && ids[j] < vocab, str_cat("logit_token_ids[", j, "]"), ids[j],
                 str_cat("token ids in [0, ", vocab, "), strictly increasing (here in [", lo, ", ", vocab, "))"));
  }
  if (weights.output) weights.device_bytes -= weights.output->source_bytes();
  weights.output = logit_rows(dev_, file, config, ids, "logit_token_ids");
  weights.device_bytes += weights.output->source_bytes();
}

int64_t LogitsHead::num_columns() const {
  return logit_token_ids_.empty() ? config_.vocab_size
                                  : static_cast<int64_t>(logit_token_ids_.size() + extra_ids_.size());
}

int64_t LogitsHead::num_lm_head_rows() const { return lm_head_rows(file_, config_); }

void LogitsHead::set_extra_tokens(const std::vector<int32_t>& ids) {
  if (ids == extra_ids_) return;
  const auto& base = logit_token_ids_;
  SPECDEC_CHECK(!base.empty() || ids.empty(), "extra logit tokens", str_cat(ids.size(), " ids"),
               "none unless the runner has logit_token_ids (a reduced vocabulary)");
  SPECDEC_CHECK(static_cast<int64_t>(ids.size()) <= kMaxExtraTokens, "extra logit tokens",
               str_cat(ids.size(), " ids"), str_cat("at most ", kMaxExtraTokens));
  const int64_t vocab = lm_head_rows(file_, config_);
  for (size_t j = 0; j < ids.size(); ++j) {
    const int32_t lo = j == 0 ? 0 : ids[j - 1] + 1;
    SPECDEC_CHECK(ids[j] >= lo && ids[j] < vocab && !std::binary_search(base.begin(), base.end(), ids[j]),
                 str_cat("extra logit token [", j, "]"), ids[j],
                 str_cat("token ids in [0, ", vocab, "), strictly increasing, not in logit_token_ids"));
  }
  extra_ids_.clear();
  extra_head_.reset();
  if (ids.empty()) return;
  extra_head_ = logit_rows(dev_, file_, config_, ids, "extra logit tokens");
  if (static_cast<int64_t>(ids.size()) > extra_capacity_) {  // grows in powers of two
    int64_t cap = 256;
    while (cap < static_cast<int64_t>(ids.size())) cap *= 2;
    extra_logits_ = dev_.allocate(static_cast<size_t>(max_num_logits_ * cap) * 4);
    extra_capacity_ = cap;
  }
  extra_ids_ = ids;
}

void LogitsHead::compute(const quant::DeviceWeight& head, StepBuffers& s, int64_t num_tokens, int64_t num_rows,
                         bool return_logits, StepOutput& out) {
  const int64_t m = num_rows;
  const int64_t vocab = out.vocab_size;
  ops::gather_rows(dev_, s.h, s.rows, s.xs, num_tokens, m, config_.hidden_size);
  quant::clear_source(s.xq);  // s.xs holds this step's rows: quantised anew by the first head's matmul
  const int64_t base = vocab - static_cast<int64_t>(extra_ids_.size());  // the lm_head's columns
  reduce(head, s, m, s.logits, base, 0);
  const bool two = !extra_ids_.empty();
  if (two) reduce(*extra_head_, s, m, extra_logits_, vocab - base, 3 * m);
  // both parts' reductions come back in one transfer
  std::vector<float> reduced(static_cast<size_t>((two ? 6 : 3) * m));
  dev_.read(s.reduced, reduced.data(), reduced.size() * 4);
  pick(reduced, m, out);
  if (return_logits) read_logits(s, m, out);
}

void LogitsHead::reduce(const quant::DeviceWeight& w, StepBuffers& s, int64_t m,
                        device::Buffer& logits, int64_t n, int64_t at) {
  quant::matmul_reusing(dev_, w, s.xs, s.xq, m, logits);
  if (config_.final_logit_softcap > 0) {
    ops::softcap(dev_, logits, m * n, static_cast<float>(config_.final_logit_softcap));
  }
  const ops::Slice ids(s.reduced, at), lse(s.reduced, at + m), picked(s.reduced, at + 2 * m);
  ops::argmax(dev_, logits, ids, m, static_cast<int>(n));
  ops::logsumexp_rows(dev_, logits, lse, m, static_cast<int>(n));
  ops::gather_columns(dev_, logits, ids, picked, m, static_cast<int>(n));
}

int32_t LogitsHead::token(int32_t column, bool in_extra) const {
  if (in_extra) return extra_ids_[static_cast<size_t>(column)];
  return logit_token_ids_.empty() ? column : logit_token_ids_[static_cast<size_t>(column)];
}

void LogitsHead::pick(const std::vector<float>& reduced, int64_t m, StepOutput& out) const {
  const float* extra = extra_ids_.empty() ? nullptr : reduced.data() + 3 * m;
  out.argmax.resize(static_cast<size_t>(m));
  out.argmax_logprob.resize(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) {
    int32_t col;
    std::memcpy(&col, &reduced[static_cast<size_t>(i)], 4);
    int32_t id = token(col, false);
    float best = reduced[2 * m + i], lse = reduced[m + i];
    if (extra != nullptr) {  // the larger logit of the two parts (ties: the lower id)
      int32_t ecol;
      std::memcpy(&ecol, extra + i, 4);
      const int32_t eid = token(ecol, true);
      const float ev = extra[2 * m + i], else_lse = extra[m + i];
      if (ev > best || (ev == best && eid < id)) {
        best = ev;
        id = eid;
      }
      const float hi = std::max(lse, else_lse);
      lse = hi + static_cast<float>(std::log(std::exp(static_cast<double>(lse) - hi) +
                                             std::exp(static_cast<double>(else_lse) - hi)));
    }
    out.argmax[static_cast<size_t>(i)] = id;
    out.argmax_logprob[static_cast<size_t>(i)] = best - lse;
  }
}

void LogitsHead::read_logits(StepBuffers& s, int64_t m, StepOutput& out) {
  const int64_t vocab = out.vocab_size;
  out.logits.resize(static_cast<size_t>(m * vocab));
  if (extra_ids_.empty()) {
    dev_.read(s.logits, out.logits.data(), out.logits.size() * 4);
    return;
  }
  // [m, base] and [m, extra] -> rows of [base | extra]
  const int64_t base = vocab - static_cast<int64_t>(extra_ids_.size());
  std::vector<float> a(static_cast<size_t>(m * base)), b(static_cast<size_t>(m * (vocab - base)));
  dev_.read(s.logits, a.data(), a.size() * 4);
  dev_.read(extra_logits_, b.data(), b.size() * 4);
  for (int64_t i = 0; i < m; ++i) {
    std::copy_n(a.data() + i * base, base, out.logits.data() + i * vocab);
    std::copy_n(b.data() + i * (vocab - base), vocab - base, out.logits.data() + i * vocab + base);
  }
}

}  // namespace specdec::runner
