// Exceptions: each C++ error type maps to exactly one Python exception.
//   specdec::ConfigError (std::invalid_argument) -> ValueError (pybind11's default)
//   specdec::UnsupportedError -> specdec.UnsupportedError (a ValueError)
//   specdec::FormatError      -> specdec.FormatError (a ValueError)
//   specdec::ocl::OclError    -> specdec.OpenCLError (a RuntimeError)
#include <pybind11/pybind11.h>

#include "common/dtype.h"
#include "common/errors.h"
#include "ocl/error.h"

namespace py = pybind11;

void register_common(py::module_& m) {
  py::register_exception<specdec::UnsupportedError>(m, "UnsupportedError", PyExc_ValueError);
  py::register_exception<specdec::FormatError>(m, "FormatError", PyExc_ValueError);
  py::register_exception<specdec::ocl::OclError>(m, "OpenCLError", PyExc_RuntimeError);
  m.def("dtype_size", [](const std::string& name) { return specdec::dtype_size(specdec::parse_dtype(name)); },
        py::arg("dtype"), "Bytes per element of a dtype name (f32, f16, bf16, int8).");
}
