#include "spec_decode/proposers/hybrid.h"

#include <algorithm>
#include <numeric>

#include "common/errors.h"

namespace specdec::spec_decode {
namespace {

constexpr double kRequestDecay = 0.8;  // a request's window: the last ~5 drafts of a part
constexpr double kPoolDecay = 0.98;    // all requests': the last ~50
constexpr double kRequestPrior = 4.0;  // the pool's estimate counts as this many drafts
constexpr int kMaxProbeAfter = 64;

double ema(double old, double sample) {
  return old <= 0 ? sample : 0.7 * old + 0.3 * std::min(sample, 2.0 * old);
}

}  // namespace

HybridProposer::HybridProposer(std::vector<std::shared_ptr<Proposer>> parts, std::vector<int> part_tokens)
    : parts_(std::move(parts)), part_tokens_(std::move(part_tokens)) {
  SPECDEC_CHECK(part_tokens_.empty() || part_tokens_.size() == parts_.size(), "part_tokens",
               part_tokens_.size(), str_cat("none or one per part (", parts_.size(), ")"));
  for (int k : part_tokens_) SPECDEC_CHECK(k >= 1, "part num_speculative_tokens", k, ">= 1");
  SPECDEC_CHECK(parts_.size() >= 2, "proposers", parts_.size(), "at least two proposers for method hybrid");
  for (size_t i = 0; i < parts_.size(); ++i) {
    SPECDEC_CHECK(parts_[i] != nullptr, str_cat("proposers[", i, "]"), "None", "a proposer");
  }
  pool_.resize(parts_.size());
  stats_.resize(parts_.size());
  for (size_t i = 0; i < parts_.size(); ++i) stats_[i].name = parts_[i]->name();
}

std::vector<double> HybridProposer::q(size_t part, const PartState* st, int k) const {
  std::vector<double> out(static_cast<size_t>(std::max(k, 0)));
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = blended_acceptance(pool_[part], st != nullptr ? &st->counts : nullptr, i, kRequestPrior);
  }
  return out;
}

double HybridProposer::expected(size_t part, const PartState* st, int tokens) const {
  double e = 1.0, p = 1.0;
  for (double qi : q(part, st, tokens)) {
    p *= qi;
    e += p;
  }
  return e;
}

// The part's last draft for the request against the tokens the request holds now: the matching
// prefix is what it got (or would have got: for greedy requests exactly the accepted drafts).
void HybridProposer::observe(size_t part, PartState& st, const std::vector<int32_t>& context) {
  const int64_t len = static_cast<int64_t>(context.size());
  if (st.context < 0 || len <= st.context || st.draft.empty()) {
    if (len > st.context) {  // an empty draft teaches nothing; a stale one is dropped
      st.context = -1;
      st.draft.clear();
    }
    return;
  }
  size_t known = 0;
  const size_t matched = matched_prefix(st.draft, context, static_cast<size_t>(st.context), known);
  const size_t reached = std::min(known, matched + 1);
  st.counts.add(reached, matched, kRequestDecay);
  pool_[part].add(reached, matched, kPoolDecay);
  st.context = -1;
  st.draft.clear();
}

std::vector<Draft> HybridProposer::propose(const std::vector<ProposeRequest>& requests) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  if (has_last_end_) {  // the engine's step between two calls: verification and host work
    const double gap = std::chrono::duration<double>(start - last_end_).count();
    if (gap > 0 && gap < 10.0) verify_seconds_ = ema(verify_seconds_, gap);
  }
  const size_t n = requests.size(), np = parts_.size();
  std::vector<Draft> out(n);
  std::vector<double> best(n, 1.0);  // expected tokens of the draft in hand (1: none)
  std::vector<int> best_part(n, -1);
  std::vector<RequestState*> rs(n);
  for (size_t i = 0; i < n; ++i) {
    RequestState& r = states_[requests[i].sequence->request_id()];
    r.parts.resize(np);
    for (size_t p = 0; p < np; ++p) observe(p, r.parts[p], requests[i].sequence->tokens());
    rs[i] = &r;
  }
  // the parts in order of what they are worth per second (the pool's expected tokens over their
  // cost and a verification): the draft in hand first is the best one to beat. Cost alone ordered
  // two near-free parts by timer noise, and the worse one ran on every step a hiccup put it first.
  int k_max = 0;
  for (const auto& r : requests) k_max = std::max(k_max, r.num_speculative_tokens);
  std::vector<double> rate(np, 0.0);
  for (size_t p = 0; p < np; ++p) {
    const int k = part_tokens_.empty() ? k_max : std::min(k_max, part_tokens_[p]);
    rate[p] = verify_seconds_ > 0 ? expected(p, nullptr, k) / (stats_[p].seconds_per_call + verify_seconds_)
                                  : -stats_[p].seconds_per_call;  // not measured yet: cheapest first
  }
  std::vector<size_t> order(np);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rate[a] > rate[b]; });
  for (size_t p : order) {
    std::vector<size_t> who;
    std::vector<ProposeRequest> sub;
    const double cost = stats_[p].seconds_per_call;
    for (size_t i = 0; i < n; ++i) {
      const int k = part_tokens_.empty() ? requests[i].num_speculative_tokens
                                         : std::min(requests[i].num_speculative_tokens, part_tokens_[p]);
      if (k <= 0) continue;
      PartState& st = rs[i]->parts[p];
      bool run = cost <= 0 || verify_seconds_ <= 0;  // not measured yet: measure it
      if (!run) run = expected(p, &st, k) / (cost + verify_seconds_) > best[i] / verify_seconds_;
      if (run) {
        st.skipped = 0;
        st.probe_after = 8;
      } else if (++st.skipped >= st.probe_after) {  // look again: the text may have changed
        run = true;
        st.skipped = 0;
        st.probe_after = std::min(2 * st.probe_after, kMaxProbeAfter);
      }
      if (!run) continue;
      who.push_back(i);
      sub.push_back(requests[i]);
      sub.back().num_speculative_tokens = k;
    }
    if (sub.empty()) continue;
    const auto t0 = clock::now();
    std::vector<Draft> drafts = parts_[p]->propose(sub);
    stats_[p].seconds_per_call = ema(stats_[p].seconds_per_call,
                                     std::chrono::duration<double>(clock::now() - t0).count());
    ++stats_[p].calls;
    SPECDEC_CHECK(drafts.size() == sub.size(), str_cat("proposers[", p, "] drafts"), drafts.size(),
                 str_cat(sub.size(), " (one per request)"));
    for (size_t j = 0; j < who.size(); ++j) {
      const size_t i = who[j];
      Draft& d = drafts[j];
      PartState& st = rs[i]->parts[p];
      st.context = requests[i].sequence->size();
      st.draft = d.tokens;
      ++stats_[p].drafted;
      if (d.tokens.empty()) continue;
      // a sampled draft is judged by what its part promises for the tokens asked, never by its
      // (random) tokens; a deterministic one by its own length
      const int len = d.has_probs() ? sub[j].num_speculative_tokens : static_cast<int>(d.tokens.size());
      const double e = expected(p, &st, len);
      if (e > best[i]) {
        best[i] = e;
        best_part[i] = static_cast<int>(p);
        out[i] = std::move(d);
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (best_part[i] >= 0) ++stats_[static_cast<size_t>(best_part[i])].taken;
  }
  last_end_ = clock::now();
  has_last_end_ = true;
  return out;
}

void HybridProposer::finish(const Sequence& sequence) {
  for (auto& p : parts_) p->finish(sequence);
  states_.erase(sequence.request_id());
}

std::vector<HybridProposer::PartStats> HybridProposer::stats() const {
  std::vector<PartStats> out = stats_;
  for (size_t p = 0; p < out.size(); ++p) {
    const size_t k = pool_[p].tried.size();
    out[p].acceptance = q(p, nullptr, static_cast<int>(k));
  }
  return out;
}

}  // namespace specdec::spec_decode
