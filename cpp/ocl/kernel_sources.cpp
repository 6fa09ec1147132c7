#include "ocl/kernel_sources.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/errors.h"

namespace specdec::ocl {

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
    return text.str();
  }
  for (const auto& k : embedded_kernels()) {
    if (k.name == name) return k.source;
  }
  std::string known;
  for (const auto& n : kernel_program_names()) known += (known.empty() ? "" : ", ") + n;
  throw ConfigError("program", str_cat("'", name, "'"), "known kernel programs: " + known);
}

}  // namespace specdec::ocl
