// SentencePiece's precompiled normaliser: an XOR-compressed compact double array (XCDA, Kanda
// 2018, as written by darts-clone) over input bytes. From the root, the child of node state `s`
// for byte c is index s ^ c if that node's LCHECK is c; the next state is that index ^ its BASE.
// A LEAF node's next state indexes a value node holding the offset of the replacement string.
#include <algorithm>
#include <cstring>

#include "common/errors.h"
#include "tokenizer/ugm.h"

namespace specdec::tokenizer {

namespace {

uint32_t read_u32_le(std::string_view bytes, size_t offset) {
  return uint32_t(uint8_t(bytes[offset])) | uint32_t(uint8_t(bytes[offset + 1])) << 8 |
         uint32_t(uint8_t(bytes[offset + 2])) << 16 | uint32_t(uint8_t(bytes[offset + 3])) << 24;
}

}  // namespace

Charsmap Charsmap::parse(std::string_view blob) {
  if (blob.size() < 4) {
    throw FormatError(str_cat("has ", blob.size(),
                              " bytes; it must start with the 4-byte size of its double array"));
  }
  const uint64_t array_bytes = read_u32_le(blob, 0);
  if (array_bytes % 4 != 0) {
    throw FormatError(str_cat("says its double array has ", array_bytes,
                              " bytes, which is not a whole number of 4-byte nodes"));
  }
  if (4 + array_bytes >= blob.size()) {
    throw FormatError(str_cat("says its double array has ", array_bytes, " bytes but only ",
                              blob.size() - 4,
                              " follow the size field, and the replacement strings must follow "
                              "the array"));
  }
  Charsmap map;
  map.nodes_.resize(array_bytes / 4);
  for (size_t i = 0; i < map.nodes_.size(); ++i) map.nodes_[i] = read_u32_le(blob, 4 + 4 * i);
  map.replacements_ = std::string(blob.substr(4 + array_bytes));
  map.validate();
  return map;
}

uint32_t Charsmap::base(uint32_t i) const {
  const uint32_t node = nodes_[i];
  return (node >> 10) << ((node & (1u << 9)) >> 6);  // bit 9: BASE is stored >> 8
}

// Walks every state a lookup can reach (all bytes 1..255 from each), so that longest_match needs
// no checks: each reachable state's 256-node block lies inside the array, and each replacement it
// can return starts inside the strings and ends with a NUL there.
void Charsmap::validate() const {
  const size_t n = nodes_.size();
  if (n == 0) return;
  // `from`: the node whose BASE gave `state` (-1: the root's)
  auto check_state = [&](uint32_t state, int64_t from) {
    if ((uint64_t{state} | 0xFF) >= n) {
      throw FormatError(str_cat("has ", n, " nodes but the BASE of node ",
                                std::max<int64_t>(from, 0), " leads to state ", state,
                                ", whose children would be nodes up to ", uint64_t{state} | 0xFF,
                                " (a corrupt double array)"));
    }
  };
  const uint32_t root = base(0);
  check_state(root, -1);
  std::vector<bool> seen(n, false);
  std::vector<uint32_t> stack = {root};
  seen[root] = true;
  while (!stack.empty()) {
    const uint32_t state = stack.back();
    stack.pop_back();
    for (uint32_t c = 1; c < 256; ++c) {
      const uint32_t index = state ^ c;
      if (lcheck(index) != c) continue;
      const uint32_t next = index ^ base(index);
      check_state(next, index);
      if (leaf(index)) {
        const uint32_t offset = value(next);
        if (offset >= replacements_.size() ||
            std::memchr(replacements_.data() + offset, '\0', replacements_.size() - offset) ==
                nullptr) {
          throw FormatError(str_cat("value node ", next, " points to replacement offset ", offset,
                                    ", which does not start a NUL-terminated string inside the ",
                                    replacements_.size(), " bytes of replacement strings"));
        }
      }
      if (!seen[next]) {
        seen[next] = true;
        stack.push_back(next);
      }
    }
  }
}

size_t Charsmap::longest_match(std::string_view text, std::string_view& replacement) const {
  if (nodes_.empty()) return 0;
  size_t length = 0;
  uint32_t state = base(0);
  for (size_t i = 0; i < text.size(); ++i) {
    const uint32_t c = uint8_t(text[i]);
    if (c == 0) break;
    const uint32_t index = state ^ c;  // inside the array: validate() checked every state's block
    if (lcheck(index) != c) break;
    state = index ^ base(index);
    if (leaf(index)) {
      length = i + 1;
      replacement = std::string_view(replacements_.c_str() + value(state));
    }
  }
  return length;
}

}  // namespace specdec::tokenizer
