// Model files: hardened GGUF and safetensors readers (metadata and tensor tables).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "model/dflash.h"
#include "model/gguf.h"
#include "model/safetensors.h"

namespace py = pybind11;
using namespace specdec::model;

namespace {

// Model files may hold bytes that are not UTF-8 in keys, strings and names: decoded with
// U+FFFD in place of each bad byte, never a UnicodeDecodeError.
py::str text(const std::string& s) {
  PyObject* obj = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
  if (obj == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(obj);
}

py::object to_python(const GgufValue& value) {
  return std::visit(
      [](const auto& v) -> py::object {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, GgufArray>) {
          py::list out;
          for (const auto& e : v.values) out.append(to_python(e));
          return out;
        } else if constexpr (std::is_same_v<T, std::string>) {
          return text(v);
        } else {
          return py::cast(v);
        }
      },
      value.variant());
}

py::dict read_gguf(const std::string& path) {
  const GgufFile f = open_model_file(path);  // a directory: the GGUF form it is read into
  py::dict metadata;
  for (const auto& [key, value] : f.metadata()) metadata[text(key)] = to_python(value);
  py::list tensors;
  for (const auto& t : f.tensors()) {
    py::dict d;
    d["name"] = text(t.name);
    const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(t.type));
    d["type"] = info != nullptr ? info->name : "unknown";
    d["dims"] = t.dims;
    d["offset"] = t.offset;
    d["size_bytes"] = t.size_bytes;
    tensors.append(d);
  }
  py::dict out;
  out["version"] = f.version();
  out["alignment"] = f.alignment();
  out["data_offset"] = f.data_offset();
  out["file_size"] = f.file_size();
  out["metadata"] = metadata;
  out["tensors"] = tensors;
  return out;
}

py::dict read_safetensors(const std::string& path) {
  const SafetensorsFile f = SafetensorsFile::open(path);
  py::list tensors;
  for (const auto& t : f.tensors()) {
    py::dict d;
    d["name"] = t.name;
    d["dtype"] = safetensors_dtype_name(t.dtype);
    d["shape"] = t.shape;
    d["data_offsets"] = std::vector<uint64_t>{t.data_offsets[0], t.data_offsets[1]};
    d["size_bytes"] = t.size_bytes;
    tensors.append(d);
  }
  py::dict out;
  out["file_size"] = f.file_size();
  out["metadata"] = f.metadata();
  out["tensors"] = tensors;
  return out;
}

}  // namespace

void register_model_config(py::module_& m);

void register_model(py::module_& m) {
  register_model_config(m);
  m.def("read_gguf", &read_gguf, py::arg("path"),
        "Metadata and tensor table of a GGUF file (v2/v3; a Hugging Face or DFlash directory: the GGUF form it is read into), validated: a malformed file raises "
        "FormatError naming the key or tensor, the value and the byte offset.");
  m.def("read_safetensors", &read_safetensors, py::arg("path"),
        "Metadata and tensor table of a safetensors file, validated like read_gguf.");
}
