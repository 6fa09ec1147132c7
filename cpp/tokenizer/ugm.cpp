// Unigram (UGM) encoding, as llama.cpp's llm_tokenizer_ugm_session: the text is normalised (the
// precompiled charsmap, white space), then a Viterbi search over code-point boundaries picks the
// segmentation with the highest sum of token scores (user-defined tokens score 0; a code point no
// single token covers may be the unknown token at min score - 10).
#include "tokenizer/ugm.h"

#include <algorithm>
#include <cfloat>

#include "tokenizer/encoders.h"
#include "tokenizer/vocab.h"

namespace specdec::tokenizer {

void TokenTrie::build(std::vector<std::pair<std::string_view, int32_t>> entries) {
  std::sort(entries.begin(), entries.end());  // bytes compare unsigned (char_traits<char>)
  nodes_.assign(1, Node{});
  edges_.clear();
  struct Range {
    uint32_t node;
    size_t begin, end, depth;  // entries [begin, end) share their first `depth` bytes
  };
  std::vector<Range> stack = {{0, 0, entries.size(), 0}};
  while (!stack.empty()) {
    const Range r = stack.back();
    stack.pop_back();
    size_t i = r.begin;
    if (i < r.end && entries[i].first.size() == r.depth) nodes_[r.node].id = entries[i++].second;
    nodes_[r.node].first_edge = static_cast<uint32_t>(edges_.size());
    uint32_t num_edges = 0;
    while (i < r.end) {
      const char byte = entries[i].first[r.depth];
      size_t j = i + 1;
      while (j < r.end && entries[j].first[r.depth] == byte) ++j;
      const uint32_t node = static_cast<uint32_t>(nodes_.size());
      nodes_.push_back(Node{});
      edges_.push_back(Edge{static_cast<uint8_t>(byte), node});
      ++num_edges;
      stack.push_back(Range{node, i, j, r.depth + 1});
      i = j;
    }
    nodes_[r.node].num_edges = num_edges;
  }
}

uint32_t TokenTrie::child(uint32_t node, uint8_t byte) const {
  const Node& n = nodes_[node];
  const auto first = edges_.begin() + n.first_edge;
  const auto last = first + n.num_edges;
  const auto it =
      std::lower_bound(first, last, byte, [](const Edge& e, uint8_t b) { return e.byte < b; });
  return it != last && it->byte == byte ? it->node : kNone;
}

size_t TokenTrie::longest_path(std::string_view text) const {
  uint32_t node = 0;
  size_t length = 0;
  while (length < text.size()) {
    node = child(node, static_cast<uint8_t>(text[length]));
    if (node == kNone) break;
    ++length;
  }
  return length;
}

void derive_ugm(Vocab& v) {
  std::vector<std::pair<std::string_view, int32_t>> searchable, user_defined;
  float min_score = FLT_MAX;
  for (int32_t id = 0; id < v.size(); ++id) {
    const TokenData& t = v.tokens[id];
    if (t.attr & kAttrNormal) min_score = std::min(min_score, t.score);
    if (t.attr & (kAttrNormal | kAttrUserDefined | kAttrUnused))
      searchable.emplace_back(t.text, id);
    if (t.attr & kAttrUserDefined) user_defined.emplace_back(t.text, id);
  }
  v.ugm.tokens.build(std::move(searchable));
  v.ugm.user_defined.build(std::move(user_defined));
  v.ugm.unknown_score = min_score - 10.0f;
}

namespace {

// Length of the UTF-8 sequence at the start of `text` as llama.cpp's unicode_cpt_from_utf8 checks
// it (lead byte and continuation bytes only: overlongs, surrogates and F5..F7 leads pass), or 0.
size_t utf8_sequence_length(std::string_view text) {
  const uint8_t lead = static_cast<uint8_t>(text[0]);
  const size_t length = lead < 0x80   ? 1
                        : lead < 0xC0 ? 0
                        : lead < 0xE0 ? 2
                        : lead < 0xF0 ? 3
                        : lead < 0xF8 ? 4
                                      : 0;
  if (length == 0 || length > text.size()) return 0;
  for (size_t i = 1; i < length; ++i) {
    if ((static_cast<uint8_t>(text[i]) & 0xC0) != 0x80) return 0;
  }
  return length;
}

// The bytes a code point starting with `lead` takes (llama.cpp's unicode_len_utf8: by the high
// four bits, 1 for a continuation byte).
size_t utf8_length_of_lead(char lead) {
  static constexpr uint8_t kLength[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLength[static_cast<uint8_t>(lead) >> 4];
}

// The normalised form of the start of `text` and how many bytes of it that consumes: input a
// user-defined token begins (any prefix of one) stays as it is; else the charsmap's longest match;
// else one character unchanged, or U+FFFD for one byte that does not begin a valid sequence.
std::string_view normalize_prefix(const UgmModel& m, std::string_view text, size_t& consumed) {
  consumed = m.user_defined.longest_path(text);
  if (consumed > 0) return text.substr(0, consumed);
  std::string_view replacement;
  consumed = m.charsmap.longest_match(text, replacement);
  if (consumed > 0) return replacement;
  consumed = utf8_sequence_length(text);
  if (consumed > 0) return text.substr(0, consumed);
  consumed = 1;
  return "\xEF\xBF\xBD";
}

// Normalises one text fragment. A space (an ASCII space in the charsmap's output) becomes "▁"
// (escape_whitespaces); with remove_extra_whitespaces runs of spaces are dropped and one goes
// before every word, else each stays and add_space_prefix puts one before the first word (after
// the last with treat_whitespace_as_suffix).
std::string normalize(const Vocab& v, std::string_view text) {
  const UgmModel& m = v.ugm;
  const std::string_view space = m.escape_whitespaces ? "\u2581" : " ";
  const bool prefix = !m.treat_whitespace_as_suffix && v.add_space_prefix;
  const bool suffix = m.treat_whitespace_as_suffix && v.add_space_prefix;
  const bool merge = m.remove_extra_whitespaces;
  std::string out;
  out.reserve(text.size() * 3);
  bool prefixed = false;
  bool in_word = false;
  for (size_t offset = 0; offset < text.size();) {
    size_t consumed = 0;
    for (char c : normalize_prefix(m, text.substr(offset), consumed)) {
      if (c == ' ') {
        in_word = false;
        if (!merge) out += space;
        continue;
      }
      if (!in_word) {
        in_word = true;
        if ((prefix && !prefixed) || merge) {
          out += space;
          prefixed = true;
        }
      }
      out += c;
    }
    offset += consumed;
  }
  if (suffix) out += space;
  return out;
}

struct Best {
  int32_t id;    // the last token of the best segmentation ending here
  size_t start;  // where that token starts
  double score;  // sum of scores (double, as SentencePiece)
};

}  // namespace

void ugm_encode(const Vocab& v, std::string_view text, std::vector<int32_t>& out) {
  const std::string norm = normalize(v, text);
  const size_t n = norm.size();
  if (n == 0) return;
  const int32_t unk = v.special.unk;
  std::vector<Best> best(n + 1, Best{unk, 0, -DBL_MAX});
  best[0].score = 0;
  // Of equal totals ending at one place the first found stays: the one whose last token starts
  // first.
  for (size_t i = 0; i < n;) {
    const size_t char_bytes = std::min(utf8_length_of_lead(norm[i]), n - i);
    const double score = best[i].score;
    bool char_token = false;  // a token covers exactly this code point
    v.ugm.tokens.for_each_prefix(std::string_view(norm).substr(i), [&](int32_t id, size_t len) {
      char_token = char_token || len == char_bytes;
      const TokenData& t = v.tokens[id];
      const double candidate = score + ((t.attr & kAttrUserDefined) ? 0.0 : double(t.score));
      if (candidate > best[i + len].score) best[i + len] = Best{id, i, candidate};
    });
    if (!char_token) {
      const double candidate = score + v.ugm.unknown_score;
      if (candidate > best[i + char_bytes].score) best[i + char_bytes] = Best{unk, i, candidate};
    }
    i += char_bytes;
  }
  // Back from the end; runs of unknown tokens become one.
  const size_t first = out.size();
  bool after_unknown = false;
  for (size_t end = n;;) {
    const Best& b = best[end];
    const bool unknown = b.id == unk;
    if (!(after_unknown && unknown) && b.id != kNoToken) out.push_back(b.id);
    if (b.start == 0) break;
    after_unknown = unknown;
    end = b.start;
  }
  std::reverse(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
}

}  // namespace specdec::tokenizer
