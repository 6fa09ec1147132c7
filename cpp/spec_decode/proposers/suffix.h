// Suffix decoding (Arctic Inference's SuffixDecodingCache, arXiv 2411.04975), model-free:
// - a per-request suffix tree over the request's prompt and output as it grows, and a global tree
//   over the outputs of finished requests (at most max_cached_requests, oldest evicted first);
// - both are tries of every suffix up to max_tree_depth tokens, each node counting how often its
//   path occurred;
// - each step matches the longest suffix of the request's last max_tree_depth - k tokens that has
//   a continuation (the trie ends at max_tree_depth, so this leaves room for a k-token walk), then walks down choosing the most frequent child while the path's empirical
//   probability (the product of child count / sum of sibling counts) stays >= min_token_prob;
// - the draft is at most max_spec_factor x the matched length and num_speculative_tokens long;
//   of the two trees' drafts the one with the larger score (sum of path probabilities) is used.
// No draft probabilities (point masses).
#pragma once

#include <deque>
#include <unordered_map>

#include "spec_decode/proposer.h"

namespace specdec::spec_decode {

class SuffixTrie {
 public:
  explicit SuffixTrie(int max_depth);
  // Appends tokens to sequence `seq` (whose suffixes end at its current end): every suffix of
  // length <= max_depth ending at each new token is counted once.
  void extend(int64_t seq, const std::vector<int32_t>& tokens, size_t from, size_t to);
  // Removes a whole sequence added with extend (its counts) and forgets it.
  void remove(int64_t seq, const std::vector<int32_t>& tokens);
  void forget(int64_t seq) { active_.erase(seq); }
  struct Speculation {
    std::vector<int32_t> tokens;
    double score = 0.0;
    int match_len = 0;
  };
  Speculation speculate(const std::vector<int32_t>& context, int max_tokens, double max_spec_factor,
                        double min_token_prob) const;
  size_t num_nodes() const { return nodes_.size() - free_.size(); }

 private:
  struct Node {
    int64_t count = 0;
    int depth = 0;
    std::unordered_map<int32_t, int32_t> children;
  };
  int32_t child(int32_t node, int32_t token) const;
  int32_t add_child(int32_t node, int32_t token);
  int max_depth_;
  std::vector<Node> nodes_;  // [0] is the root
  std::vector<int32_t> free_;
  std::unordered_map<int64_t, std::vector<int32_t>> active_;  // per sequence: nodes of its open suffixes
};

class SuffixProposer final : public Proposer {
 public:
  SuffixProposer(int max_tree_depth = 24, int64_t max_cached_requests = 10000,
                 double max_spec_factor = 1.0, double min_token_prob = 0.1, int64_t max_model_len = 0);
  std::string name() const override { return "suffix"; }
  std::vector<Draft> propose(const std::vector<ProposeRequest>& requests) override;
  void finish(const Sequence& sequence) override;
  size_t num_cached_requests() const { return cached_.size(); }
  size_t num_active_requests() const { return requests_.size(); }

 private:
  struct RequestTree {
    SuffixTrie trie;
    size_t num_indexed = 0;
  };
  int max_depth_;
  int64_t max_cached_;
  double max_spec_factor_, min_token_prob_;
  int64_t max_model_len_;
  std::unordered_map<std::string, RequestTree> requests_;
  SuffixTrie global_;
  std::deque<std::pair<int64_t, std::vector<int32_t>>> cached_;  // finished outputs, oldest first
  int64_t next_seq_ = 0;
};

}  // namespace specdec::spec_decode
