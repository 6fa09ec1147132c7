// Block managers (filled in with the block-manager API).
#include <pybind11/pybind11.h>

namespace py = pybind11;

void register_blocks(py::module_& m) { (void)m; }
