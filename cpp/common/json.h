// JSON from untrusted text (config.json, speculative_config, ...): nesting bounded while parsing,
// and a short rendering of a value for error messages that never recurses.
//
// nlohmann's parser and destructor are iterative, but dump(), copies and comparisons recurse once
// per level: a value nested 100,000 deep overflows the stack (SIGSEGV). parse_json refuses such
// text before its tree is built, and json_summary renders any value with an explicit stack.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace specdec {

// Nesting levels of arrays and objects that parse_json accepts (real configs nest 3 or 4).
inline constexpr int kMaxJsonDepth = 64;

// `text` parsed as one JSON value, refusing more than `max_depth` nested arrays and objects as it
// parses. Throws FormatError whose message is the reason alone (syntax error or too deep, at most
// a few hundred characters); callers put the file or the field in front.
nlohmann::json parse_json(std::string_view text, int max_depth = kMaxJsonDepth);

// `value` as compact JSON text, cut to `max_chars` characters ("..." at the end when cut). Built
// with an explicit stack: any depth and size, in O(max_chars) work and memory.
std::string json_summary(const nlohmann::json& value, size_t max_chars = 80);

}  // namespace specdec
