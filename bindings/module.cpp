// specdec._core: the one pybind11 module; one register_<area>() per bound area.
#include <pybind11/pybind11.h>

namespace py = pybind11;

void register_common(py::module_& m);
void register_ocl(py::module_& m);
void register_kv(py::module_& m);
void register_blocks(py::module_& m);
void register_attention(py::module_& m);
void register_model(py::module_& m);
void register_tokenizer(py::module_& m);
void register_quant(py::module_& m);
void register_step(py::module_& m);
void register_runner(py::module_& m);
void register_spec_decode(py::module_& m);
void register_verify(py::module_& m);

PYBIND11_MODULE(_core, m) {
  m.doc() = "specdec C++ core (KV cache, attention, OpenCL runtime)";
  register_common(m);
  register_ocl(m);
  register_kv(m);
  register_blocks(m);
  register_attention(m);
  register_model(m);
  register_tokenizer(m);
  register_quant(m);
  register_step(m);  // before register_runner: ModelRunner.step's types
  register_runner(m);
  register_spec_decode(m);
  register_verify(m);  // after register_spec_decode: its module and types
}
