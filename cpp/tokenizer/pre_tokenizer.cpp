#include "tokenizer/pre_tokenizer.h"

#include <utility>

#include "common/errors.h"
#include "tokenizer/unicode.h"

namespace specdec::tokenizer {
namespace {

// Accepted names; aliases are the names for which llama.cpp uses exactly the same regexes.
const std::vector<std::pair<std::string, PreTokenizer>>& name_table() {
  static const std::vector<std::pair<std::string, PreTokenizer>> table = {
      {"default", PreTokenizer::kDefault},
      {"gpt-2", PreTokenizer::kGpt2},
      {"phi-2", PreTokenizer::kGpt2},
      {"mpt", PreTokenizer::kGpt2},
      {"olmo", PreTokenizer::kGpt2},
      {"starcoder", PreTokenizer::kStarcoder},
      {"smollm", PreTokenizer::kStarcoder},
      {"refact", PreTokenizer::kStarcoder},
      {"codeshell", PreTokenizer::kStarcoder},
      {"qwen2", PreTokenizer::kQwen2},
      {"deepseek-r1-qwen", PreTokenizer::kQwen2},
      {"megrez", PreTokenizer::kQwen2},
      {"deepseek-coder", PreTokenizer::kDeepseekCoder},
      {"llama3", PreTokenizer::kLlama3},
      {"llama-v3", PreTokenizer::kLlama3},
      {"llama-bpe", PreTokenizer::kLlama3},
      {"falcon3", PreTokenizer::kLlama3},
      {"falcon-h1", PreTokenizer::kLlama3},
      {"pixtral", PreTokenizer::kLlama3},
      {"midm-2.0", PreTokenizer::kLlama3},
      {"lfm2", PreTokenizer::kLlama3},
  };
  return table;
}

// The text being split: code points and their flags, and the end of the current piece.
struct Cursor {
  const std::vector<uint32_t>& cps;
  std::vector<uint8_t> flags;
  size_t end = 0;

  bool has(size_t pos, uint8_t flag) const { return pos < end && (flags[pos] & flag); }
  bool letter(size_t pos) const { return has(pos, kFlagLetter); }
  bool number(size_t pos) const { return has(pos, kFlagNumber); }
  bool space(size_t pos) const { return has(pos, kFlagWhiteSpace); }
  // [^\s\p{L}\p{N}]
  bool other(size_t pos) const {
    return pos < end && !(flags[pos] & (kFlagWhiteSpace | kFlagLetter | kFlagNumber));
  }
  uint32_t at(size_t pos) const { return pos < end ? cps[pos] : 0xFFFFFFFF; }
  bool is(size_t pos, char c) const { return at(pos) == static_cast<uint32_t>(c); }
  bool newline(size_t pos) const { return is(pos, '\r') || is(pos, '\n'); }
  template <typename Pred>
  size_t run(size_t pos, Pred pred) const {
    while (pos < end && pred(pos)) ++pos;
    return pos;
  }
};

// A matcher returns the length of the match anchored at `pos` (0: no match).
using Matcher = size_t (*)(const Cursor&, size_t pos);

// 's|'t|'re|'ve|'m|'ll|'d, ASCII case-insensitive when `any_case`.
size_t match_contraction(const Cursor& c, size_t pos, bool any_case) {
  if (!c.is(pos, '\'')) return 0;
  auto lower = [&](size_t p) -> uint32_t {
    const uint32_t cp = c.at(p);
    return any_case && cp >= 'A' && cp <= 'Z' ? cp + 32 : cp;
  };
  const uint32_t a = lower(pos + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  const uint32_t b = lower(pos + 2);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// \s+(?!\S): a white-space run, less its last character when a non-space follows.
size_t match_trailing_space(const Cursor& c, size_t pos) {
  const size_t stop = c.run(pos, [&](size_t p) { return c.space(p); });
  const size_t n = stop - pos;
  if (n == 0) return 0;
  if (stop == c.end) return n;
  return n > 1 ? n - 1 : 0;
}

// <space>?X+ for one character class X.
template <typename Pred>
size_t match_space_then_run(const Cursor& c, size_t pos, Pred pred) {
  const size_t start = c.is(pos, ' ') && pred(pos + 1) ? pos + 1 : pos;
  if (!pred(start)) return 0;
  return c.run(start, pred) - pos;
}

size_t match_gpt2(const Cursor& c, size_t pos) {
  if (size_t n = match_contraction(c, pos, false)) return n;
  if (size_t n = match_space_then_run(c, pos, [&](size_t p) { return c.letter(p); })) return n;
  if (size_t n = match_space_then_run(c, pos, [&](size_t p) { return c.number(p); })) return n;
  if (size_t n = match_space_then_run(c, pos, [&](size_t p) { return c.other(p); })) return n;
  return match_trailing_space(c, pos);
}

// Qwen2's and Llama 3's expression, which differ only in how many digits a number piece takes
// (\p{N} and \p{N}{1,3}).
size_t match_qwen2_like(const Cursor& c, size_t pos, size_t max_digits) {
  if (size_t n = match_contraction(c, pos, true)) return n;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  const bool lead = !c.newline(pos) && !c.letter(pos) && !c.number(pos);
  if (lead && c.letter(pos + 1)) return c.run(pos + 1, [&](size_t p) { return c.letter(p); }) - pos;
  if (c.letter(pos)) return c.run(pos, [&](size_t p) { return c.letter(p); }) - pos;
  if (c.number(pos)) {  // \p{N}{1,max_digits}
    size_t n = 1;
    while (n < max_digits && c.number(pos + n)) ++n;
    return n;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  if (size_t n = match_space_then_run(c, pos, [&](size_t p) { return c.other(p); })) {
    return c.run(pos + n, [&](size_t p) { return c.newline(p); }) - pos;
  }
  // \s*[\r\n]+ : up to and including the last \r or \n of the white-space run.
  const size_t stop = c.run(pos, [&](size_t p) { return c.space(p); });
  for (size_t p = stop; p > pos; --p) {
    if (c.newline(p - 1)) return p - pos;
  }
  if (size_t n = match_trailing_space(c, pos)) return n;  // \s+(?!\S)
  return stop - pos;                                      // \s+
}

size_t match_qwen2(const Cursor& c, size_t pos) { return match_qwen2_like(c, pos, 1); }
size_t match_llama3(const Cursor& c, size_t pos) { return match_qwen2_like(c, pos, 3); }

size_t match_one_number(const Cursor& c, size_t pos) { return c.number(pos) ? 1 : 0; }

size_t match_numbers(const Cursor& c, size_t pos) {
  return c.run(pos, [&](size_t p) { return c.number(p); }) - pos;
}

size_t match_three_ascii_digits(const Cursor& c, size_t pos) {
  for (size_t k = 0; k < 3; ++k) {
    if (c.at(pos + k) < '0' || c.at(pos + k) > '9') return 0;
  }
  return 3;
}

// [\p{P}\$\+<=>\^~\|]+
size_t match_default_punctuation(const Cursor& c, size_t pos) {
  return c.run(pos, [&](size_t p) {
    const uint32_t cp = c.at(p);
    return c.has(p, kFlagPunctuation) || cp == '$' || cp == '+' || cp == '<' || cp == '=' ||
           cp == '>' || cp == '^' || cp == '~' || cp == '|';
  }) - pos;
}

size_t match_newline(const Cursor& c, size_t pos) { return c.newline(pos) ? 1 : 0; }

// \s?X+ for one character class X.
template <typename Pred>
size_t match_optional_space_then_run(const Cursor& c, size_t pos, Pred pred) {
  const size_t start = c.space(pos) && pred(pos + 1) ? pos + 1 : pos;
  if (!pred(start)) return 0;
  return c.run(start, pred) - pos;
}

size_t match_space_letters(const Cursor& c, size_t pos) {
  return match_optional_space_then_run(c, pos, [&](size_t p) { return c.letter(p); });
}

size_t match_space_punctuation(const Cursor& c, size_t pos) {
  return match_optional_space_then_run(c, pos,
                                       [&](size_t p) { return c.has(p, kFlagPunctuation); });
}

// [一-龥ࠀ-一가-퟿]+ : U+0800..U+9FA5 and U+AC00..U+D7FF. llama.cpp matches it on text where
// non-ASCII white space was replaced, so white space never matches.
size_t match_cjk(const Cursor& c, size_t pos) {
  return c.run(pos, [&](size_t p) {
    const uint32_t cp = c.at(p);
    return ((cp >= 0x0800 && cp <= 0x9FA5) || (cp >= 0xAC00 && cp <= 0xD7FF)) && !c.space(p);
  }) - pos;
}

const std::vector<Matcher>& stages(PreTokenizer pre) {
  static const std::vector<Matcher> kDefault = {match_default_punctuation, match_gpt2,
                                                match_numbers, match_three_ascii_digits};
  static const std::vector<Matcher> kGpt2 = {match_gpt2};
  static const std::vector<Matcher> kStarcoder = {match_one_number, match_gpt2};
  static const std::vector<Matcher> kQwen2 = {match_qwen2};
  static const std::vector<Matcher> kLlama3 = {match_llama3};
  static const std::vector<Matcher> kDeepseekCoder = {
      match_newline, match_space_letters, match_space_punctuation, match_cjk, match_one_number};
  switch (pre) {
    case PreTokenizer::kGpt2:
      return kGpt2;
    case PreTokenizer::kStarcoder:
      return kStarcoder;
    case PreTokenizer::kQwen2:
      return kQwen2;
    case PreTokenizer::kLlama3:
      return kLlama3;
    case PreTokenizer::kDeepseekCoder:
      return kDeepseekCoder;
    case PreTokenizer::kDefault:
      break;
  }
  return kDefault;
}

// Splits every piece with one matcher: matches and the gaps between them become pieces.
std::vector<size_t> split_stage(Cursor& c, Matcher match, const std::vector<size_t>& pieces) {
  std::vector<size_t> out;
  out.reserve(pieces.size() * 2);
  size_t start = 0;
  for (size_t length : pieces) {
    c.end = start + length;
    size_t gap = start;
    for (size_t pos = start; pos < c.end;) {
      const size_t n = match(c, pos);
      if (n == 0) {
        ++pos;
        continue;
      }
      if (pos > gap) out.push_back(pos - gap);
      out.push_back(n);
      pos += n;
      gap = pos;
    }
    if (c.end > gap) out.push_back(c.end - gap);
    start = c.end;
  }
  return out;
}

}  // namespace

PreTokenizer pre_tokenizer_from_name(const std::string& name) {
  for (const auto& [known, pre] : name_table()) {
    if (known == name) return pre;
  }
  throw UnsupportedError(str_cat(
      "tokenizer.ggml.pre = '", name,
      "' is not a supported BPE pre-tokenizer; supported: ", supported_pre_tokenizer_names()));
}

std::string supported_pre_tokenizer_names() {
  std::string out;
  for (const auto& [name, pre] : name_table()) out += (out.empty() ? "" : ", ") + name;
  return out;
}

std::vector<size_t> pre_tokenize(PreTokenizer pre, const std::vector<uint32_t>& cps) {
  if (cps.empty()) return {};
  Cursor cursor{cps, std::vector<uint8_t>(cps.size()), cps.size()};
  for (size_t i = 0; i < cps.size(); ++i) cursor.flags[i] = code_point_flags(cps[i]);
  std::vector<size_t> pieces = {cps.size()};
  for (Matcher match : stages(pre)) pieces = split_stage(cursor, match, pieces);
  return pieces;
}

}  // namespace specdec::tokenizer
