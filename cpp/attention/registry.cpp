#include "attention/registry.h"

#include <algorithm>
#include <cctype>

#include "attention/backends/backends.h"
#include "common/errors.h"

namespace specdec::attn {
namespace {

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

}  // namespace

const std::vector<std::unique_ptr<AttentionBackend>>& all_backends() {
  static const std::vector<std::unique_ptr<AttentionBackend>> backends = [] {
    std::vector<std::unique_ptr<AttentionBackend>> out;
    out.push_back(make_reference_backend());
    out.push_back(make_ocl_paged_backend());
    out.push_back(make_ocl_flash_backend());
    out.push_back(make_ocl_mla_backend());
    return out;
  }();
  return backends;
}

std::vector<std::string> backend_names() {
  std::vector<std::string> out;
  for (const auto& b : all_backends()) out.push_back(b->name());
  return out;
}

const AttentionBackend& get_backend(const std::string& name) {
  const std::string key = upper(name);
  for (const auto& b : all_backends()) {
    if (b->name() == key) return *b;
  }
  std::string valid = "auto";
  for (const auto& n : backend_names()) valid += ", " + n;
  throw ConfigError("attention_backend", "'" + name + "'", "unknown backend; valid options are " + valid);
}

std::vector<const AttentionBackend*> priority_list(const std::string& device_type) {
  // The same order on every device type for now: the tiled kernel where it applies, then the
  // general one, MLA's own, and the host reference last. Device-specific orders go here.
  (void)device_type;
  std::vector<const AttentionBackend*> out;
  for (const char* name : {"OCL_FLASH", "OCL_PAGED", "OCL_MLA", "REFERENCE"}) out.push_back(&get_backend(name));
  return out;
}

}  // namespace specdec::attn
