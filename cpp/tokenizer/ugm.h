// Unigram (UGM) tokenizer tables, `tokenizer.ggml.model = t5` (T5, XLM-RoBERTa style
// SentencePiece models such as nomic-bert-moe), as llama.cpp's llm_tokenizer_ugm:
// - Charsmap: SentencePiece's precompiled normaliser (`tokenizer.ggml.precompiled_charsmap`): a
//   little-endian u32 byte count, an XOR-compressed compact double array (XCDA) of that many bytes
//   mapping input prefixes to replacements, then the NUL-terminated replacement strings;
// - TokenTrie: a byte trie over token texts for the Viterbi search and user-defined tokens;
// - UgmModel: both, the normaliser flags and the unknown-token score.
// The search itself is ugm_encode (encoders.h, ugm.cpp). See docs/tokenizer.md.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace specdec::tokenizer {

class Charsmap {
 public:
  Charsmap() = default;  // no normalisation

  // Parses and validates the key's bytes: the size field, the array length, and every node and
  // replacement a lookup can reach (so lookups never read out of bounds). An empty blob or an
  // empty array is no normalisation. Throws FormatError saying what is wrong (the caller adds the
  // key and the file).
  static Charsmap parse(std::string_view blob);

  bool empty() const { return nodes_.empty(); }
  size_t num_nodes() const { return nodes_.size(); }
  // The longest prefix of `text` that has a replacement: its length in bytes (0 when none; a NUL
  // byte ends the search) and, through `replacement`, the text it becomes (may be empty).
  size_t longest_match(std::string_view text, std::string_view& replacement) const;

 private:
  // Fields of a packed node: BASE (offset of the children), LCHECK (the byte that leads to the
  // node; bit 31 set on value nodes so no byte matches them), LEAF (the node has a value) and the
  // value (offset of the replacement) of a value node.
  uint32_t base(uint32_t i) const;
  uint32_t lcheck(uint32_t i) const { return nodes_[i] & ((1u << 31) | 0xFFu); }
  bool leaf(uint32_t i) const { return (nodes_[i] >> 8) & 1u; }
  uint32_t value(uint32_t i) const { return nodes_[i] & ((1u << 31) - 1); }
  void validate() const;

  std::vector<uint32_t> nodes_;
  std::string replacements_;  // NUL-terminated strings, addressed by value()
};

// A byte trie of (text, id), flattened: each node's edges are contiguous and sorted by byte.
class TokenTrie {
 public:
  // Texts must be unique and non-empty.
  void build(std::vector<std::pair<std::string_view, int32_t>> entries);
  bool empty() const { return nodes_.size() <= 1; }

  // Calls on_match(id, length) for every entry that is a prefix of `text`, shortest first.
  template <typename OnMatch>
  void for_each_prefix(std::string_view text, OnMatch&& on_match) const {
    uint32_t node = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      node = child(node, static_cast<uint8_t>(text[i]));
      if (node == kNone) return;
      if (nodes_[node].id >= 0) on_match(nodes_[node].id, i + 1);
    }
  }
  // The length of the longest prefix of `text` that is a path from the root, whether or not an
  // entry ends there (llama.cpp's naive_trie::get_longest_prefix, used for user-defined tokens).
  size_t longest_path(std::string_view text) const;

 private:
  static constexpr uint32_t kNone = ~0u;
  struct Node {
    int32_t id = -1;  // the entry ending here, or -1
    uint32_t first_edge = 0;
    uint32_t num_edges = 0;
  };
  struct Edge {
    uint8_t byte;
    uint32_t node;
  };
  uint32_t child(uint32_t node, uint8_t byte) const;

  std::vector<Node> nodes_{Node{}};
  std::vector<Edge> edges_;
};

struct UgmModel {
  Charsmap charsmap;
  TokenTrie tokens;        // normal, user-defined and unused tokens (what the search may pick)
  TokenTrie user_defined;  // user-defined tokens: input they start is not normalised
  // min score of the normal tokens - 10 (a float, as llama.cpp computes it)
  float unknown_score = 0.0f;
  // Normaliser flags (llama.cpp's vocab fields): spaces become U+2581; the space goes at the end
  // of the text instead of the start (no GGUF key sets it, as in llama.cpp); runs of white space
  // become one space before each word (`tokenizer.ggml.remove_extra_whitespaces`).
  bool escape_whitespaces = true;
  bool treat_whitespace_as_suffix = false;
  bool remove_extra_whitespaces = false;
};

}  // namespace specdec::tokenizer
