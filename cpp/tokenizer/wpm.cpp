// WordPiece (`tokenizer.ggml.model = bert`), as llama.cpp's llm_tokenizer_wpm_session: the text is
// normalised (NFD base and accents dropped, lower case, both on by default), split at white space
// and around punctuation, ASCII symbols and CJK ideographs; each word, with the phantom space "▁"
// in front (llama.cpp's converter writes word-initial pieces as "▁x" and "##x" as "x"), is cut
// greedily into the longest tokens from the left. A word with a part no token covers becomes UNK.
#include <algorithm>
#include <string>
#include <vector>

#include "tokenizer/encoders.h"
#include "tokenizer/unicode.h"

namespace specdec::tokenizer {
namespace {

bool is_cjk_ideograph(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) ||
         (cp >= 0x20000 && cp <= 0x2A6DF) || (cp >= 0x2A700 && cp <= 0x2B73F) ||
         (cp >= 0x2B740 && cp <= 0x2B81F) ||
         (cp >= 0x2B920 && cp <= 0x2CEAF) ||  // (from 0x2B920, as Hugging Face's Rust code)
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

std::vector<std::string> wpm_words(const Vocab& v, std::string_view text) {
  std::vector<std::string> words(1);
  for (uint32_t cp : decode_utf8(text)) {
    if (v.wpm_strip_accents) cp = nfd_base(cp);
    const CodePointClass cls = code_point_class(cp);
    if (is_white_space(cp)) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    if (cp == 0 || cp == 0xFFFD || cls == CodePointClass::kControl) continue;
    if (v.wpm_strip_accents && cls == CodePointClass::kMark) continue;
    std::string piece;
    append_utf8(v.wpm_lowercase ? to_lower(cp) : cp, piece);
    if (cls == CodePointClass::kPunctuation || (cp < 0x7F && cls == CodePointClass::kSymbol) ||
        is_cjk_ideograph(cp)) {
      if (!words.back().empty()) words.emplace_back();
      words.back() = piece;  // a word of its own
      words.emplace_back();
    } else {
      words.back() += piece;
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

}  // namespace

void wpm_encode(const Vocab& v, std::string_view text, std::vector<int32_t>& out) {
  for (const std::string& word : wpm_words(v, text)) {
    const std::string w = "\u2581" + word;
    const size_t before = out.size();
    for (size_t i = 0; i < w.size();) {
      int32_t id = kNoToken;
      size_t j = std::min(w.size(), i + v.max_token_bytes);
      for (; j > i; --j) {
        id = v.find(std::string_view(w).substr(i, j - i));
        if (id != kNoToken) break;
      }
      if (id == kNoToken) {  // a part no token covers: the whole word is unknown
        out.resize(before);
        break;
      }
      out.push_back(id);
      i = j;
    }
    if (out.size() == before && v.special.unk != kNoToken) out.push_back(v.special.unk);
  }
}

}  // namespace specdec::tokenizer
