// OpenCL C sources of kernels/*.cl, embedded at build time (cmake/EmbedKernelsScript.cmake).
// With SPECDEC_KERNEL_DIR set, kernel_source() reads kernels/<name>.cl from that directory
// instead, so kernel work needs no C++ rebuild.
#pragma once

#include <string>
#include <vector>

namespace specdec::ocl {

struct EmbeddedKernel {
  std::string name;    // file stem: kernels/<name>.cl
  std::string source;
  std::string sha256;  // of the file at build time
};

const std::vector<EmbeddedKernel>& embedded_kernels();

// Source of program `name`; ConfigError listing the known programs for an unknown name.
std::string kernel_source(const std::string& name);
std::vector<std::string> kernel_program_names();

}  // namespace specdec::ocl
