#include "runner/warm_up.h"

#include <algorithm>
#include <vector>

#include "runner/model_runner.h"

namespace specdec::runner {

void WarmUp::run() {
  ModelRunner& r = runner_;
  // decode (one activation row per matmul), verify (up to 16 rows), a prefill chunk (more than
  // 16 rows, as long as a step may be): every matmul variant
  const int64_t chunk = std::min<int64_t>({64, r.options_.max_num_batched_tokens, r.max_model_len()});
  for (int64_t n : {int64_t{1}, int64_t{2}, chunk}) step(0, n);
  // a decode far enough into the context that split-KV attention splits and merges (OCL_FLASH
  // and OCL_MLA split every 256 keys by default): at position 1024, or, when the free KV blocks
  // do not hold a request that long (a warm-up while other requests run), at the latest of 768,
  // 512, 384, 320 and 256 that fits. A request that passes a split must fit at 256 too, so the
  // merge kernel is not built inside one. (A split size changed by SPECDEC_FLASH_SPLIT_KEYS or
  // rounded up to blocks of 48 or more may need a later position than the last one tried.)
  int64_t last = -1;
  for (int64_t at : {int64_t{1024}, int64_t{768}, int64_t{512}, int64_t{384}, int64_t{320}, int64_t{256}}) {
    at = std::min<int64_t>(r.max_model_len() - 1, at);
    if (at == last) continue;  // short contexts: one try per position
    last = at;
    if (step(at, 1)) break;
  }
  // a DFlash drafter: its context path (fc, the K/V projections and writes) at the same shapes
  if (r.config_.is_dflash() && r.dflash_.target() != nullptr) {
    for (int64_t n : {int64_t{1}, int64_t{2}, chunk}) {
      if (n <= r.max_model_len()) write_context(n);
    }
  }
}

bool WarmUp::step(int64_t computed, int64_t n) {
  ModelRunner& r = runner_;
  kv::KvCacheManager& manager = *r.manager_;
  if (n < 1 || computed + n > r.max_model_len() || n > r.options_.max_num_batched_tokens) return false;
  // slots in prefill-sized steps, as a request gets them: each step frees the blocks that fell
  // out of a sliding window or chunk, so the request holds what a real one at `computed` holds
  bool ok = true;
  for (int64_t c = 0; ok && c < computed;) {
    const int64_t size = std::min(r.options_.max_num_batched_tokens, computed - c);
    ok = manager.allocate_slots(id_, c, size).ok;
    c += size;
  }
  if (!ok || !manager.allocate_slots(id_, computed, n).ok) {
    if (manager.has_request(id_)) manager.free(id_);
    return false;
  }
  StepRequest req;
  req.request_id = id_;
  req.tokens.assign(static_cast<size_t>(n), 0);
  req.num_computed_tokens = computed;
  // logit rows: up to 17, past the 16-row matmul variant (more would only fill the logits buffer:
  // 600 KB of resident memory a row on a 151,936-token vocabulary)
  req.num_logits = static_cast<int>(std::min<int64_t>({n, int64_t{17}, r.options_.max_num_logits}));
  ModelRunner::StepPlan plan;
  plan.sched.push_back({id_, computed, n});
  try {
    r.plan_inputs({req}, plan);
    StepOutput out;
    out.vocab_size = r.logits_head_.num_columns();
    r.run_layers(plan, {}, out, r.config_.num_layers);
    r.compute_logits(plan, false, out);
  } catch (...) {
    manager.free(id_);
    throw;
  }
  manager.free(id_);
  return true;
}

void WarmUp::write_context(int64_t n) {
  ModelRunner& r = runner_;
  const int64_t width = static_cast<int64_t>(r.config_.dflash_target_layers.size()) * r.config_.hidden_size;
  const std::vector<float> zeros(static_cast<size_t>(n * width), 0.0f);
  const device::Buffer hidden = r.dev_->upload(zeros.data(), zeros.size() * 4, device::Lifetime::kStep);
  r.write_context_locked({{id_, 0, n, 0, {}}}, hidden, n);
  r.requests_.drop(id_);
}

}  // namespace specdec::runner
