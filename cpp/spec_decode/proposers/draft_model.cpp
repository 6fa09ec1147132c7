#include "spec_decode/proposers/draft_model.h"

#include <algorithm>
#include <limits>

#include "common/errors.h"
#include "spec_decode/rejection.h"

namespace specdec::spec_decode {

void check_vocab_compatible(const tokenizer::Tokenizer& t, const tokenizer::Tokenizer& d) {
  const std::string allowed = "a drafter with the target's vocabulary (llama.cpp's rule: same "
                              "tokenizer, special tokens, and token texts)";
  SPECDEC_CHECK(t.kind() == d.kind(), "drafter tokenizer", tokenizer::tokenizer_kind_name(d.kind()),
               str_cat(allowed, "; the target's is ", tokenizer::tokenizer_kind_name(t.kind())));
  SPECDEC_CHECK(t.bos_id() == d.bos_id() && t.add_bos() == d.add_bos(), "drafter BOS",
               str_cat(d.bos_id(), d.add_bos() ? " (added)" : " (not added)"),
               str_cat(allowed, "; the target's is ", t.bos_id(), t.add_bos() ? " (added)" : " (not added)"));
  SPECDEC_CHECK(t.eos_id() == d.eos_id() && t.add_eos() == d.add_eos(), "drafter EOS", d.eos_id(),
               str_cat(allowed, "; the target's is ", t.eos_id()));
  const int64_t diff = std::abs(static_cast<int64_t>(t.vocab_size()) - d.vocab_size());
  SPECDEC_CHECK(diff <= 128, "drafter vocab_size", d.vocab_size(),
               str_cat("within 128 of the target's ", t.vocab_size()));
  const int32_t n = std::min(t.vocab_size(), d.vocab_size());
  for (int32_t i = 5; i < n; ++i) {
    if (t.token_text(i) != d.token_text(i)) {
      throw ConfigError(str_cat("drafter token ", i), d.token_text(i),
                        str_cat(allowed, "; the target's token ", i, " is '", t.token_text(i), "'"));
    }
  }
}

DraftModelProposer::DraftModelProposer(std::shared_ptr<runner::ModelRunner> drafter, int64_t target_vocab)
    : drafter_(std::move(drafter)), target_vocab_(target_vocab), cache_(require_runner(drafter_, "drafter"), true) {
  SPECDEC_CHECK(target_vocab > 0, "target_vocab_size", target_vocab, "> 0");
  const auto& base = drafter_->options().logit_token_ids;
  if (!base.empty()) {
    in_base_.assign(static_cast<size_t>(drafter_->num_lm_head_rows()), false);
    for (int32_t id : base) in_base_[static_cast<size_t>(id)] = true;
    uses_.assign(in_base_.size(), 0);
    drafter_->set_extra_logit_tokens({});
  }
}

void DraftModelProposer::track_context(State& st, const std::vector<int32_t>& context) {
  if (in_base_.empty()) return;
  for (; st.scanned < context.size(); ++st.scanned) {
    const int32_t t = context[st.scanned];
    if (t < 0 || t >= static_cast<int32_t>(in_base_.size()) || in_base_[static_cast<size_t>(t)]) continue;
    if (st.extra.contains(t)) continue;
    if (uses_[static_cast<size_t>(t)] == 0) {
      if (num_extra_ >= runner::ModelRunner::kMaxExtraLogitTokens) continue;  // full: not drafted
      ++num_extra_;
      extra_dirty_ = true;
    }
    ++uses_[static_cast<size_t>(t)];
    st.extra.insert(t);
  }
}

void DraftModelProposer::sync_extra_tokens() {
  if (in_base_.empty()) return;
  if (extra_dirty_) {
    std::vector<int32_t> ids;
    for (size_t t = 0; t < uses_.size(); ++t) {
      if (uses_[t] > 0) ids.push_back(static_cast<int32_t>(t));
    }
    drafter_->set_extra_logit_tokens(ids);  // ConfigError: nothing changed
    extra_ = std::move(ids);
    extra_dirty_ = false;
  } else {
    // the runner may be shared: set ours again (free when it already holds them)
    drafter_->set_extra_logit_tokens(extra_);
  }
}

int32_t DraftModelProposer::column_token(int64_t column) const {
  const auto& base = drafter_->options().logit_token_ids;
  if (base.empty()) return static_cast<int32_t>(column);
  const auto n = static_cast<int64_t>(base.size());
  return column < n ? base[static_cast<size_t>(column)] : extra_[static_cast<size_t>(column - n)];
}

// The requests of this call that need drafter steps (the others get their last draft again or
// none); each one's drafter cache reconciled with its context and its blocks reserved.
std::vector<DraftModelProposer::Work> DraftModelProposer::plan(const std::vector<ProposeRequest>& requests,
                                                              std::vector<Draft>& out) {
  runner::ModelRunner& dr = *drafter_;
  const auto& opts = dr.options();
  std::vector<Work> work;
  const size_t max_work = static_cast<size_t>(std::min(opts.max_num_logits, opts.max_num_batched_tokens));
  cache_.begin();
  for (size_t i = 0; i < requests.size(); ++i) {
    const ProposeRequest& r = requests[i];
    const std::string& rid = r.sequence->request_id();
    const auto& ctx = r.sequence->tokens();
    const int64_t len = static_cast<int64_t>(ctx.size());
    const int k = static_cast<int>(std::min<int64_t>(r.num_speculative_tokens, dr.max_model_len() - len + 1));
    if (k <= 0 || len == 0) continue;
    State& st = states_[rid];
    if (st.last_context == len) {  // not verified since: the same draft is still a valid one
      out[i] = st.last_draft;
      if (static_cast<int>(out[i].tokens.size()) > k) {
        out[i].tokens.resize(static_cast<size_t>(k));
        if (out[i].has_probs()) out[i].probs.resize(static_cast<size_t>(k * target_vocab_));
      }
      continue;
    }
    if (work.size() >= max_work) continue;
    // at least one new token gives the first draft's logits
    const int64_t p = cache_.reconcile(rid, ctx, len - 1);
    st.scanned = std::min(st.scanned, static_cast<size_t>(p));  // a changed context: look again
    st.last_context = -1;
    // no draft when its blocks do not fit: the target still decodes, blocks come back
    if (!cache_.reserve(rid, p, len - p + k - 1)) continue;
    work.push_back({i, &r, &ctx, p, k, !r.params.greedy()});
  }
  return work;
}

int32_t DraftModelProposer::column_of(const void* self, int64_t column) {
  return static_cast<const DraftModelProposer*>(self)->column_token(column);
}

bool DraftModelProposer::take(const Work& w, const runner::StepOutput& so, int64_t row, Draft& d) const {
  const bool reduced = !drafter_->options().logit_token_ids.empty();
  if (reduced && w.sample) {
    SPECDEC_CHECK(so.vocab_size == static_cast<int64_t>(drafter_->options().logit_token_ids.size() + extra_.size()),
                 "drafter logit columns", so.vocab_size,
                 "the reduced vocabulary and the extra tokens this proposer set (a runner shared while drafting?)");
  }
  return take_draft_token(d, so, row, target_vocab_, *w.request, reduced ? &column_of : nullptr, this);
}

// Steps over the tokens each request's drafter cache has not computed (a new prompt, the tokens
// accepted since), chunked to the drafter's limits; the last one's logits give the first draft.
void DraftModelProposer::catch_up(std::vector<Work>& work, std::vector<Draft>& out) {
  runner::ModelRunner& dr = *drafter_;
  std::vector<int64_t> pos(work.size());
  for (size_t j = 0; j < work.size(); ++j) pos[j] = work[j].computed;
  bool any_sample = false;
  for (const Work& w : work) any_sample = any_sample || w.sample;
  for (;;) {
    std::vector<runner::StepRequest> batch;
    std::vector<size_t> owners;
    int64_t budget = dr.options().max_num_batched_tokens;
    for (size_t j = 0; j < work.size() && budget > 0; ++j) {
      const int64_t len = static_cast<int64_t>(work[j].context->size());
      if (pos[j] >= len) continue;
      const int64_t n = std::min(budget, len - pos[j]);
      runner::StepRequest s;
      s.request_id = work[j].request->sequence->request_id();
      s.tokens.assign(work[j].context->begin() + pos[j], work[j].context->begin() + pos[j] + n);
      s.num_computed_tokens = pos[j];
      s.num_logits = pos[j] + n == len ? 1 : 0;
      batch.push_back(std::move(s));
      owners.push_back(j);
      budget -= n;
    }
    if (batch.empty()) break;
    const runner::StepOutput so = dr.step(batch, {}, any_sample);
    ++num_steps_;
    for (size_t b = 0; b < batch.size(); ++b) {
      const size_t j = owners[b];
      pos[j] += static_cast<int64_t>(batch[b].tokens.size());
      num_tokens_ += static_cast<int64_t>(batch[b].tokens.size());
      cache_.appended(batch[b].request_id, batch[b].tokens);
      if (batch[b].num_logits == 1 && !take(work[j], so, so.logits_start[b], out[work[j].index])) work[j].k = 0;
    }
  }
}

// k - 1 single-token steps over every request still drafting. Draft tokens are uncommitted: the
// steps pass the accepted length as num_committed_tokens.
void DraftModelProposer::draft_steps(const std::vector<Work>& work, std::vector<Draft>& out) {
  runner::ModelRunner& dr = *drafter_;
  for (int i = 1;; ++i) {
    std::vector<runner::StepRequest> batch;
    std::vector<size_t> owners;
    bool sample = false;
    for (size_t j = 0; j < work.size(); ++j) {
      const Work& w = work[j];
      const Draft& d = out[w.index];
      if (i >= w.k || static_cast<int>(d.tokens.size()) != i) continue;
      const int64_t len = static_cast<int64_t>(w.context->size());
      runner::StepRequest s;
      s.request_id = w.request->sequence->request_id();
      s.tokens = {d.tokens.back()};
      s.num_computed_tokens = len + i - 1;
      s.num_logits = 1;
      s.num_committed_tokens = len;
      batch.push_back(std::move(s));
      owners.push_back(j);
      sample = sample || w.sample;
    }
    if (batch.empty()) break;
    const runner::StepOutput so = dr.step(batch, {}, sample);
    ++num_steps_;
    num_tokens_ += static_cast<int64_t>(batch.size());
    for (size_t b = 0; b < batch.size(); ++b) {
      const Work& w = work[owners[b]];
      cache_.appended(batch[b].request_id, batch[b].tokens[0]);
      take(w, so, so.logits_start[b], out[w.index]);
    }
  }
}

std::vector<Draft> DraftModelProposer::propose(const std::vector<ProposeRequest>& requests) {
  std::vector<Draft> out(requests.size());
  std::vector<Work> work = plan(requests, out);
  if (work.empty()) return out;
  for (const Work& w : work) track_context(states_[w.request->sequence->request_id()], *w.context);
  sync_extra_tokens();
  catch_up(work, out);
  draft_steps(work, out);
  for (const Work& w : work) {
    State& st = states_[w.request->sequence->request_id()];
    st.last_context = static_cast<int64_t>(w.context->size());
    st.last_draft = out[w.index];
  }
  return out;
}

void DraftModelProposer::finish(const Sequence& sequence) {
  const std::string& rid = sequence.request_id();
  cache_.finish(rid);
  const auto it = states_.find(rid);
  if (it != states_.end()) {
    for (int32_t t : it->second.extra) {
      if (--uses_[static_cast<size_t>(t)] == 0) {
        --num_extra_;
        extra_dirty_ = true;
      }
    }
  }
  states_.erase(rid);
}

}  // namespace specdec::spec_decode
