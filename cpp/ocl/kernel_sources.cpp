#include "ocl/kernel_sources.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/errors.h"

namespace specdec::ocl {

namespace {

// Replaces each line `#include "x.clh"` by the text of dir/x.clh (as the build-time embedding does).
std::string splice_headers(std::string text, const std::string& dir) {
  const std::string key = "#include \"";
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at)) {
    const size_t end = text.find('"', at + key.size());
    const std::string name = text.substr(at + key.size(), end - at - key.size());
    if (end == std::string::npos || name.size() < 5 || name.substr(name.size() - 4) != ".clh") {
      at += key.size();
      continue;
    }
    std::ifstream in(dir + "/" + name);
    if (!in) throw ConfigError("SPECDEC_KERNEL_DIR", "'" + dir + "'", "has no " + name);
    std::ostringstream header;
    header << in.rdbuf();
    text.replace(at, end + 1 - at, header.str());
    at += header.str().size();
  }
  return text;
}

}  // namespace

std::vector<std::string> kernel_program_names() {
  std::vector<std::string> names;
  for (const auto& k : embedded_kernels()) names.push_back(k.name);
  return names;
}

std::string kernel_source(const std::string& name) {
  if (const char* dir = std::getenv("SPECDEC_KERNEL_DIR"); dir != nullptr && *dir != '\0') {
    const std::string path = str_cat(dir, "/", name, ".cl");
    std::ifstream in(path);
    if (!in) {
      throw ConfigError("SPECDEC_KERNEL_DIR", str_cat("'", dir, "'"),
                        str_cat("has no ", name, ".cl; unset it to use the embedded kernels"));
    }
    std::ostringstream text;
    text << in.rdbuf();
    return splice_headers(text.str(), dir);
  }
  for (const auto& k : embedded_kernels()) {
    if (k.name == name) return k.source;
  }
  std::string known;
  for (const auto& n : kernel_program_names()) known += (known.empty() ? "" : ", ") + n;
  throw ConfigError("program", str_cat("'", name, "'"), "known kernel programs: " + known);
}

}  // namespace specdec::ocl
