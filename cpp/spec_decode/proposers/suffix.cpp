#include "spec_decode/proposers/suffix.h"

#include <algorithm>
#include <cmath>

#include "common/errors.h"

namespace specdec::spec_decode {

SuffixTrie::SuffixTrie(int max_depth) : max_depth_(max_depth) { nodes_.emplace_back(); }

int32_t SuffixTrie::child(int32_t node, int32_t token) const {
  const auto& ch = nodes_[static_cast<size_t>(node)].children;
  const auto it = ch.find(token);
  return it == ch.end() ? -1 : it->second;
}

int32_t SuffixTrie::add_child(int32_t node, int32_t token) {
  int32_t c = child(node, token);
  if (c >= 0) return c;
  if (!free_.empty()) {
    c = free_.back();
    free_.pop_back();
    nodes_[static_cast<size_t>(c)] = Node{};
  } else {
    c = static_cast<int32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  nodes_[static_cast<size_t>(c)].depth = nodes_[static_cast<size_t>(node)].depth + 1;
  nodes_[static_cast<size_t>(node)].children.emplace(token, c);
  return c;
}

void SuffixTrie::extend(int64_t seq, const std::vector<int32_t>& tokens, size_t from, size_t to) {
  std::vector<int32_t>& active = active_[seq];
  std::vector<int32_t> next;
  for (size_t i = from; i < to; ++i) {
    next.clear();
    const int32_t t = tokens[i];
    for (size_t j = 0; j <= active.size(); ++j) {
      const int32_t n = j == 0 ? 0 : active[j - 1];
      const int32_t c = add_child(n, t);
      Node& node = nodes_[static_cast<size_t>(c)];
      ++node.count;
      if (node.depth < max_depth_) next.push_back(c);
    }
    active.swap(next);
  }
}

void SuffixTrie::remove(int64_t seq, const std::vector<int32_t>& tokens) {
  active_.erase(seq);
  std::vector<int32_t> active, next;
  std::vector<std::pair<int32_t, int32_t>> dead;  // (parent, token)
  for (const int32_t t : tokens) {
    next.clear();
    for (size_t j = 0; j <= active.size(); ++j) {
      const int32_t n = j == 0 ? 0 : active[j - 1];
      const int32_t c = child(n, t);
      if (c < 0) continue;  // not added (cannot happen for a sequence added with extend)
      Node& node = nodes_[static_cast<size_t>(c)];
      if (--node.count == 0) dead.emplace_back(n, t);
      if (node.depth < max_depth_) next.push_back(c);
    }
    active.swap(next);
  }
  // counts never grow down a path, so a dead node's subtree is dead too: unlink deepest first
  for (auto it = dead.rbegin(); it != dead.rend(); ++it) {
    auto& ch = nodes_[static_cast<size_t>(it->first)].children;
    const auto f = ch.find(it->second);
    if (f == ch.end()) continue;
    free_.push_back(f->second);
    nodes_[static_cast<size_t>(f->second)].children.clear();
    ch.erase(f);
  }
}

SuffixTrie::Speculation SuffixTrie::speculate(const std::vector<int32_t>& context, int max_tokens,
                                              double max_spec_factor, double min_token_prob) const {
  Speculation best;
  const int n = static_cast<int>(context.size());
  // the trie stops at max_depth: a match of m tokens leaves max_depth - m to walk, so the pattern
  // is at most max_depth - max_tokens long (at least 1) and a full draft stays possible
  const int longest = std::min(n, std::max(1, max_depth_ - max_tokens));
  for (int m = longest; m >= 1 && max_tokens > 0; --m) {
    int32_t node = 0;
    for (int i = n - m; i < n && node >= 0; ++i) node = child(node, context[static_cast<size_t>(i)]);
    if (node < 0 || nodes_[static_cast<size_t>(node)].children.empty()) continue;
    const int limit = std::min<int>(max_tokens, static_cast<int>(std::floor(max_spec_factor * m)));
    Speculation s;
    s.match_len = m;
    double prob = 1.0;
    while (static_cast<int>(s.tokens.size()) < limit) {
      const Node& cur = nodes_[static_cast<size_t>(node)];
      if (cur.children.empty()) break;
      int64_t total = 0, best_count = -1;
      int32_t best_token = 0, best_child = -1;
      for (const auto& [tok, c] : cur.children) {
        const int64_t cnt = nodes_[static_cast<size_t>(c)].count;
        total += cnt;
        if (cnt > best_count || (cnt == best_count && tok < best_token)) {
          best_count = cnt;
          best_token = tok;
          best_child = c;
        }
      }
      prob *= static_cast<double>(best_count) / static_cast<double>(total);
      if (prob < min_token_prob) break;
      s.tokens.push_back(best_token);
      s.score += prob;
      node = best_child;
    }
    return s;  // the longest match with a continuation decides
  }
  return best;
}

SuffixProposer::SuffixProposer(int max_tree_depth, int64_t max_cached_requests, double max_spec_factor,
                               double min_token_prob, int64_t max_model_len)
    : max_depth_(max_tree_depth), max_cached_(max_cached_requests), max_spec_factor_(max_spec_factor),
      min_token_prob_(min_token_prob), max_model_len_(max_model_len), global_(max_tree_depth) {
  SPECDEC_CHECK(max_tree_depth >= 1 && max_tree_depth <= 64, "suffix_decoding_max_tree_depth",
               max_tree_depth, "an integer in [1, 64]");
  SPECDEC_CHECK(max_cached_requests >= 0, "suffix_decoding_max_cached_requests", max_cached_requests,
               "an integer >= 0 (0: no global tree)");
  SPECDEC_CHECK(std::isfinite(max_spec_factor) && max_spec_factor > 0, "suffix_decoding_max_spec_factor",
               max_spec_factor, "a finite number > 0");
  SPECDEC_CHECK(min_token_prob >= 0 && min_token_prob <= 1, "suffix_decoding_min_token_prob",
               min_token_prob, "a number in [0, 1]");
}

std::vector<Draft> SuffixProposer::propose(const std::vector<ProposeRequest>& requests) {
  std::vector<Draft> out(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    const auto& tokens = r.sequence->tokens();
    auto it = requests_.find(r.sequence->request_id());
    if (it == requests_.end()) {
      it = requests_.emplace(r.sequence->request_id(), RequestTree{SuffixTrie(max_depth_), 0}).first;
    }
    RequestTree& tree = it->second;
    tree.trie.extend(0, tokens, tree.num_indexed, tokens.size());
    tree.num_indexed = tokens.size();
    int k = r.num_speculative_tokens;
    if (max_model_len_ > 0) k = static_cast<int>(std::min<int64_t>(k, max_model_len_ - r.sequence->size()));
    if (k <= 0) continue;
    auto a = tree.trie.speculate(tokens, k, max_spec_factor_, min_token_prob_);
    if (max_cached_ > 0) {
      auto b = global_.speculate(tokens, k, max_spec_factor_, min_token_prob_);
      if (b.score > a.score) a = std::move(b);
    }
    out[i].tokens = std::move(a.tokens);
  }
  return out;
}

void SuffixProposer::finish(const Sequence& sequence) {
  requests_.erase(sequence.request_id());
  if (max_cached_ == 0 || sequence.num_output_tokens() == 0) return;
  std::vector<int32_t> output(sequence.tokens().begin() + sequence.num_prompt_tokens(), sequence.tokens().end());
  const int64_t id = next_seq_++;
  global_.extend(id, output, 0, output.size());
  global_.forget(id);
  cached_.emplace_back(id, std::move(output));
  while (static_cast<int64_t>(cached_.size()) > max_cached_) {
    global_.remove(cached_.front().first, cached_.front().second);
    cached_.pop_front();
  }
}

}  // namespace specdec::spec_decode
