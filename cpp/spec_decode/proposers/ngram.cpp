#include "spec_decode/proposers/ngram.h"

#include <algorithm>

#include "common/errors.h"

namespace specdec::spec_decode {

std::vector<int32_t> ngram_lookup(const std::vector<int32_t>& origin, int min_n, int max_n, int k,
                                  int64_t max_model_len) {
  const int64_t total = static_cast<int64_t>(origin.size());
  if (total < min_n || k <= 0) return {};
  if (max_model_len > 0) k = static_cast<int>(std::min<int64_t>(k, max_model_len - total));
  if (k <= 0) return {};
  // KMP prefix function over the reversed tokens: a prefix of the reversed sequence is a suffix
  // of the original; the longest prefix that recurs (capped at max_n) is the longest suffix
  // n-gram seen earlier. ">=" keeps the match furthest into the reversed scan: the earliest
  // occurrence in the original order.
  auto tok = [&](int64_t i) { return origin[static_cast<size_t>(total - 1 - i)]; };
  std::vector<int> lps(static_cast<size_t>(max_n), 0);
  int longest = 0, prev = 0;
  int64_t position = 0, i = 1;
  while (i < total) {
    if (tok(i) == tok(prev)) {
      ++prev;
      if (prev >= longest) {
        longest = prev;
        position = i;
      }
      if (i < max_n) lps[static_cast<size_t>(i)] = prev;
      if (prev == max_n) prev = lps[static_cast<size_t>(max_n - 1)];
      ++i;
    } else if (prev != 0) {
      prev = lps[static_cast<size_t>(prev - 1)];
    } else {
      ++i;
    }
  }
  if (longest < min_n) return {};
  const int64_t start = total - 1 - position + longest;
  const int64_t n = std::min<int64_t>(k, total - start);
  return {origin.begin() + start, origin.begin() + start + n};
}

NgramProposer::NgramProposer(int prompt_lookup_min, int prompt_lookup_max, int64_t max_model_len)
    : min_n_(prompt_lookup_min), max_n_(prompt_lookup_max), max_model_len_(max_model_len) {
  SPECDEC_CHECK(min_n_ >= 1, "prompt_lookup_min", min_n_, "an integer >= 1");
  SPECDEC_CHECK(max_n_ >= 1, "prompt_lookup_max", max_n_, "an integer >= 1");
  SPECDEC_CHECK(min_n_ <= max_n_, "prompt_lookup_min", min_n_,
               str_cat("<= prompt_lookup_max = ", max_n_));
}

std::vector<Draft> NgramProposer::propose(const std::vector<ProposeRequest>& requests) {
  std::vector<Draft> out(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    out[i].tokens = ngram_lookup(r.sequence->tokens(), min_n_, max_n_, r.num_speculative_tokens,
                                 max_model_len_);
  }
  return out;
}

}  // namespace specdec::spec_decode
