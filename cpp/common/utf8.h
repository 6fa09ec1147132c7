// Well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF), for
// readers of model files: GGUF strings must be UTF-8 by the format, and every text that reaches
// Python must be, since a Python str cannot hold invalid bytes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace specdec {

// Length of the well-formed UTF-8 sequence at the start of `text`, or 0 if there is none.
inline size_t utf8_sequence_bytes(std::string_view text) {
  if (text.empty()) return 0;
  const auto lead = static_cast<uint8_t>(text[0]);
  if (lead < 0x80) return 1;
  const size_t length = lead >= 0xF8   ? 0
                        : lead >= 0xF0 ? 4
                        : lead >= 0xE0 ? 3
                        : lead >= 0xC0 ? 2
                                       : 0;
  if (length == 0 || length > text.size()) return 0;
  uint32_t code_point = lead & (0x7F >> length);
  for (size_t i = 1; i < length; ++i) {
    const auto next = static_cast<uint8_t>(text[i]);
    if ((next & 0xC0) != 0x80) return 0;
    code_point = (code_point << 6) | (next & 0x3F);
  }
  const uint32_t min_code_point = length == 2 ? 0x80 : length == 3 ? 0x800 : 0x10000;
  const bool surrogate = code_point >= 0xD800 && code_point <= 0xDFFF;
  return code_point < min_code_point || code_point > 0x10FFFF || surrogate ? 0 : length;
}

// The offset of the first byte of `text` that is not part of well-formed UTF-8, or npos.
inline size_t invalid_utf8_offset(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t length = utf8_sequence_bytes(text.substr(pos));
    if (length == 0) return pos;
    pos += length;
  }
  return std::string_view::npos;
}

// `text` with every byte that is not part of well-formed UTF-8 replaced by '?' (for messages that
// quote file bytes).
inline std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  while (!text.empty()) {
    const size_t length = utf8_sequence_bytes(text);
    out += length == 0 ? std::string_view("?") : text.substr(0, length);
    text.remove_prefix(std::max<size_t>(length, 1));
  }
  return out;
}

}  // namespace specdec
