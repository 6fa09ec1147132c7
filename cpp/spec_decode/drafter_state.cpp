#include "spec_decode/drafter_state.h"

#include <algorithm>
#include <limits>

#include "common/errors.h"
#include "spec_decode/rejection.h"

namespace specdec::spec_decode {

runner::ModelRunner& require_runner(const std::shared_ptr<runner::ModelRunner>& r, const char* what) {
  SPECDEC_CHECK(r != nullptr, what, "None", "a loaded ModelRunner");
  return *r;
}

int64_t DrafterRequests::reconcile(const std::string& rid, const std::vector<int32_t>& context, int64_t max_keep) {
  std::vector<int32_t>& held = held_[rid];
  if (owns_ && !runner_.has_request(rid)) {  // new here: start from a cached prefix, if any
    const int64_t hit = runner_.claim_prefix(rid, context, max_keep);
    held.assign(context.begin(), context.begin() + hit);
    // the claimed blocks may have come off the free list (cached, unused): this call's
    // reservations count against what is free now
    if (hit > 0 && !free_.empty()) {
      free_ = runner_.num_free_blocks();
      for (size_t g = 0; g < free_.size(); ++g) {
        if (free_[g] < reserved_[g]) {  // they were reserved for others: compute it afresh
          runner_.unclaim_prefix(rid);
          held.clear();
          free_ = runner_.num_free_blocks();
          return 0;
        }
      }
    }
    return hit;
  }
  const int64_t cached = runner_.has_request(rid) ? runner_.num_cached_tokens(rid) : 0;
  if (static_cast<int64_t>(held.size()) > cached) held.resize(static_cast<size_t>(cached));  // rolled back elsewhere
  int64_t p = 0;
  const int64_t n = std::min<int64_t>({static_cast<int64_t>(held.size()), static_cast<int64_t>(context.size()), max_keep});
  while (p < n && held[static_cast<size_t>(p)] == context[static_cast<size_t>(p)]) ++p;
  if (runner_.has_request(rid) && p < cached) {
    if (p == 0 && owns_) {
      runner_.free(rid);
    } else {
      try {
        runner_.truncate(rid, p);
      } catch (const ConfigError&) {  // p ends inside a cached block another request shares:
        const int64_t bs = runner_.kv_config().groups.at(0).spec.block_size;  // keep its start
        p -= p % bs;
        if (p == 0 && owns_) runner_.free(rid);
        else runner_.truncate(rid, p);
      }
    }
  }
  held.resize(static_cast<size_t>(p));
  return p;
}

void DrafterRequests::begin() {
  free_ = runner_.num_free_blocks();
  reserved_.assign(free_.size(), 0);
}

bool DrafterRequests::reserve(const std::string& rid, int64_t num_computed, int64_t num_new, int64_t num_committed) {
  const std::vector<int64_t> need = runner_.num_blocks_needed(rid, num_computed, num_new, num_committed);
  for (size_t g = 0; g < need.size(); ++g) {
    if (need[g] + reserved_[g] > free_[g]) return false;
  }
  for (size_t g = 0; g < need.size(); ++g) reserved_[g] += need[g];
  return true;
}

void DrafterRequests::appended(const std::string& rid, const std::vector<int32_t>& tokens) {
  std::vector<int32_t>& held = held_[rid];
  held.insert(held.end(), tokens.begin(), tokens.end());
}

void DrafterRequests::truncate(const std::string& rid, int64_t length) {
  if (runner_.has_request(rid) && runner_.num_cached_tokens(rid) > length) runner_.truncate(rid, length);
  auto it = held_.find(rid);
  if (it != held_.end() && static_cast<int64_t>(it->second.size()) > length) it->second.resize(static_cast<size_t>(length));
}

void DrafterRequests::finish(const std::string& rid) {
  if (owns_ && runner_.has_request(rid)) runner_.free(rid);
  held_.erase(rid);
}

bool take_draft_token(Draft& d, const runner::StepOutput& so, int64_t row, int64_t vt, const ProposeRequest& r,
                      ColumnToken column_token, const void* column_ctx) {
  if (r.params.greedy()) {
    const int32_t t = so.argmax[static_cast<size_t>(row)];
    if (t < 0 || t >= vt) return false;
    d.tokens.push_back(t);
    return true;
  }
  SPECDEC_CHECK(r.generator != nullptr, "request generator", "None", "a random stream for a sampled request");
  const int64_t width = so.vocab_size;
  const float* src = so.logits.data() + row * width;
  std::vector<float> padded(static_cast<size_t>(vt), -std::numeric_limits<float>::infinity());
  if (column_token == nullptr) {
    std::copy(src, src + std::min(width, vt), padded.begin());
  } else {  // ids outside the drafter's columns keep probability 0: still lossless
    for (int64_t j = 0; j < width; ++j) {
      const int32_t id = column_token(column_ctx, j);
      if (id >= 0 && id < vt) padded[static_cast<size_t>(id)] = src[j];
    }
  }
  // the position this token takes if accepted: its random numbers are those the target's own
  // draw there uses (coupled with it)
  const int64_t position = r.sequence->size() + static_cast<int64_t>(d.tokens.size());
  if (r.generator->coupled()) {  // verified by matching the target's draw: q is not needed
    const auto probs = sampling::candidate_probs(padded.data(), vt, r.params);
    if (probs.empty()) return false;
    d.tokens.push_back(sampling::race(probs, *r.generator, position));
    return true;
  }
  const std::vector<double> q = dense_probs(padded.data(), vt, r.params);
  const int32_t t = sampling::race_dense(q, *r.generator, position);
  if (!(q[static_cast<size_t>(t)] > 0.0)) return false;
  d.vocab_size = vt;
  d.tokens.push_back(t);
  const size_t base = d.probs.size();
  d.probs.resize(base + static_cast<size_t>(vt));
  for (int64_t j = 0; j < vt; ++j) d.probs[base + static_cast<size_t>(j)] = static_cast<float>(q[static_cast<size_t>(j)]);
  return true;
}

}  // namespace specdec::spec_decode
