#include "spec_decode/proposers/layer_skip.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

#include "common/errors.h"

namespace specdec::spec_decode {
namespace {

constexpr double kDecay = 0.95;      // acceptance: the last ~20 drafts of a candidate
constexpr int kExplore = 3;          // drafts seen per candidate before choosing
constexpr int64_t kRetryEvery = 16;  // then every 16th call tries the least-tried candidate
// Candidates for auto: half and three quarters of the depth, and 3, 2 and 1 layers short of it
// (measured on the catalog models without any early-exit training, only the last few layers'
// exits agree with the whole model often: bench/results/issue22/layer_skip_sweep.json)
const double kFractions[] = {0.5, 0.75};
const int kShort[] = {3, 2, 1};

}  // namespace

LayerSkipProposer::LayerSkipProposer(std::shared_ptr<runner::ModelRunner> target, int exit_layer)
    : target_(std::move(target)), cache_(require_runner(target_, "target"), false) {
  const int n = target_->config().num_layers;
  SPECDEC_CHECK(n >= 2, "target num_layers", n, "at least 2 (layer_skip drafts with fewer layers than the target)");
  SPECDEC_CHECK(exit_layer >= 0 && exit_layer < n, "speculative_config.exit_layer", exit_layer,
               str_cat("'auto' or an integer in [1, ", n - 1, "] (the target has ", n, " layers)"));
  auto_ = exit_layer == 0;
  if (auto_) {
    std::set<int> picks;
    for (double f : kFractions) picks.insert(std::clamp(static_cast<int>(std::lround(f * n)), 1, n - 1));
    for (int s : kShort) picks.insert(std::clamp(n - s, 1, n - 1));
    candidates_.assign(picks.begin(), picks.end());
  } else {
    candidates_ = {exit_layer};
  }
  for (int l : candidates_) stats_.push_back({l, 0, {}, 0.0});
}

size_t LayerSkipProposer::best_candidate() const {
  size_t best = 0;
  double best_rate = -1.0;
  for (size_t i = 0; i < stats_.size(); ++i) {
    const double r = rate(stats_[i], last_k_);
    if (r > best_rate) {
      best_rate = r;
      best = i;
    }
  }
  return best;
}

int LayerSkipProposer::exit_layer() const { return stats_[best_candidate()].exit; }

// The time of one step through the first L layers, a + b L, fitted by least squares over the
// measured candidates (each candidate's EMA), so that one noisy measurement does not decide; one
// candidate measured: proportional to depth. 0 when nothing is measured.
double LayerSkipProposer::step_seconds(int layers) const {
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const Candidate& c : stats_) {
    if (c.step_seconds <= 0) continue;
    n += 1;
    sx += c.exit;
    sy += c.step_seconds;
    sxx += static_cast<double>(c.exit) * c.exit;
    sxy += c.exit * c.step_seconds;
  }
  if (n == 0) return 0.0;
  const double den = n * sxx - sx * sx;
  double a = 0, b = 0;
  if (n >= 2 && den > 0) {
    b = std::max(0.0, (n * sxy - sx * sy) / den);
    a = (sy - b * sx) / n;
  }
  if (n < 2 || den <= 0 || a < 0) {  // through the origin: t proportional to depth
    a = 0;
    b = sy / sx;
  }
  return a + b * layers;
}

double LayerSkipProposer::rate(const Candidate& c, int k) const {
  if (c.step_seconds <= 0) return 0.0;
  double e = 1.0, p = 1.0;
  for (int i = 0; i < k; ++i) {
    p *= (c.counts.accepted_at(i) + 1.0) / (c.counts.tried_at(i) + 2.0);
    e += p;
  }
  return e / (k * step_seconds(c.exit) + step_seconds(target_->config().num_layers));
}

// What the request's last draft got: the draft tokens that match the tokens the request holds now
// at the same positions (the target's own choices; for greedy requests exactly the accepted ones,
// and for a draft the engine did not verify, what it would have got). Positions past the tokens
// known so far are not counted.
void LayerSkipProposer::observe(State& st, const std::vector<int32_t>& context) {
  const int64_t len = static_cast<int64_t>(context.size());
  if (st.context < 0 || st.draft.empty() || len <= st.context || st.candidate >= stats_.size()) return;
  size_t known = 0;
  const size_t matched = matched_prefix(st.draft, context, static_cast<size_t>(st.context), known);
  Candidate& c = stats_[st.candidate];
  c.counts.add(std::min(known, matched + 1), matched, kDecay);
  ++c.drafts;
  st.draft.clear();
  st.context = -1;
}

size_t LayerSkipProposer::choose() {
  if (stats_.size() == 1) return 0;
  for (size_t i = 0; i < stats_.size(); ++i) {
    if (stats_[i].drafts < kExplore || stats_[i].step_seconds <= 0) return i;
  }
  if (calls_ % kRetryEvery == 0) {  // look again at the least-tried candidate
    size_t least = 0;
    for (size_t i = 1; i < stats_.size(); ++i) {
      if (stats_[i].drafts < stats_[least].drafts) least = i;
    }
    return least;
  }
  return best_candidate();
}

namespace {

struct Work {
  size_t index;
  const ProposeRequest* request;
  int64_t len;
  int k;
};

}  // namespace

std::vector<Draft> LayerSkipProposer::propose(const std::vector<ProposeRequest>& requests) {
  std::vector<Draft> out(requests.size());
  runner::ModelRunner& tr = *target_;
  const int64_t vt = tr.config().vocab_size;
  const auto& opts = tr.options();
  cache_.begin();
  std::vector<Work> work;
  int max_k = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const ProposeRequest& r = requests[i];
    const std::string& rid = r.sequence->request_id();
    const auto& ctx = r.sequence->tokens();
    const int64_t len = static_cast<int64_t>(ctx.size());
    State& st = states_[rid];
    observe(st, ctx);
    // the drafts run through positions len - 1 .. len + k - 2 of the target's cache
    const int k = static_cast<int>(std::min<int64_t>(r.num_speculative_tokens, tr.max_model_len() - len + 1));
    if (k <= 0 || len == 0 || static_cast<int64_t>(work.size()) >= opts.max_num_logits) continue;
    if (!tr.has_request(rid) || tr.num_cached_tokens(rid) != len - 1) continue;  // not decoding
    if (!cache_.reserve(rid, len - 1, k, len - 1)) continue;  // no draft this step; the target still decodes
    work.push_back({i, &r, len, k});
    max_k = std::max(max_k, k);
  }
  if (work.empty()) return out;
  ++calls_;
  last_k_ = max_k;
  const size_t cand = choose();
  const int exit = stats_[cand].exit;

  std::vector<bool> cached(work.size(), false);  // the request holds draft positions to roll back
  double seconds = 0.0;
  int64_t steps = 0;
  try {
    for (int i = 0;; ++i) {
      std::vector<runner::StepRequest> batch;
      std::vector<size_t> owners;
      bool sample = false;
      for (size_t j = 0; j < work.size(); ++j) {
        const Work& w = work[j];
        const Draft& d = out[w.index];
        if (i >= w.k || static_cast<int>(d.tokens.size()) != i) continue;
        runner::StepRequest s;
        s.request_id = w.request->sequence->request_id();
        s.tokens = {i == 0 ? w.request->sequence->tokens().back() : d.tokens.back()};
        s.num_computed_tokens = w.len - 1 + i;
        s.num_logits = 1;
        s.num_committed_tokens = w.len - 1;
        batch.push_back(std::move(s));
        owners.push_back(j);
        sample = sample || !w.request->params.greedy();
      }
      if (batch.empty()) break;
      const auto t0 = std::chrono::steady_clock::now();
      const runner::StepOutput so = tr.step(batch, {}, sample, exit);
      seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ++steps;
      ++num_steps_;
      for (size_t b = 0; b < batch.size(); ++b) {
        cached[owners[b]] = true;
        take_draft_token(out[work[owners[b]].index], so, so.logits_start[b], vt, *work[owners[b]].request);
      }
    }
  } catch (...) {
    for (size_t j = 0; j < work.size(); ++j) {
      if (cached[j]) cache_.truncate(work[j].request->sequence->request_id(), work[j].len - 1);
    }
    throw;
  }
  // the verification rewrites these positions through every layer
  for (size_t j = 0; j < work.size(); ++j) {
    if (cached[j]) cache_.truncate(work[j].request->sequence->request_id(), work[j].len - 1);
  }
  Candidate& c = stats_[cand];
  const double per_step = seconds / static_cast<double>(std::max<int64_t>(steps, 1));
  c.step_seconds = c.step_seconds <= 0 ? per_step : 0.7 * c.step_seconds + 0.3 * std::min(per_step, 2 * c.step_seconds);
  for (const Work& w : work) {
    State& st = states_[w.request->sequence->request_id()];
    st.context = w.len;
    st.draft = out[w.index].tokens;
    st.candidate = cand;
  }
  return out;
}

void LayerSkipProposer::finish(const Sequence& sequence) {
  states_.erase(sequence.request_id());
  cache_.finish(sequence.request_id());  // the target's request: only the mirror goes
}

std::vector<LayerSkipProposer::CandidateStats> LayerSkipProposer::stats() const {
  std::vector<CandidateStats> out;
  for (const Candidate& c : stats_) {
    CandidateStats s;
    s.exit_layer = c.exit;
    s.drafts = c.drafts;
    for (size_t i = 0; i < c.counts.tried.size(); ++i) {
      s.acceptance.push_back((c.counts.accepted[i] + 1.0) / (c.counts.tried[i] + 2.0));
    }
    s.step_seconds = c.step_seconds;
    s.expected_tokens_per_second = rate(c, last_k_);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace specdec::spec_decode
