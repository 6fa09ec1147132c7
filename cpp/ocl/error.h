// OpenCL failures: readable error names and one exception type (specdec.OpenCLError in Python).
#pragma once

#include <stdexcept>
#include <string>

#include "ocl/cl.h"

namespace specdec::ocl {

// "CL_OUT_OF_RESOURCES" for -5, "CL_UNKNOWN_ERROR(-1234)" for codes it does not know.
std::string error_name(cl_int code);

class OclError : public std::runtime_error {
 public:
  OclError(cl_int code, const std::string& what);
  cl_int code() const { return code_; }

 private:
  cl_int code_;
};

// Throws OclError "call failed: NAME (code)" + detail when code != CL_SUCCESS.
void check(cl_int code, const char* call, const std::string& detail = "");

}  // namespace specdec::ocl

#define SPECDEC_CL_CHECK(expr) ::specdec::ocl::check((expr), #expr)
