// Byte-level BPE with ranked merges, as llama.cpp's llm_tokenizer_bpe_session: symbols are token
// ids, a merge is one hash lookup of the (left, right) pair, and a priority queue orders merges.
#include <algorithm>
#include <queue>
#include <string>
#include <unordered_map>
#include <utility>

#include "tokenizer/encoders.h"
#include "tokenizer/unicode.h"

namespace specdec::tokenizer {
namespace {

// Bytes of the UTF-8 character that starts with `lead`, by its high bits as llama.cpp counts them
// (a stray continuation byte is one character).
size_t utf8_length(uint8_t lead) {
  static constexpr uint8_t kLengths[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLengths[lead >> 4];
}

struct Symbol {
  int32_t id = kNoToken;  // token, or extra symbol (>= vocab size), or kNoToken
  int32_t prev = -1;
  int32_t next = -1;
  uint32_t start = 0;  // byte offset in the word
  uint32_t size = 0;   // 0 once merged into its left neighbour
};

struct Candidate {
  int32_t rank = 0;
  int32_t left = 0;
  int32_t right = 0;
  int32_t result = 0;
  uint32_t size = 0;  // bytes of the merged text when queued
};

// Lowest rank first; ties: leftmost first.
struct CandidateOrder {
  bool operator()(const Candidate& a, const Candidate& b) const {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  }
};

class BpeSession {
 public:
  explicit BpeSession(const Vocab& vocab) : vocab_(vocab) {}

  void encode_word(std::string_view word, std::vector<int32_t>& out) {
    symbols_.clear();
    // Byte-level: one symbol per byte (its GPT-2 character's token). UTF-8 symbols: one per
    // character, the token of its text (or none: the character then only falls back to bytes).
    for (uint32_t i = 0; i < word.size();) {
      const uint32_t size =
          vocab_.utf8_symbols
              ? static_cast<uint32_t>(std::min<size_t>(utf8_length(uint8_t(word[i])), word.size() - i))
              : 1;
      const int32_t id = vocab_.utf8_symbols ? vocab_.find(word.substr(i, size))
                                             : vocab_.byte_tokens[uint8_t(word[i])];
      const int32_t n = static_cast<int32_t>(symbols_.size());
      symbols_.push_back(Symbol{id, n - 1, i + size == word.size() ? -1 : n + 1, i, size});
      i += size;
    }
    for (int32_t i = 1; i < static_cast<int32_t>(symbols_.size()); ++i) try_add(i - 1, i);
    while (!queue_.empty()) {
      const Candidate c = queue_.top();
      queue_.pop();
      Symbol& left = symbols_[c.left];
      Symbol& right = symbols_[c.right];
      if (left.size == 0 || right.size == 0 || left.size + right.size != c.size) continue;  // stale
      left.id = c.result;
      left.size += right.size;
      right.size = 0;
      left.next = right.next;
      if (right.next >= 0) symbols_[right.next].prev = c.left;
      try_add(left.prev, c.left);
      try_add(c.left, left.next);
    }
    for (int32_t i = symbols_.empty() ? -1 : 0; i != -1; i = symbols_[i].next) {
      emit(word, symbols_[i], out);
    }
  }

 private:
  void try_add(int32_t left, int32_t right) {
    if (left == -1 || right == -1) return;
    const int32_t a = symbols_[left].id;
    const int32_t b = symbols_[right].id;
    if (a == kNoToken || b == kNoToken) return;
    const auto it = vocab_.merges.find((uint64_t(uint32_t(a)) << 32) | uint32_t(b));
    if (it == vocab_.merges.end()) return;
    queue_.push(Candidate{it->second.rank, left, right, it->second.result,
                          symbols_[left].size + symbols_[right].size});
  }

  // A merge result that is not a token falls back to one token per byte.
  void emit(std::string_view word, const Symbol& s, std::vector<int32_t>& out) const {
    if (s.id != kNoToken && s.id < vocab_.size()) {
      out.push_back(s.id);
      return;
    }
    for (char c : word.substr(s.start, s.size)) {
      const int32_t id = vocab_.byte_tokens[uint8_t(c)];
      if (id != kNoToken) out.push_back(id);
    }
  }

  const Vocab& vocab_;
  std::vector<Symbol> symbols_;
  std::priority_queue<Candidate, std::vector<Candidate>, CandidateOrder> queue_;
};

}  // namespace

void bpe_encode(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out) {
  const std::vector<uint32_t> cps = decode_utf8(text);
  BpeSession session(vocab);
  // Words repeat (code, prose): the tokens of each distinct word are computed once per call, as
  // (offset, count) into `out`.
  std::unordered_map<std::string, std::pair<size_t, size_t>> seen;
  std::string word, gpt2;
  size_t start = 0;
  for (size_t length : pre_tokenize(vocab.pre, cps)) {
    word.clear();
    for (size_t i = start; i < start + length; ++i) append_utf8(cps[i], word);
    start += length;
    if (vocab.utf8_symbols) {  // a run of newlines that is a token is taken whole (llama.cpp)
      const int32_t id = word.find_first_not_of('\n') == std::string::npos ? vocab.find(word)
                                                                             : kNoToken;
      if (id != kNoToken) {
        out.push_back(id);
        continue;
      }
    } else if (word.size() == 1 && vocab.byte_tokens[uint8_t(word[0])] != kNoToken) {
      out.push_back(vocab.byte_tokens[uint8_t(word[0])]);
      continue;
    }
    if (vocab.ignore_merges) {  // the whole pre-token, when it is a token
      gpt2.clear();
      for (const char b : word) append_utf8(gpt2_byte_to_code_point(uint8_t(b)), gpt2);
      const int32_t id = vocab.find(gpt2);
      if (id != kNoToken) {
        out.push_back(id);
        continue;
      }
    }
    const auto it = seen.find(word);
    if (it != seen.end()) {
      const auto [offset, count] = it->second;
      const size_t end = out.size();
      out.resize(end + count);
      std::copy(out.begin() + offset, out.begin() + offset + count, out.begin() + end);
      continue;
    }
    const size_t offset = out.size();
    session.encode_word(word, out);
    seen.emplace(word, std::make_pair(offset, out.size() - offset));
  }
}

}  // namespace specdec::tokenizer
