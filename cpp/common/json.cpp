#include "common/json.h"

#include <vector>

#include "common/errors.h"
#include "common/utf8.h"

namespace specdec {
namespace {

using Json = nlohmann::json;

constexpr size_t kMaxReasonChars = 240;

std::string cut(std::string text, size_t max_chars) {
  if (text.size() <= max_chars) return valid_utf8(text);
  const size_t keep = max_chars > 3 ? max_chars - 3 : 0;
  return valid_utf8(text.substr(0, keep)) + "...";
}

// A string as JSON text, cut before escaping so that a huge one costs nothing.
std::string quoted(std::string_view s, size_t max_chars) {
  const Json head = std::string(s.substr(0, max_chars + 1));
  return head.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string scalar_text(const Json& value, size_t max_chars) {
  return value.is_string() ? quoted(value.get_ref<const std::string&>(), max_chars) : value.dump();
}

}  // namespace

Json parse_json(std::string_view text, int max_depth) {
  const auto guard = [max_depth](int depth, Json::parse_event_t event, Json& /*parsed*/) {
    const bool opens =
        event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start;
    if (opens && depth >= max_depth) {  // depth: the arrays and objects around this one
      throw FormatError(str_cat("arrays and objects nested deeper than ", max_depth,
                                " levels (the limit of specdec's JSON reader)"));
    }
    return true;
  };
  try {
    return Json::parse(text.begin(), text.end(), guard);
  } catch (const Json::exception& e) {
    throw FormatError(cut(e.what(), kMaxReasonChars));
  }
}

std::string json_summary(const Json& value, size_t max_chars) {
  struct Frame {
    const Json* node;
    Json::const_iterator next;
    bool first;
  };
  std::vector<Frame> stack;  // open arrays and objects: at most one per character written
  std::string out;
  const auto put = [&](const Json& v) {
    if (v.is_array() || v.is_object()) {
      out += v.is_array() ? '[' : '{';
      stack.push_back({&v, v.cbegin(), true});
    } else {
      out += scalar_text(v, max_chars);
    }
  };
  put(value);
  while (!stack.empty() && out.size() <= max_chars) {
    Frame& top = stack.back();
    if (top.next == top.node->cend()) {
      out += top.node->is_array() ? ']' : '}';
      stack.pop_back();
      continue;
    }
    if (!top.first) out += ',';
    top.first = false;
    if (top.node->is_object()) out += quoted(top.next.key(), max_chars) + ':';
    const Json& child = *top.next;
    ++top.next;  // before put(): it may grow the stack and move `top`
    put(child);
  }
  return cut(std::move(out), max_chars);
}

}  // namespace specdec
