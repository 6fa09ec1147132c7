#include "spec_decode/proposers/dflash.h"

#include <algorithm>

#include "common/errors.h"

namespace specdec::spec_decode {
DFlashProposer::DFlashProposer(std::shared_ptr<runner::ModelRunner> target, std::shared_ptr<runner::ModelRunner> drafter)
    : target_(std::move(target)), drafter_(std::move(drafter)), cache_(require_runner(drafter_, "drafter"), true) {
  require_runner(target_, "target");
  SPECDEC_CHECK(drafter_->config().is_dflash(), "speculative_config.model", drafter_->config().name,
               "a DFlash drafter (a directory with config.json holding dflash_config, and model.safetensors)");
  SPECDEC_CHECK(drafter_->config().dflash_block_size >= 2, "dflash_config.block_size",
               drafter_->config().dflash_block_size, ">= 2 (one token and at least one mask)");
  drafter_->set_dflash_target(target_);
  std::weak_ptr<runner::ModelRunner> weak = drafter_;
  sink_token_ =
      target_->set_hidden_sink(drafter_->config().dflash_target_layers,
                               [weak](const std::vector<runner::ModelRunner::ContextRows>& rows,
                                      const device::Buffer& hidden, int64_t n) {
                                 if (auto d = weak.lock()) d->write_context(rows, hidden, n);
                               });
}

DFlashProposer::~DFlashProposer() {
  try {
    target_->clear_hidden_sink(sink_token_);
  } catch (...) {  // a destructor never throws
  }
}

std::vector<Draft> DFlashProposer::propose(const std::vector<ProposeRequest>& requests) {
  std::vector<Draft> out(requests.size());
  runner::ModelRunner& dr = *drafter_;
  const int64_t vt = target_->config().vocab_size;
  const int32_t mask = dr.config().dflash_mask_token_id;
  struct Work {
    size_t index;
    int64_t len;
    int k;
  };
  std::vector<Work> work;
  std::vector<runner::StepRequest> batch;
  int64_t logits = 0, tokens = 0;
  bool sample = false;
  cache_.begin();
  for (size_t i = 0; i < requests.size(); ++i) {
    const ProposeRequest& r = requests[i];
    const std::string& rid = r.sequence->request_id();
    const auto& ctx = r.sequence->tokens();
    const int64_t len = static_cast<int64_t>(ctx.size());
    const int k = static_cast<int>(std::min<int64_t>({r.num_speculative_tokens, max_draft_tokens(),
                                                      dr.max_model_len() - len}));
    if (k <= 0 || len == 0) continue;
    // the target's steps wrote the context of positions 0 .. len - 2 (the last token is new)
    const int64_t have = dr.has_request(rid) ? dr.num_cached_tokens(rid) : 0;
    if (have < len - 1) continue;  // context missing (dropped for KV space): no draft
    if (logits + k > dr.options().max_num_logits || tokens + 1 + k > dr.options().max_num_batched_tokens) continue;
    cache_.truncate(rid, len - 1);  // rows of rejected drafts
    if (!cache_.reserve(rid, len - 1, 1 + k, len - 1)) continue;
    runner::StepRequest s;
    s.request_id = rid;
    s.tokens.assign(static_cast<size_t>(1 + k), mask);
    s.tokens[0] = ctx.back();
    s.num_computed_tokens = len - 1;
    s.num_logits = k;
    s.num_committed_tokens = len - 1;
    batch.push_back(std::move(s));
    work.push_back({i, len, k});
    logits += k;
    tokens += 1 + k;
    sample = sample || !r.params.greedy();
  }
  if (work.empty()) return out;
  runner::StepOutput so;
  try {
    so = dr.step(batch, {}, sample);
  } catch (...) {
    for (const Work& w : work) cache_.truncate(requests[w.index].sequence->request_id(), w.len - 1);
    throw;
  }
  ++num_steps_;
  for (size_t j = 0; j < work.size(); ++j) {
    const Work& w = work[j];
    const ProposeRequest& r = requests[w.index];
    for (int64_t row = so.logits_start[j]; row < so.logits_start[j + 1]; ++row) {
      if (!take_draft_token(out[w.index], so, row, vt, r)) break;
    }
    cache_.truncate(r.sequence->request_id(), w.len - 1);  // the block's own K/V
  }
  return out;
}

void DFlashProposer::finish(const Sequence& sequence) { cache_.finish(sequence.request_id()); }

}  // namespace specdec::spec_decode
