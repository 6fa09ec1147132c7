// SentencePiece-style BPE by score, as llama.cpp's llm_tokenizer_spm_session.
#include <algorithm>
#include <queue>

#include "tokenizer/encoders.h"
#include "tokenizer/unicode.h"

namespace specdec::tokenizer {
namespace {

struct Symbol {
  int32_t prev = -1;
  int32_t next = -1;
  size_t start = 0;  // byte offset in the fragment
  size_t size = 0;   // 0 once merged into its left neighbour
};

struct Bigram {
  int32_t left = 0;
  int32_t right = 0;
  float score = 0.0f;
  size_t size = 0;  // bytes of the merged text when queued
};

// Highest score first; ties: leftmost first.
struct BigramOrder {
  bool operator()(const Bigram& a, const Bigram& b) const {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  }
};

class SpmSession {
 public:
  SpmSession(const Vocab& vocab, std::string_view text) : vocab_(vocab), text_(text) {}

  void encode(std::vector<int32_t>& out) {
    for (size_t offset = 0; offset < text_.size();) {
      Symbol s;
      s.start = offset;
      // One character; an invalid byte is a symbol of its own (llama.cpp would let it swallow up
      // to 3 following bytes; valid text splits identically).
      uint32_t cp = 0;
      s.size = std::max<size_t>(decode_utf8_at(text_, offset, cp), 1);
      offset += s.size;
      s.prev = static_cast<int32_t>(symbols_.size()) - 1;
      s.next = offset == text_.size() ? -1 : static_cast<int32_t>(symbols_.size()) + 1;
      symbols_.push_back(s);
    }
    for (int32_t i = 1; i < static_cast<int32_t>(symbols_.size()); ++i) try_add(i - 1, i);
    while (!queue_.empty()) {
      const Bigram b = queue_.top();
      queue_.pop();
      Symbol& left = symbols_[b.left];
      Symbol& right = symbols_[b.right];
      // Stale: one side was merged since this pair was queued.
      if (left.size == 0 || right.size == 0 || left.size + right.size != b.size) continue;
      left.size += right.size;
      right.size = 0;
      left.next = right.next;
      if (right.next >= 0) symbols_[right.next].prev = b.left;
      try_add(left.prev, b.left);
      try_add(b.left, left.next);
    }
    for (int32_t i = symbols_.empty() ? -1 : 0; i != -1; i = symbols_[i].next)
      emit(symbols_[i], out);
  }

 private:
  void try_add(int32_t left, int32_t right) {
    if (left == -1 || right == -1) return;
    const size_t size = symbols_[left].size + symbols_[right].size;
    const int32_t id = vocab_.find(text_.substr(symbols_[left].start, size));
    if (id == kNoToken) return;
    queue_.push(Bigram{left, right, vocab_.tokens[id].score, size});
  }

  // A symbol is a token unless it is a character the vocabulary lacks: then its bytes.
  void emit(const Symbol& s, std::vector<int32_t>& out) const {
    const std::string_view text = text_.substr(s.start, s.size);
    const int32_t id = vocab_.find(text);
    if (id != kNoToken) {
      out.push_back(id);
      return;
    }
    for (char c : text) {
      const int32_t byte_id = vocab_.byte_tokens[uint8_t(c)];
      if (byte_id != kNoToken) {
        out.push_back(byte_id);
      } else if (vocab_.special.unk != kNoToken) {
        out.push_back(vocab_.special.unk);
      }
    }
  }

  const Vocab& vocab_;
  std::string_view text_;
  std::vector<Symbol> symbols_;
  std::priority_queue<Bigram, std::vector<Bigram>, BigramOrder> queue_;
};

}  // namespace

void spm_encode(const Vocab& vocab, std::string_view text, std::vector<int32_t>& out) {
  SpmSession(vocab, text).encode(out);
}

}  // namespace specdec::tokenizer
