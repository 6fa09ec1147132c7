#include "tokenizer/unicode.h"

#include <algorithm>
#include <array>

namespace specdec::tokenizer {
namespace detail {
extern const uint32_t kClassRanges[];
extern const size_t kNumClassRanges;
extern const uint32_t kWhiteSpace[];
extern const size_t kNumWhiteSpace;
extern const uint32_t kLowercase[][2];
extern const size_t kNumLowercase;
extern const uint32_t kNfdBase[][3];
extern const size_t kNumNfdBase;
}  // namespace detail

namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr uint32_t kBmpSize = 0x10000;

CodePointClass class_by_search(uint32_t cp) {
  const uint32_t* begin = detail::kClassRanges;
  const uint32_t* end = begin + detail::kNumClassRanges;
  // The last range whose first code point is <= cp.
  const uint32_t* it = std::upper_bound(
      begin, end, cp, [](uint32_t value, uint32_t range) { return value < (range >> 8); });
  return static_cast<CodePointClass>(*(it - 1) & 0xFF);
}

uint8_t flags_of_class(CodePointClass cls) {
  switch (cls) {
    case CodePointClass::kLetter:
      return kFlagLetter;
    case CodePointClass::kNumber:
      return kFlagNumber;
    case CodePointClass::kPunctuation:
      return kFlagPunctuation;
    case CodePointClass::kSymbol:
      return kFlagSymbol;
    case CodePointClass::kMark:
      return kFlagMark;
    default:
      return 0;
  }
}

// Class (low 4 bits) and white-space bit (bit 7) of every BMP code point, built once.
struct BmpTable {
  std::array<uint8_t, kBmpSize> entries{};
  BmpTable() {
    for (size_t i = 0; i < detail::kNumClassRanges; ++i) {
      const uint32_t first = detail::kClassRanges[i] >> 8;
      const uint32_t last =
          i + 1 < detail::kNumClassRanges ? detail::kClassRanges[i + 1] >> 8 : kMaxCodePoint + 1;
      for (uint32_t cp = first; cp < std::min(last, kBmpSize); ++cp) {
        entries[cp] = static_cast<uint8_t>(detail::kClassRanges[i] & 0xFF);
      }
    }
    for (size_t i = 0; i < detail::kNumWhiteSpace; ++i) entries[detail::kWhiteSpace[i]] |= 0x80;
  }
};

const BmpTable& bmp_table() {
  static const BmpTable table;
  return table;
}

bool is_continuation(uint8_t byte) { return (byte & 0xC0) == 0x80; }

}  // namespace

CodePointClass code_point_class(uint32_t cp) {
  if (cp < kBmpSize) return static_cast<CodePointClass>(bmp_table().entries[cp] & 0x0F);
  if (cp > kMaxCodePoint) return CodePointClass::kUndefined;
  return class_by_search(cp);
}

bool is_white_space(uint32_t cp) { return cp < kBmpSize && (bmp_table().entries[cp] & 0x80); }

uint8_t code_point_flags(uint32_t cp) {
  if (cp < kBmpSize) {
    const uint8_t entry = bmp_table().entries[cp];
    const uint8_t flags = flags_of_class(static_cast<CodePointClass>(entry & 0x0F));
    return (entry & 0x80) ? static_cast<uint8_t>(flags | kFlagWhiteSpace) : flags;
  }
  return cp > kMaxCodePoint ? 0 : flags_of_class(class_by_search(cp));
}

uint32_t to_lower(uint32_t cp) {
  const auto* end = detail::kLowercase + detail::kNumLowercase;
  const auto* it = std::lower_bound(detail::kLowercase, end, cp,
                                    [](const uint32_t(&pair)[2], uint32_t c) { return pair[0] < c; });
  return it != end && (*it)[0] == cp ? (*it)[1] : cp;
}

uint32_t nfd_base(uint32_t cp) {
  const auto* end = detail::kNfdBase + detail::kNumNfdBase;
  const auto* it = std::upper_bound(detail::kNfdBase, end, cp,
                                    [](uint32_t c, const uint32_t(&run)[3]) { return c < run[0]; });
  if (it == detail::kNfdBase) return cp;
  --it;
  return cp <= (*it)[1] ? (*it)[2] : cp;
}

size_t decode_utf8_at(std::string_view text, size_t offset, uint32_t& cp) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  const uint8_t b = s[offset];
  size_t len = 0;
  uint32_t value = 0;
  if (b < 0x80) {
    cp = b;
    return 1;
  } else if ((b & 0xE0) == 0xC0) {
    len = 2, value = b & 0x1F;
  } else if ((b & 0xF0) == 0xE0) {
    len = 3, value = b & 0x0F;
  } else if ((b & 0xF8) == 0xF0) {
    len = 4, value = b & 0x07;
  }
  bool ok = len > 0 && offset + len <= n;
  for (size_t k = 1; ok && k < len; ++k) {
    ok = is_continuation(s[offset + k]);
    value = (value << 6) | (s[offset + k] & 0x3F);
  }
  if (!ok || value > kMaxCodePoint) {
    cp = kReplacementChar;
    return 0;
  }
  cp = value;
  return len;
}

std::vector<uint32_t> decode_utf8(std::string_view text) {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    const size_t len = decode_utf8_at(text, i, cp);
    out.push_back(cp);
    i += len == 0 ? 1 : len;
  }
  return out;
}

void append_utf8(uint32_t cp, std::string& out) {
  if (cp > kMaxCodePoint) cp = kReplacementChar;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

size_t complete_utf8_prefix(std::string_view bytes) {
  const auto* s = reinterpret_cast<const uint8_t*>(bytes.data());
  const size_t n = bytes.size();
  // A character has at most 4 bytes: only the last 3 can be an unfinished beginning.
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const uint8_t lead = s[n - back];
    if (is_continuation(lead)) continue;
    size_t need = 0;
    uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (lead >= 0xC2 && lead <= 0xDF) {
      need = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      need = 3;
      if (lead == 0xE0) lo = 0xA0;
      if (lead == 0xED) hi = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      need = 4;
      if (lead == 0xF0) lo = 0x90;
      if (lead == 0xF4) hi = 0x8F;
    }
    if (need <= back) return n;  // ASCII, invalid lead, or a complete character
    // Held back only while every byte so far is a valid continuation of this lead.
    bool valid = true;
    for (size_t k = 1; k < back; ++k) {
      const uint8_t c = s[n - back + k];
      valid = valid && (k == 1 ? (c >= lo && c <= hi) : is_continuation(c));
    }
    return valid ? n - back : n;
  }
  return n;
}

}  // namespace specdec::tokenizer
