#include "tokenizer/pre_tokenizer.h"

#include <iterator>
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
      {"deepseek-llm", PreTokenizer::kDeepseekLlm},
      {"falcon", PreTokenizer::kFalcon},
      {"command-r", PreTokenizer::kStarcoder},
      {"qwen35", PreTokenizer::kQwen35},
      {"gemma4", PreTokenizer::kNewlines},
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
  // [\p{L}\p{M}] and [^\s\p{L}\p{M}\p{N}] (Qwen3.5)
  bool letter_or_mark(size_t pos) const { return has(pos, kFlagLetter | kFlagMark); }
  bool other_than_mark(size_t pos) const {
    return pos < end && !(flags[pos] & (kFlagWhiteSpace | kFlagLetter | kFlagMark | kFlagNumber));
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

// Qwen2's, Llama 3's and Qwen3.5's expression. They differ in how many digits a number piece
// takes (\p{N} and \p{N}{1,3}) and in whether marks join letters (Qwen3.5: [\p{L}\p{M}]+ and
// [^\s\p{L}\p{M}\p{N}]).
size_t match_qwen2_like(const Cursor& c, size_t pos, size_t max_digits, bool marks = false) {
  if (size_t n = match_contraction(c, pos, true)) return n;
  auto word = [&](size_t p) { return marks ? c.letter_or_mark(p) : c.letter(p); };
  auto other = [&](size_t p) { return marks ? c.other_than_mark(p) : c.other(p); };
  // [^\r\n\p{L}\p{N}]?\p{L}+
  const bool lead = !c.newline(pos) && !c.letter(pos) && !c.number(pos);
  if (lead && word(pos + 1)) return c.run(pos + 1, word) - pos;
  if (word(pos)) return c.run(pos, word) - pos;
  if (c.number(pos)) {  // \p{N}{1,max_digits}
    size_t n = 1;
    while (n < max_digits && c.number(pos + n)) ++n;
    return n;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  if (size_t n = match_space_then_run(c, pos, other)) {
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
size_t match_qwen35(const Cursor& c, size_t pos) { return match_qwen2_like(c, pos, 1, true); }

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

// [\p{P}\$\+<=>\^~\|]+ (Falcon: and `)
template <bool kBacktick>
size_t match_punctuation_run(const Cursor& c, size_t pos) {
  return c.run(pos, [&](size_t p) {
    const uint32_t cp = c.at(p);
    return c.has(p, kFlagPunctuation) || cp == '$' || cp == '+' || cp == '<' || cp == '=' ||
           cp == '>' || cp == '^' || cp == '~' || cp == '|' || (kBacktick && cp == '`');
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

// DeepSeek-LLM's letters: the cased letters of its expression \s?[A-Za-zµÀ-ÖØ-ö...]+ as code-point
// ranges. llama.cpp runs these expressions with std::wregex on text where non-ASCII white space
// became \v, so \s is Unicode white space and no white space is a class member.
constexpr std::pair<uint32_t, uint32_t> kDeepseekLetters[] = {
    {0x0041, 0x005A}, {0x0061, 0x007A}, {0x00B5, 0x00B5}, {0x00C0, 0x00D6}, {0x00D8, 0x00F6},
    {0x00F8, 0x01BA}, {0x01BC, 0x01BF}, {0x01C4, 0x0293}, {0x0295, 0x02AF}, {0x0370, 0x0373},
    {0x0376, 0x0377}, {0x037B, 0x037D}, {0x037F, 0x037F}, {0x0386, 0x0386}, {0x0388, 0x038A},
    {0x038C, 0x038C}, {0x038E, 0x03A1}, {0x03A3, 0x03F5}, {0x03F7, 0x0481}, {0x048A, 0x052F},
    {0x0531, 0x0556}, {0x10A0, 0x10C5}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD}, {0x1C90, 0x1CBA},
    {0x1CBD, 0x1CBF}, {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77}, {0x1D79, 0x1D9A}, {0x1E00, 0x1F15},
    {0x1F18, 0x1F1D}, {0x1F20, 0x1F45}, {0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F59},
    {0x1F5B, 0x1F5B}, {0x1F5D, 0x1F5D}, {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC},
    {0x1FBE, 0x1FBE}, {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC}, {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB},
    {0x1FE0, 0x1FEC}, {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC}, {0x2102, 0x2102}, {0x2107, 0x2107},
    {0x210A, 0x2113}, {0x2115, 0x2115}, {0x2119, 0x211D}, {0x2124, 0x2124}, {0x2126, 0x2126},
    {0x2128, 0x2128}, {0x212A, 0x212D}, {0x212F, 0x2134}, {0x2139, 0x2139}, {0x213C, 0x213F},
    {0x2145, 0x2149}, {0x214E, 0x214E}, {0x2183, 0x2184}, {0x2C00, 0x2C7B}, {0x2C7E, 0x2CE4},
    {0x2CEB, 0x2CEE}, {0x2CF2, 0x2CF3}, {0xA640, 0xA66D}, {0xA680, 0xA69B}, {0xA722, 0xA76F},
    {0xA771, 0xA787}, {0xA78B, 0xA78E}, {0xAB70, 0xABBF}, {0xFB00, 0xFB06}, {0xFB13, 0xFB17},
    {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A}, {0x10400, 0x1044F}, {0x104B0, 0x104D3},
    {0x104D8, 0x104FB}, {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF},
    {0x1E900, 0x1E943}};

bool in_ranges(uint32_t cp, const std::pair<uint32_t, uint32_t>* first, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if (cp >= first[i].first && cp <= first[i].second) return true;
  }
  return false;
}

size_t match_deepseek_letters(const Cursor& c, size_t pos) {
  return match_optional_space_then_run(c, pos, [&](size_t p) {
    return !c.space(p) && in_ranges(c.at(p), kDeepseekLetters, std::size(kDeepseekLetters));
  });
}

// \s?[!-/:-~！-／：-～‘-‟　-。]+
size_t match_deepseek_symbols(const Cursor& c, size_t pos) {
  static constexpr std::pair<uint32_t, uint32_t> kSymbols[] = {
      {0x21, 0x2F}, {0x3A, 0x7E}, {0xFF01, 0xFF0F}, {0xFF1A, 0xFF5E}, {0x2018, 0x201F},
      {0x3000, 0x3002}};
  return match_optional_space_then_run(c, pos, [&](size_t p) {
    return !c.space(p) && in_ranges(c.at(p), kSymbols, std::size(kSymbols));
  });
}

// [^\n]+|[\n]+
size_t match_line_or_newlines(const Cursor& c, size_t pos) {
  const bool newline = c.is(pos, '\n');
  return c.run(pos, [&](size_t p) { return c.is(p, '\n') == newline; }) - pos;
}

// \s+$ : the white space that ends the piece.
size_t match_space_at_end(const Cursor& c, size_t pos) {
  const size_t stop = c.run(pos, [&](size_t p) { return c.space(p); });
  return stop == c.end ? stop - pos : 0;
}

const std::vector<Matcher>& stages(PreTokenizer pre) {
  static const std::vector<Matcher> kDefault = {match_punctuation_run<false>, match_gpt2,
                                                match_numbers, match_three_ascii_digits};
  static const std::vector<Matcher> kFalcon = {match_punctuation_run<true>, match_gpt2,
                                               match_three_ascii_digits};
  static const std::vector<Matcher> kQwen35 = {match_qwen35};
  static const std::vector<Matcher> kNewlines = {match_line_or_newlines};
  static const std::vector<Matcher> kDeepseekLlm = {match_newline, match_deepseek_letters,
                                                    match_deepseek_symbols, match_space_at_end,
                                                    match_cjk, match_numbers};
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
    case PreTokenizer::kDeepseekLlm:
      return kDeepseekLlm;
    case PreTokenizer::kFalcon:
      return kFalcon;
    case PreTokenizer::kQwen35:
      return kQwen35;
    case PreTokenizer::kNewlines:
      return kNewlines;
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
