// JSON from untrusted text (config.json, tokenizer.json, safetensors headers, speculative_config,
// ...): nesting, size and duplicate keys bounded while parsing, in time linear in the text, and a
// short rendering of a value for error messages that never recurses.
//
// nlohmann's parser and destructor are iterative, but dump(), copies and comparisons recurse once
// per level: a value nested 100,000 deep overflows the stack (SIGSEGV). parse_json refuses such
// text before its tree is built, and json_summary renders any value with an explicit stack.
// nlohmann's parse-with-callback is quadratic (each closing object scans its parent for discarded
// members: 300,000 tensor entries in a safetensors header never finish), so the tree is built by
// JsonBuilder, a SAX handler of our own, instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace specdec {

// Nesting levels of arrays and objects that parse_json accepts (real configs nest 3 or 4).
inline constexpr int kMaxJsonDepth = 64;

// The largest small JSON file read whole (config.json, generation_config.json,
// tokenizer_config.json, speculative configs): real ones are a few KB to a few MB.
inline constexpr uint64_t kMaxSmallJsonFileBytes = uint64_t{16} << 20;  // 16 MiB
// The largest large JSON file read whole (tokenizer.json, model.safetensors.index.json): real
// tokenizer.json files reach ~35 MB (Gemma 3's 262k tokens).
inline constexpr uint64_t kMaxLargeJsonFileBytes = uint64_t{128} << 20;  // 128 MiB

struct JsonLimits {
  int max_depth = kMaxJsonDepth;  // arrays and objects nested in each other
  uint64_t max_values = 0;        // parse events (values, keys, opens, closes) of a tree; 0: any
  bool unique_keys = false;       // a key twice in one object is an error (else the last wins)
};

// A SAX handler for nlohmann::json::sax_parse that builds the tree in linear time and enforces
// `limits`, throwing FormatError (the reason alone) as soon as one is passed. Syntax errors are
// rethrown as nlohmann::json::parse_error (its `byte` says where). With `on_member`, the members of
// a top-level object are streamed: each is handed over (key, value) as soon as its value ends and
// is not kept, so only one member's tree is held at a time (max_values counts per member;
// unique_keys applies inside members, the caller sees every top-level key).
class JsonBuilder {
 public:
  using Json = nlohmann::json;
  using OnMember = std::function<void(std::string& key, Json& value)>;

  explicit JsonBuilder(const JsonLimits& limits, OnMember on_member = nullptr)
      : limits_(limits), on_member_(std::move(on_member)) {}

  // The parsed value; with on_member and a top-level object, an empty object.
  Json& result() { return root_; }

  bool null() { return scalar(Json(nullptr)); }
  bool boolean(bool v) { return scalar(Json(v)); }
  bool number_integer(int64_t v) { return scalar(Json(v)); }
  bool number_unsigned(uint64_t v) { return scalar(Json(v)); }
  bool number_float(double v, const std::string& /*text*/) { return scalar(Json(v)); }
  bool string(std::string& v) { return scalar(Json(std::move(v))); }
  bool binary(Json::binary_t& v) { return scalar(Json(std::move(v))); }
  bool start_object(std::size_t /*size*/) { return open(Json::object()); }
  bool start_array(std::size_t /*size*/) { return open(Json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(std::string& k);
  [[noreturn]] bool parse_error(std::size_t position, const std::string& last_token,
                                const nlohmann::detail::exception& e);

 private:
  void count();
  Json* place(Json&& value);
  bool scalar(Json&& value);
  bool open(Json&& container);
  bool close();
  bool streaming_members() const { return streaming_ && stack_.size() == 1; }
  void deliver();

  JsonLimits limits_;
  OnMember on_member_;
  Json root_;
  Json member_;  // the member being built when streaming
  std::string member_key_;
  std::vector<Json*> stack_;  // the open arrays and objects, outermost first
  Json* slot_ = nullptr;      // where the next value of the innermost object goes
  uint64_t num_values_ = 0;
  bool streaming_ = false;
};

// `text` parsed as one JSON value, refusing more than `max_depth` nested arrays and objects as it
// parses. Throws FormatError whose message is the reason alone (syntax error or too deep, at most
// a few hundred characters); callers put the file or the field in front.
nlohmann::json parse_json(std::string_view text, int max_depth = kMaxJsonDepth);
nlohmann::json parse_json(std::string_view text, const JsonLimits& limits);

// The JSON in `file`, refused before it is read when larger than `max_bytes`; FormatError naming
// the file when it cannot be read, is too large or does not parse.
nlohmann::json read_json_file(const std::filesystem::path& file,
                              uint64_t max_bytes = kMaxSmallJsonFileBytes,
                              const JsonLimits& limits = {});

// The text of `file`, refused (FormatError naming the file, its size and the cap) before it is
// read when larger than `max_bytes`; the read itself stops after max_bytes + 1 bytes (a FIFO or a
// file that grows is refused too).
std::string read_text_file(const std::filesystem::path& file, uint64_t max_bytes);

// `value` as compact JSON text, cut to `max_chars` characters ("..." at the end when cut). Built
// with an explicit stack: any depth and size, in O(max_chars) work and memory.
std::string json_summary(const nlohmann::json& value, size_t max_chars = 80);

}  // namespace specdec
