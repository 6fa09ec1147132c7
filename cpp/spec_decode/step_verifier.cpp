#include "spec_decode/step_verifier.h"

#include <algorithm>
#include <utility>

#include "common/errors.h"
#include "spec_decode/rejection.h"

namespace specdec::spec_decode {

StepVerifier::StepVerifier(std::shared_ptr<runner::ModelRunner> target, std::vector<int32_t> eog_ids,
                           int64_t max_model_len, std::shared_ptr<AdaptiveK> adaptive)
    : target_(std::move(target)), eog_ids_(std::move(eog_ids)), max_model_len_(max_model_len),
      adaptive_(std::move(adaptive)) {
  SPECDEC_CHECK(target_ != nullptr, "target", "None", "a loaded ModelRunner");
  std::sort(eog_ids_.begin(), eog_ids_.end());
}

VerifyResult StepVerifier::verify_one(const VerifyItem& item, const StepRows& so) const {
  const VerifyRequest& r = *item.request;
  static const Draft kNoDraft;
  const Draft& draft = item.draft ? *item.draft : kNoDraft;
  const int64_t k = static_cast<int64_t>(draft.tokens.size());
  const int64_t row0 = item.row_end - 1 - k;
  const int64_t num_rows = so.num_rows;
  SPECDEC_CHECK(row0 >= 0 && item.row_end <= num_rows, "row_end", item.row_end,
                str_cat("a row of the step's output with ", k + 1, " rows (last token + draft) up to it; it has ",
                        num_rows, " rows"));
  if (r.on_argmax) return verify_greedy(draft.tokens, so.argmax + row0);
  SPECDEC_CHECK(so.num_logit_rows >= item.row_end, "logits rows", so.num_logit_rows,
                str_cat(item.row_end, " or more: the step's logits (it ran without return_logits)"));
  SPECDEC_CHECK(r.params.greedy() || r.generator != nullptr, "generator", "None",
                "a SamplingGenerator for a sampled request");
  static const sampling::Generator kUnused(0);  // greedy verification draws nothing
  return verify_sampled(draft, so.logits + row0 * so.vocab_size, so.vocab_size, r.params,
                        r.generator ? *r.generator : kUnused, r.sequence->size());
}

void StepVerifier::keep_until_finish(VerifyRequest& r, VerifyOutcome& out, const StepRows& so,
                                     int64_t row0) const {
  size_t n = 0;
  while (n < out.tokens.size() && out.finish == Finish::kNone) {
    const int32_t t = out.tokens[n++];
    if (r.on_argmax) out.argmax_logprob += so.argmax_logprob[static_cast<size_t>(row0) + n - 1];
    if (r.append) r.sequence->append(t);
    const int64_t pending = r.append ? 0 : static_cast<int64_t>(n);  // kept, not yet appended
    if (!r.ignore_eos && std::binary_search(eog_ids_.begin(), eog_ids_.end(), t)) {
      out.finish = Finish::kEndOfGeneration;
    } else if (std::find(r.stop_token_ids.begin(), r.stop_token_ids.end(), t) != r.stop_token_ids.end()) {
      out.finish = Finish::kStopToken;
    } else if ((r.max_tokens >= 0 && r.sequence->num_output_tokens() + pending >= r.max_tokens) ||
               r.sequence->size() + pending >= max_model_len_) {
      out.finish = Finish::kLength;
    }
  }
  out.tokens.resize(n);
}

std::vector<VerifyResult> StepVerifier::decide(const std::vector<VerifyItem>& items,
                                               const StepRows& so) const {
  std::vector<VerifyResult> results;
  results.reserve(items.size());
  for (const VerifyItem& item : items) {
    SPECDEC_CHECK(item.request != nullptr && item.request->sequence != nullptr, "request", "None",
                  "a VerifyRequest with its sequence");
    SPECDEC_CHECK(item.num_computed >= 0 || item.draft == nullptr || item.draft->tokens.empty(), "draft",
                  item.draft ? item.draft->tokens.size() : 0, "none for the last chunk of a prefill");
    results.push_back(verify_one(item, so));
  }
  return results;
}

std::vector<VerifyOutcome> StepVerifier::commit(const std::vector<VerifyItem>& items,
                                                std::vector<VerifyResult> results, const StepRows& so) {
  SPECDEC_CHECK(results.size() == items.size(), "results", results.size(), str_cat(items.size(), " (one per item)"));
  std::vector<VerifyOutcome> outs(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const VerifyItem& item = items[i];
    VerifyRequest& r = *item.request;
    const int64_t k = item.draft ? static_cast<int64_t>(item.draft->tokens.size()) : 0;
    VerifyResult& v = results[i];
    VerifyOutcome& out = outs[i];
    out.num_accepted = v.num_accepted;
    if (k > 0) {
      if (adaptive_) adaptive_->observe_draft(r.sequence->request_id(), static_cast<int>(k), v.num_accepted);
      r.stats.observe_draft(static_cast<int>(k), v.num_accepted);
      stats_.observe_draft(static_cast<int>(k), v.num_accepted);
    }
    if (item.num_computed >= 0) {  // the cache holds the last token and every draft: keep the accepted
      out.num_computed = item.num_computed + 1 + v.num_accepted;
      if (v.num_accepted < k) target_->truncate(r.sequence->request_id(), out.num_computed);
    } else {
      out.num_computed = r.sequence->size();
    }
    out.tokens = std::move(v.tokens);
    keep_until_finish(r, out, so, item.row_end - 1 - k);
  }
  return outs;
}

}  // namespace specdec::spec_decode
