#include "common/json.h"

#include <fstream>
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

void JsonBuilder::count() {
  if (limits_.max_values > 0 && ++num_values_ > limits_.max_values) {
    throw FormatError(str_cat("holds more than ", limits_.max_values,
                              " values (the limit of specdec's reader for this JSON)"));
  }
}

// `value` put where the next value goes: the root, the end of the innermost array, or the slot
// of the innermost object's last key (the member being streamed at the top level).
JsonBuilder::Json* JsonBuilder::place(Json&& value) {
  if (stack_.empty()) {
    root_ = std::move(value);
    return &root_;
  }
  Json& top = *stack_.back();
  if (top.is_array() && !streaming_members()) {
    top.push_back(std::move(value));
    return &top.back();
  }
  *slot_ = std::move(value);
  return slot_;
}

bool JsonBuilder::scalar(Json&& value) {
  count();
  place(std::move(value));
  if (streaming_members()) deliver();
  return true;
}

bool JsonBuilder::open(Json&& container) {
  count();
  if (stack_.size() >= static_cast<size_t>(limits_.max_depth)) {
    throw FormatError(str_cat("arrays and objects nested deeper than ", limits_.max_depth,
                              " levels (the limit of specdec's JSON reader)"));
  }
  if (stack_.empty() && on_member_ && container.is_object()) streaming_ = true;
  stack_.push_back(place(std::move(container)));
  return true;
}

bool JsonBuilder::close() {
  count();
  stack_.pop_back();
  if (streaming_members()) deliver();
  return true;
}

bool JsonBuilder::key(std::string& k) {
  count();
  if (streaming_members()) {
    member_key_ = std::move(k);
    member_ = Json();
    slot_ = &member_;
    return true;
  }
  auto& object = stack_.back()->get_ref<Json::object_t&>();
  if (limits_.unique_keys) {
    const auto [it, added] = object.emplace(k, Json());
    if (!added) throw FormatError(str_cat("duplicate key ", quoted(k, 64)));
    slot_ = &it->second;
  } else {
    slot_ = &object[k];
  }
  return true;
}

void JsonBuilder::deliver() {
  on_member_(member_key_, member_);
  member_ = Json();
  num_values_ = 0;
}

bool JsonBuilder::parse_error(std::size_t /*position*/, const std::string& /*last_token*/,
                              const nlohmann::detail::exception& e) {
  if (const auto* p = dynamic_cast<const Json::parse_error*>(&e)) throw *p;
  throw FormatError(cut(e.what(), kMaxReasonChars));
}

Json parse_json(std::string_view text, int max_depth) {
  JsonLimits limits;
  limits.max_depth = max_depth;
  return parse_json(text, limits);
}

Json parse_json(std::string_view text, const JsonLimits& limits) {
  JsonBuilder builder(limits);
  try {
    Json::sax_parse(text.begin(), text.end(), &builder);
  } catch (const Json::exception& e) {
    throw FormatError(cut(e.what(), kMaxReasonChars));
  }
  return std::move(builder.result());
}

std::string read_text_file(const std::filesystem::path& file, uint64_t max_bytes) {
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(file, ec);
  const auto too_big = [&](const std::string& size_text) {
    return FormatError(str_cat(file.string(), ": ", size_text, " bytes, more than the ", max_bytes,
                               " bytes (", max_bytes >> 20,
                               " MiB) specdec reads from such a file; is it the right file?"));
  };
  if (!ec && size > max_bytes) throw too_big(str_cat(size));
  std::ifstream in(file, std::ios::binary);
  if (!in) throw FormatError(str_cat(file.string(), ": cannot be read"));
  std::string text;
  std::vector<char> buffer(1 << 16);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    text.append(buffer.data(), static_cast<size_t>(in.gcount()));
    if (text.size() > max_bytes) throw too_big(str_cat("over ", max_bytes));
  }
  if (in.bad()) throw FormatError(str_cat(file.string(), ": cannot be read"));
  return text;
}

Json read_json_file(const std::filesystem::path& file, uint64_t max_bytes,
                    const JsonLimits& limits) {
  const std::string text = read_text_file(file, max_bytes);
  try {
    return parse_json(text, limits);
  } catch (const FormatError& e) {
    throw FormatError(str_cat(file.string(), ": not valid JSON: ", e.what()));
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
