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
class ConfigError : public std::invalid_argument {
 public:
  ConfigError(const std::string& field, const std::string& value, const std::string& allowed)
      : std::invalid_argument(str_cat(field, " = ", value, ": ", allowed)), field_(field) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
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

}  // namespace specdec
