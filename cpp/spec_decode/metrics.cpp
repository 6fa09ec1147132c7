#include "spec_decode/metrics.h"

#include <algorithm>
#include <limits>

#include "common/errors.h"

namespace specdec::spec_decode {

void SpecDecodingStats::observe_draft(int num_draft, int num_accepted) {
  SPECDEC_CHECK(num_draft >= 0 && num_accepted >= 0 && num_accepted <= num_draft, "num_accepted_tokens",
               num_accepted, str_cat("in [0, num_draft_tokens = ", num_draft, "]"));
  if (num_draft == 0) return;
  ++num_drafts;
  num_draft_tokens += num_draft;
  num_accepted_tokens += num_accepted;
  if (num_accepted_tokens_per_pos.size() < static_cast<size_t>(num_draft)) {
    num_accepted_tokens_per_pos.resize(static_cast<size_t>(num_draft), 0);
  }
  for (int i = 0; i < num_accepted; ++i) ++num_accepted_tokens_per_pos[static_cast<size_t>(i)];
}

void SpecDecodingStats::add(const SpecDecodingStats& o) {
  num_drafts += o.num_drafts;
  num_draft_tokens += o.num_draft_tokens;
  num_accepted_tokens += o.num_accepted_tokens;
  if (num_accepted_tokens_per_pos.size() < o.num_accepted_tokens_per_pos.size()) {
    num_accepted_tokens_per_pos.resize(o.num_accepted_tokens_per_pos.size(), 0);
  }
  for (size_t i = 0; i < o.num_accepted_tokens_per_pos.size(); ++i) {
    num_accepted_tokens_per_pos[i] += o.num_accepted_tokens_per_pos[i];
  }
}

double SpecDecodingStats::acceptance_rate() const {
  if (num_draft_tokens == 0) return std::numeric_limits<double>::quiet_NaN();
  return static_cast<double>(num_accepted_tokens) / static_cast<double>(num_draft_tokens);
}

double SpecDecodingStats::mean_acceptance_length() const {
  if (num_drafts == 0) return 1.0;
  return 1.0 + static_cast<double>(num_accepted_tokens) / static_cast<double>(num_drafts);
}

std::vector<double> SpecDecodingStats::acceptance_rate_per_pos() const {
  std::vector<double> out;
  for (int64_t n : num_accepted_tokens_per_pos) {
    out.push_back(num_drafts ? static_cast<double>(n) / static_cast<double>(num_drafts) : 0.0);
  }
  return out;
}

}  // namespace specdec::spec_decode
