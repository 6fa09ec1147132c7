// Splits special-token text out of raw text before the merge algorithms run (llama.cpp's
// tokenizer_st_partition): special tokens are taken longest first, and each one splits every
// remaining text fragment at all of its occurrences. User-defined tokens are always split out;
// control and unknown tokens only when parse_special is set.
//
// A trie over all special-token texts first finds which ones occur in the text at all, so the
// per-token passes run only for those (otherwise each of Gemma's 6k control tokens scans the text).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizer/vocab.h"

namespace specdec::tokenizer {

struct Fragment {
  int32_t token = kNoToken;  // a special token, or kNoToken for text
  size_t offset = 0;         // text: byte range in the input
  size_t length = 0;
};

class SpecialSplitter {
 public:
  explicit SpecialSplitter(const Vocab& vocab);
  // Byte ranges [begin, end) of the text, sorted and disjoint.
  using Ranges = std::vector<std::pair<size_t, size_t>>;
  // Fragments of `text` in order; text fragments are never empty. With `special_ranges`, control
  // and unknown tokens are parsed only where they lie wholly inside one of the ranges (a chat
  // template's own markup), whatever parse_special says.
  std::vector<Fragment> split(std::string_view text, bool parse_special,
                              const Ranges* special_ranges = nullptr) const;
  // Byte ranges of control- and unknown-token texts in `text`: left to right, the longest one that
  // starts at each position, not overlapping (chat templates protect these in message text).
  Ranges control_spans(std::string_view text) const;

 private:
  bool eligible(int32_t id, bool parse_special) const;
  // Calls on_token(rank, end) for every special token whose text starts at text[i], shortest
  // first (end: one past its last byte).
  template <typename OnToken>
  void walk(std::string_view text, size_t i, OnToken&& on_token) const;
  // The eligible special tokens that occur in `text`, in split order.
  std::vector<int32_t> occurring(std::string_view text, bool parse_special) const;

  const Vocab* vocab_;
  std::unordered_map<uint64_t, int32_t> children_;  // (node << 8 | byte) -> node
  std::vector<int32_t> node_rank_;      // index in vocab.special_token_order of the token ending at
                                        // each node, or -1
  std::array<bool, 256> first_byte_{};  // bytes that begin some special token
};

}  // namespace specdec::tokenizer
