#include "spec_decode/adaptive.h"

#include <algorithm>
#include <cmath>

#include "common/errors.h"

namespace specdec::spec_decode {
namespace {

constexpr double kRequestDecay = 0.8;  // a request's window: the last ~5 drafts
constexpr double kPoolDecay = 0.98;    // the pool's: the last ~50 drafts of all requests
constexpr double kRequestPrior = 4.0;  // the pool's estimate counts as this many drafts
constexpr int kMaxProbeAfter = 256;
// Speculation must beat plain decoding by this factor on the estimates to be turned on, and by the
// second to stay on: the estimates are noisy (a few drafts' acceptance), and a draft model turned
// on near break-even lost more than it gained (draft_model adaptive at 0.89x plain on a chat
// prompt, issue 35's fourth stop).
constexpr double kGainToTurnOn = 1.10;
constexpr double kGainToStayOn = 1.03;
// A request explores (drafts whatever the estimates say) only while nothing is known about the
// proposer's acceptance, and then with at most this many tokens: a draft model's exploration at
// k = 6 cost two 6-token drafts and two 7-row verifies on a chat prompt whose drafts did not pay,
// 0.86x plain decoding over a 128-token answer (issue 35's ninth stop). Longer drafts follow from
// the estimates, unseen positions taking the acceptance of the last position seen (q()).
constexpr int kExploreK = 2;
// A probe's expected loss must fit in this share of the plain steps since the last probe: a draft
// model's catch-up on the tokens it missed cost ~6 % of their plain steps (the 0.5B drafter behind
// the 1.5B on Zen 3), so probing it every 8, 16, 32 ... steps cost a short answer 5-10 %.
constexpr double kProbeBudget = 0.03;
constexpr int kGrowAfter = 2;  // drafts accepted whole in a row before trying one token more

}  // namespace

AdaptiveK::AdaptiveK(int max_k) : max_k_(max_k) {
  SPECDEC_CHECK(max_k >= 1 && max_k <= 64, "num_speculative_tokens", max_k, "an integer in [1, 64]");
  pool_.tried.assign(max_k, 0.0);
  pool_.accepted.assign(max_k, 0.0);
}

void AdaptiveK::observe_draft(const std::string& request_id, int drafted, int accepted) {
  if (drafted <= 0) return;
  accepted = std::clamp(accepted, 0, drafted);
  Request& r = requests_[request_id];
  if (r.counts.tried.empty()) {
    r.counts.tried.assign(max_k_, 0.0);
    r.counts.accepted.assign(max_k_, 0.0);
  }
  // position i was reached when every earlier one was accepted
  const size_t reached = static_cast<size_t>(std::min({drafted, accepted + 1, max_k_}));
  r.counts.add(reached, static_cast<size_t>(accepted), kRequestDecay);
  pool_.add(reached, static_cast<size_t>(accepted), kPoolDecay);
  ++r.drafts;
  r.full_run = accepted == drafted ? r.full_run + 1 : 0;
  r.last_drafted = drafted;
}

namespace {

// A first sample may include building kernels for a new shape: a much faster one replaces it;
// otherwise an EMA with outliers (another process, a page fault) clipped at twice the estimate.
void update_cost(std::vector<double>& table, int64_t n, double seconds) {
  if (static_cast<size_t>(n) >= table.size()) table.resize(n + 1, 0.0);
  double& t = table[n];
  if (t == 0.0 || seconds < 0.5 * t) {
    t = seconds;
  } else {
    t = 0.7 * t + 0.3 * std::min(seconds, 2.0 * t);
  }
}

}  // namespace

void AdaptiveK::observe_forward(int64_t rows, double seconds) {
  if (rows <= 0 || !(seconds > 0) || !std::isfinite(seconds)) return;
  update_cost(fwd_, rows, seconds);
}

void AdaptiveK::observe_proposer(int64_t tokens, double seconds) {
  const CatchUp catch_up = catch_up_;
  const int64_t missed = pending_missed_;
  catch_up_ = CatchUp::kNone;
  pending_missed_ = 0;
  if (tokens <= 0 || !(seconds >= 0) || !std::isfinite(seconds)) return;
  if (catch_up == CatchUp::kPrompt) return;
  if (catch_up == CatchUp::kSwitchOn) {
    const double usual = proposer_seconds(tokens);
    if (usual > 0.0 && missed > 0) {  // the excess per missed token, as an EMA (first sample whole)
      const double per_token = std::max(0.0, seconds - usual) / static_cast<double>(missed);
      catch_up_per_token_ = catch_up_per_token_ == 0.0 ? per_token : 0.7 * catch_up_per_token_ + 0.3 * per_token;
    }
    return;
  }
  update_cost(prop_, tokens, std::max(seconds, 1e-9));
}

void AdaptiveK::forget(const std::string& request_id) { requests_.erase(request_id); }

double AdaptiveK::forward_seconds(int64_t rows) const {
  if (rows <= 0) return 0.0;
  int64_t lo = -1, hi = -1, top = -1, below_top = -1;
  for (int64_t n = 1; n < static_cast<int64_t>(fwd_.size()); ++n) {
    if (fwd_[n] == 0.0) continue;
    if (n <= rows) lo = n;
    if (n >= rows && hi < 0) hi = n;
    below_top = top;
    top = n;
  }
  if (lo == rows) return fwd_[rows];
  if (lo > 0 && hi > 0) {
    const double f = static_cast<double>(rows - lo) / static_cast<double>(hi - lo);
    return fwd_[lo] + f * (fwd_[hi] - fwd_[lo]);
  }
  if (hi > 0) return fwd_[hi];  // below every measured size: no cheaper than the smallest known
  if (lo < 0) return -1.0;
  // above every measured size: the slope of the two largest, else an optimistic 5 % per row so
  // that larger drafts get tried (and measured)
  const double slope = below_top > 0 ? std::max(0.0, (fwd_[top] - fwd_[below_top]) /
                                                         static_cast<double>(top - below_top))
                                     : 0.05 * fwd_[top];
  return fwd_[top] + slope * static_cast<double>(rows - top);
}

double AdaptiveK::proposer_seconds(int64_t tokens) const {
  if (tokens <= 0) return 0.0;
  // the nearest measured size, scaled in proportion (a draft model's cost grows with k; an
  // n-gram lookup's is tiny either way); 0 when nothing is measured
  int64_t best = -1;
  for (int64_t n = 1; n < static_cast<int64_t>(prop_.size()); ++n) {
    if (prop_[n] > 0.0 && (best < 0 || std::llabs(n - tokens) < std::llabs(best - tokens))) best = n;
  }
  if (best < 0) return 0.0;
  return prop_[best] * static_cast<double>(tokens) / static_cast<double>(best);
}

// A position no draft has reached yet (in the pool or the request) takes the estimate of the one
// before it rather than an uninformed 1/2: after short drafts whose tokens were all accepted,
// longer ones look as good as the positions seen, so they get tried (and measured).
std::vector<double> AdaptiveK::q(const Request* r) const {
  std::vector<double> out(max_k_);
  for (int i = 0; i < max_k_; ++i) {
    const auto at = static_cast<size_t>(i);
    const bool unseen = pool_.tried_at(at) <= 0.0 && (r == nullptr || r->counts.tried_at(at) <= 0.0);
    out[i] = i > 0 && unseen ? out[i - 1] : blended_acceptance(pool_, r != nullptr ? &r->counts : nullptr, at, kRequestPrior);
  }
  return out;
}

std::vector<double> AdaptiveK::acceptance(const std::string& request_id) const {
  auto it = requests_.find(request_id);
  return q(it == requests_.end() ? nullptr : &it->second);
}

double AdaptiveK::expected_tokens(const std::string& request_id, int k) const {
  const std::vector<double> qs = acceptance(request_id);
  double e = 1.0, p = 1.0;
  for (int i = 0; i < std::min(k, max_k_); ++i) {
    p *= qs[i];
    e += p;
  }
  return e;
}

int AdaptiveK::choose(const std::string& request_id, int limit, int batch_rows) {
  limit = std::min(limit, max_k_);
  if (limit <= 0) return 0;
  batch_rows = std::max(batch_rows, 1);
  Request& r = requests_[request_id];
  // explore: fewer than two drafts in the pool, no acceptance known for this proposer
  if (r.drafts < 2 && pool_.tried_at(0) < 1.5) {
    // neither exploration call is measured: the first holds the drafter's prompt, and taking the
    // second for a usual cost turned the 0.5B off on code editing at 98 % acceptance (its
    // first draft steps ran far slower than later ones)
    catch_up_ = CatchUp::kPrompt;
    r.missed = 0;
    r.started = true;
    return std::min(limit, kExploreK);
  }
  const double plain = forward_seconds(batch_rows);
  if (plain < 0 || (fwd_.size() <= static_cast<size_t>(batch_rows) || fwd_[batch_rows] == 0.0)) {
    ++off_steps_;
    ++r.missed;
    return 0;  // measure the plain forward once
  }
  const std::vector<double> qs = q(&r);
  int best = 0, best_positive = 1;
  double best_rate = (r.missed > 0 ? kGainToTurnOn : kGainToStayOn) / plain, best_positive_rate = 0.0;
  double best_positive_loss = 0.0;  // its step's expected seconds over plain decoding's for as many tokens
  double e = 1.0, p = 1.0;
  // after plain steps, turning on also pays the drafter's catch-up (charged to this one step)
  const double switch_on = catch_up_per_token_ * static_cast<double>(r.missed);
  for (int k = 1; k <= limit; ++k) {
    p *= qs[k - 1];
    e += p;
    const double cost = proposer_seconds(k) + forward_seconds(batch_rows + k) + switch_on;
    const double rate = cost > 0 ? e / cost : 0.0;
    if (rate > best_rate) {
      best_rate = rate;
      best = k;
    }
    if (rate > best_positive_rate) {
      best_positive_rate = rate;
      best_positive = k;
      best_positive_loss = cost - e * plain;
    }
  }
  if (best > 0) {
    // grow: after kGrowAfter drafts in a row accepted whole, one token more than the last draft,
    // whatever the estimate of that position says; otherwise a position rejected during the short
    // exploration would keep k below it for good (its estimate is only updated by drafts that
    // reach it): the 0.5B drafted 1 token at a time on code editing at 100 % acceptance
    if (r.full_run >= kGrowAfter && best <= r.last_drafted && r.last_drafted < limit) {
      best = r.last_drafted + 1;
      r.full_run = 0;
    }
    switch_on_now(r);
    r.off_run = 0;
    r.probe_after = 8;
    return best;
  }
  // probe: has the request's text become predictable? Only where the probe's expected loss (a draft
  // model's catch-up included) fits in kProbeBudget of the plain steps since the last one, a
  // request's first probe (it never drafted: its cost is the drafter's prompt, not a catch-up), or
  // after kMaxProbeAfter plain steps whatever it costs; at most kExploreK tokens (a large catch-up
  // charge makes the longest draft look best)
  ++r.off_run;
  const bool affordable = best_positive_loss <= kProbeBudget * plain * static_cast<double>(r.off_run);
  if (r.off_run >= r.probe_after && (affordable || r.drafts == 0 || r.off_run >= kMaxProbeAfter)) {
    r.off_run = 0;
    r.probe_after = std::min(2 * r.probe_after, kMaxProbeAfter);
    ++probes_;
    switch_on_now(r);
    return std::min(best_positive, kExploreK);
  }
  ++off_steps_;
  ++r.missed;
  return 0;
}

// This step's proposer call for r includes its catch-up on the tokens of its plain steps (unless
// the call already holds a drafter's prompt: then it is not measured at all).
void AdaptiveK::switch_on_now(Request& r) {
  if (!r.started) {  // the drafter's first call for r: it holds r's prompt
    r.started = true;
    catch_up_ = CatchUp::kPrompt;
  } else if (r.missed > 0 && catch_up_ != CatchUp::kPrompt) {
    catch_up_ = CatchUp::kSwitchOn;
    pending_missed_ += r.missed;
  }
  r.missed = 0;
}

}  // namespace specdec::spec_decode
