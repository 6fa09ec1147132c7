// One exception hierarchy for the whole engine. Each type maps to exactly one Python
// exception in bindings/register_common.cpp:
//   ConfigError      -> ValueError                  (bad configuration or request value)
//   UnsupportedError -> specdec.UnsupportedError    (valid input that nothing here supports)
//   FormatError      -> specdec.FormatError         (malformed model file)
//   OclError         -> specdec.OpenCLError         (device / driver failure)
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace specdec {

// Joins any streamable values into one string.
template <typename... Args>
std::string str_cat(Args&&... args) {
  std::ostringstream out;
  (out << ... << std::forward<Args>(args));
  return out.str();
}

// A configuration value is wrong. The message names the field, the value and what is allowed.
// At most `max_bytes` of `text` (cut at a UTF-8 character boundary) with "..." when cut: a field
// name or value that came from the user (an unknown 10 MB key) must not make a 10 MB message.
inline std::string clip_for_message(const std::string& text, size_t max_bytes = 200) {
  if (text.size() <= max_bytes) return text;
  size_t end = max_bytes - 3;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return text.substr(0, end) + "...";
}

class ConfigError : public std::invalid_argument {
 public:
  ConfigError(const std::string& field, const std::string& value, const std::string& allowed)
      : std::invalid_argument(str_cat(clip_for_message(field), " = ", clip_for_message(value), ": ", allowed)),
        field_(clip_for_message(field)), value_(clip_for_message(value)), allowed_(allowed) {}
  const std::string& field() const { return field_; }
  const std::string& value() const { return value_; }
  const std::string& allowed() const { return allowed_; }
  // The same error with "prefix." in front of the field (e.g. the layer name).
  ConfigError with_prefix(const std::string& prefix) const {
    return ConfigError(prefix + "." + field_, value_, allowed_);
  }

 private:
  std::string field_;
  std::string value_;
  std::string allowed_;
};

// The input is valid but no implementation here supports it.
class UnsupportedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A model file is malformed.
class FormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Throws ConfigError(field, value, allowed) unless cond holds.
template <typename T>
void check_config(bool cond, const std::string& field, const T& value, const std::string& allowed) {
  if (!cond) throw ConfigError(field, str_cat(value), allowed);
}

// check_config with field, value and allowed evaluated only when cond fails: the per-launch
// checks of every kernel call run a few hundred times per forward, and building their messages
// eagerly (ostringstream, allocations) cost ~30 % of the host thread's time in a decode step.
#define SPECDEC_CHECK(cond, field, value, allowed)                  \
  do {                                                              \
    if (!(cond)) ::specdec::check_config(false, field, value, allowed); \
  } while (false)

}  // namespace specdec
