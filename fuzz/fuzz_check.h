// What both fuzz targets check besides the sanitizers: an invariant that fails traps (a libFuzzer
// finding), and every error a reader throws has a message that is non-empty valid UTF-8 (the
// bindings turn it into a Python str; invalid UTF-8 there would replace specdec.FormatError with a
// UnicodeDecodeError).
#pragma once

#include <cstdint>
#include <cstdio>
#include <exception>
#include <string_view>

namespace specdec::fuzz {

// Traps with `what` on stderr unless `cond` holds.
inline void check(bool cond, const char* what) {
  if (!cond) {
    std::fprintf(stderr, "fuzz invariant violated: %s\n", what);
    __builtin_trap();
  }
}

// Whether `text` is well-formed UTF-8 (no overlongs, surrogates or code points past U+10FFFF).
inline bool is_valid_utf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<uint8_t>(text[i]);
    size_t len = 0;
    uint32_t cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2, cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3, cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > text.size()) return false;
    for (size_t k = 1; k < len; ++k) {
      const auto next = static_cast<uint8_t>(text[i + k]);
      if ((next & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (next & 0x3F);
    }
    const uint32_t min_cp = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
    if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

// A documented error was thrown: its message must be usable.
inline void check_error(const std::exception& error) {
  const std::string_view message = error.what();
  check(!message.empty(), "error message is empty");
  if (!is_valid_utf8(message)) {
    std::fprintf(stderr, "error message is not valid UTF-8: %s\n", error.what());
    __builtin_trap();
  }
}

// Keeps values alive so the compiler cannot drop the reads that produce them.
inline void consume(uint64_t value) {
  static volatile uint64_t sink = 0;
  sink = sink + value;
}

}  // namespace specdec::fuzz
