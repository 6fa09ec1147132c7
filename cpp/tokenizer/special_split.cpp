#include "tokenizer/special_split.h"

#include <algorithm>

namespace specdec::tokenizer {
namespace {

bool is_ascii_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// Splits the text fragment `f` at every occurrence of special token `id` (llama.cpp semantics,
// including its lstrip/rstrip of adjacent white space).
// Whether [begin, end) lies inside one of `ranges` (sorted, disjoint).
bool inside(const SpecialSplitter::Ranges& ranges, size_t begin, size_t end) {
  auto it = std::upper_bound(ranges.begin(), ranges.end(), begin,
                             [](size_t pos, const auto& r) { return pos < r.first; });
  if (it == ranges.begin()) return false;
  --it;
  return it->first <= begin && end <= it->second;
}

void split_fragment(const Vocab& v, std::string_view text, const Fragment& f, int32_t id,
                    const SpecialSplitter::Ranges* special_ranges, std::vector<Fragment>& out) {
  const std::string& token = v.tokens[id].text;
  const uint32_t attr = v.tokens[id].attr;
  const bool restricted = special_ranges != nullptr && (attr & (kAttrControl | kAttrUnknown));
  const size_t end = f.offset + f.length;
  size_t cursor = f.offset;
  size_t from = cursor;  // where the search goes on (past matches that are not taken)
  while (true) {
    size_t match = text.substr(0, end).find(token, from);
    while (restricted && match != std::string_view::npos &&
           !inside(*special_ranges, match, match + token.size())) {
      match = text.substr(0, end).find(token, match + 1);  // message text: not a control token
    }
    if (match == std::string_view::npos) {
      if (cursor < end) out.push_back(Fragment{kNoToken, cursor, end - cursor});
      return;
    }
    size_t left_end = match;
    if (attr & kAttrLstrip) {
      while (left_end > cursor && is_ascii_space(text[left_end - 1])) --left_end;
    }
    if (left_end > cursor) out.push_back(Fragment{kNoToken, cursor, left_end - cursor});
    out.push_back(Fragment{id, 0, 0});
    cursor = match + token.size();
    if (attr & kAttrRstrip) {
      while (cursor < end && is_ascii_space(text[cursor])) ++cursor;
    }
    from = cursor;
  }
}

}  // namespace

SpecialSplitter::SpecialSplitter(const Vocab& vocab) : vocab_(&vocab), node_rank_(1, -1) {
  const std::vector<int32_t>& order = vocab.special_token_order;
  for (size_t rank = 0; rank < order.size(); ++rank) {
    const std::string& text = vocab.tokens[order[rank]].text;
    first_byte_[uint8_t(text[0])] = true;
    int32_t node = 0;
    for (char c : text) {
      const uint64_t key = (uint64_t(uint32_t(node)) << 8) | uint8_t(c);
      const auto [it, inserted] = children_.emplace(key, static_cast<int32_t>(node_rank_.size()));
      if (inserted) node_rank_.push_back(-1);
      node = it->second;
    }
    node_rank_[node] = static_cast<int32_t>(rank);  // texts are unique
  }
}

bool SpecialSplitter::eligible(int32_t id, bool parse_special) const {
  return parse_special || !(vocab_->tokens[id].attr & (kAttrControl | kAttrUnknown));
}

template <typename OnToken>
void SpecialSplitter::walk(std::string_view text, size_t i, OnToken&& on_token) const {
  if (!first_byte_[uint8_t(text[i])]) return;
  int32_t node = 0;
  for (size_t j = i; j < text.size(); ++j) {
    const auto it = children_.find((uint64_t(uint32_t(node)) << 8) | uint8_t(text[j]));
    if (it == children_.end()) return;
    node = it->second;
    if (node_rank_[node] >= 0) on_token(node_rank_[node], j + 1);
  }
}

std::vector<int32_t> SpecialSplitter::occurring(std::string_view text, bool parse_special) const {
  const std::vector<int32_t>& order = vocab_->special_token_order;
  std::vector<int32_t> ranks;
  for (size_t i = 0; i < text.size(); ++i) {
    walk(text, i, [&](int32_t rank, size_t) {
      if (eligible(order[rank], parse_special)) ranks.push_back(rank);
    });
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::vector<int32_t> ids;
  ids.reserve(ranks.size());
  for (int32_t rank : ranks) ids.push_back(order[rank]);
  return ids;
}

SpecialSplitter::Ranges SpecialSplitter::control_spans(std::string_view text) const {
  const std::vector<int32_t>& order = vocab_->special_token_order;
  Ranges spans;
  for (size_t i = 0; i < text.size();) {
    size_t end = 0;
    walk(text, i, [&](int32_t rank, size_t stop) {
      if (!eligible(order[rank], false)) end = stop;  // control or unknown
    });
    if (end == 0) {
      ++i;
      continue;
    }
    spans.emplace_back(i, end);
    i = end;
  }
  return spans;
}

std::vector<Fragment> SpecialSplitter::split(std::string_view text, bool parse_special,
                                             const Ranges* special_ranges) const {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back(Fragment{kNoToken, 0, text.size()});
  for (int32_t id : occurring(text, parse_special || special_ranges != nullptr)) {
    std::vector<Fragment> next;
    next.reserve(fragments.size() + 2);
    for (const Fragment& f : fragments) {
      if (f.token != kNoToken) {
        next.push_back(f);
      } else {
        split_fragment(*vocab_, text, f, id, special_ranges, next);
      }
    }
    fragments = std::move(next);
  }
  return fragments;
}

}  // namespace specdec::tokenizer
