// specdec._core.quant: weight formats, host dequantize / quantize, device weights, matmul and
// embedding lookup with NumPy arrays in and out (tests, tools and checks against other
// implementations; the runner uses the C++ API directly).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/errors.h"
#include "quant/dequantize.h"
#include "quant/matmul.h"
#include "quant/reference.h"

namespace py = pybind11;
using namespace specdec;
using namespace specdec::quant;

namespace {

using Bytes = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>;
using Floats = py::array_t<float, py::array::c_style | py::array::forcecast>;

// A type given as a ggml name ("q4_K") or id (12).
GgmlType to_type(const py::object& t) {
  if (py::isinstance<py::str>(t)) return parse_weight_type(t.cast<std::string>());
  const auto id = t.cast<uint32_t>();
  const auto type = static_cast<GgmlType>(id);
  if (!is_weight_type_supported(type)) weight_format(type);  // UnsupportedError naming it
  return type;
}

// x as a 2-D [n, cols] float array (1-D = one row).
std::pair<int64_t, int64_t> rows_cols(const Floats& x) {
  if (x.ndim() == 1) return {1, x.shape(0)};
  SPECDEC_CHECK(x.ndim() == 2, "x.ndim", x.ndim(), "must be 1 or 2");
  return {x.shape(0), x.shape(1)};
}

Floats to_numpy(const std::vector<float>& v, int64_t rows, int64_t cols) {
  Floats out({rows, cols});
  if (!v.empty()) std::memcpy(out.mutable_data(), v.data(), v.size() * sizeof(float));
  return out;
}

py::array_t<float> dequantize_py(const py::object& type, const Bytes& data, int64_t rows,
                                 int64_t cols) {
  const GgmlType t = to_type(type);
  const int64_t need = rows * row_bytes(t, cols);
  SPECDEC_CHECK(
      data.size() == need, "data", str_cat(data.size(), " bytes"),
      str_cat("must be ", need, " bytes for ", rows, " x ", cols, " ", weight_type_name(t)));
  std::vector<float> v;
  {
    py::gil_scoped_release release;
    v = dequantize(t, data.data(), rows, cols);
  }
  return to_numpy(v, rows, cols);
}

Bytes quantize_py(const py::object& type, const Floats& x) {
  const GgmlType t = to_type(type);
  const auto [rows, cols] = rows_cols(x);
  const std::vector<uint8_t> q = quantize(t, x.data(), rows, cols);
  Bytes out(static_cast<py::ssize_t>(q.size()));
  std::memcpy(out.mutable_data(), q.data(), q.size());
  return out;
}

Floats matmul_py(device::Device& dev, const DeviceWeight& w, const Floats& x) {
  const auto [n, cols] = rows_cols(x);
  SPECDEC_CHECK(cols == w.cols(), "x.shape[1]", cols,
               str_cat("must equal the weight's cols ", w.cols()));
  std::vector<float> y(static_cast<size_t>(n * w.rows()));
  if (n > 0) {
    const device::Buffer xb =
        dev.allocate(static_cast<size_t>(n * cols) * sizeof(float), device::Lifetime::kStep);
    dev.write(xb, x.data(), static_cast<size_t>(n * cols) * sizeof(float));
    device::Buffer yb = dev.allocate(y.size() * sizeof(float), device::Lifetime::kStep);
    matmul(dev, w, xb, n, yb);
    dev.read(yb, y.data(), y.size() * sizeof(float));
  }
  return to_numpy(y, n, w.rows());
}

Floats embedding_py(device::Device& dev, const DeviceWeight& w, const std::vector<int32_t>& ids,
                    float scale) {
  const auto n = static_cast<int64_t>(ids.size());
  std::vector<float> y(static_cast<size_t>(n * w.cols()));
  if (n > 0) {
    device::Buffer out = dev.allocate(y.size() * sizeof(float), device::Lifetime::kStep);
    embedding_lookup(dev, w, std::span<const int32_t>(ids), out, scale);
    dev.read(out, y.data(), y.size() * sizeof(float));
  }
  return to_numpy(y, n, w.cols());
}

Floats matmul_reference_py(const py::object& type, const Bytes& data, int64_t rows, int64_t cols,
                           const Floats& x, const std::string& numerics) {
  const GgmlType t = to_type(type);
  const auto [n, xc] = rows_cols(x);
  SPECDEC_CHECK(xc == cols, "x.shape[1]", xc, str_cat("must equal cols ", cols));
  SPECDEC_CHECK(data.size() == rows * row_bytes(t, cols), "data", str_cat(data.size(), " bytes"),
               str_cat("must be ", rows * row_bytes(t, cols), " bytes"));
  SPECDEC_CHECK(numerics == "device" || numerics == "exact", "numerics", numerics,
               "must be 'device' or 'exact'");
  const std::vector<float> y =
      matmul_reference(t, data.data(), rows, cols, x.data(), n,
                       numerics == "exact" ? Numerics::kExact : Numerics::kDevice);
  return to_numpy(y, n, rows);
}

}  // namespace

void register_quant(py::module_& parent) {
  py::module_ m =
      parent.def_submodule("quant", "Weight formats, dequantization and quantized matmul.");
  m.def(
      "supported_weight_types",
      [] {
        std::vector<std::string> names;
        for (GgmlType t : supported_weight_types()) names.push_back(weight_format(t).name);
        return names;
      },
      "ggml names of the weight formats specdec runs.");
  m.def(
      "is_weight_type_supported",
      [](const py::object& t) {
        try {
          to_type(t);
          return true;
        } catch (const UnsupportedError&) {
          return false;
        }
      },
      py::arg("type"));
  m.def("dequantize", &dequantize_py, py::arg("type"), py::arg("data"), py::arg("rows"),
        py::arg("cols"), "float32 [rows, cols] from ggml blocks (type: ggml name or id).");
  m.def("quantize", &quantize_py, py::arg("type"), py::arg("x"),
        "ggml blocks (uint8) of a float32 [rows, cols] array (simple round-to-nearest quantizer).");
  m.def(
      "matmul_reference", &matmul_reference_py, py::arg("type"), py::arg("data"), py::arg("rows"),
      py::arg("cols"), py::arg("x"), py::arg("numerics") = "device",
      "Host y = x . W^T: 'device' emulates the kernels' arithmetic, 'exact' is double precision.");

  py::class_<DeviceWeight>(m, "DeviceWeight", "A weight matrix on the device in its block format.")
      .def_readonly("name", &DeviceWeight::name)
      .def_property_readonly(
          "type", [](const DeviceWeight& w) { return std::string(weight_format(w.type()).name); })
      .def_property_readonly("rows", &DeviceWeight::rows)
      .def_property_readonly("cols", &DeviceWeight::cols)
      .def_property_readonly("source_bytes", &DeviceWeight::source_bytes)
      .def_property_readonly("device_bytes",
                             [](const DeviceWeight& w) { return w.layout.total_bytes; })
      .def(
          "download",
          [](const DeviceWeight& w, device::Device& dev) {
            const std::vector<uint8_t> b = w.download(dev);
            Bytes out(static_cast<py::ssize_t>(b.size()));
            std::memcpy(out.mutable_data(), b.data(), b.size());
            return out;
          },
          py::arg("ctx"), "The matrix in ggml's row-major block format.")
      .def("__repr__", [](const DeviceWeight& w) {
        return str_cat("DeviceWeight(name='", w.name, "', type='", weight_format(w.type()).name,
                       "', rows=", w.rows(), ", cols=", w.cols(), ")");
      });
  m.def(
      "upload_weight",
      [](device::Device& dev, const py::object& type, const Bytes& data, const std::vector<int64_t>& dims,
         const std::string& name) {
        return upload_weight(dev, to_type(type), data.data(), static_cast<size_t>(data.size()),
                             dims, name);
      },
      py::arg("ctx"), py::arg("type"), py::arg("data"), py::arg("dims"), py::arg("name") = "",
      "Uploads ggml blocks; dims in GGUF order [cols (ne0), rows (ne1)].");
  m.def("matmul", &matmul_py, py::arg("ctx"), py::arg("w"), py::arg("x"),
        "y [n, rows] = x [n, cols] . W^T on the device.");
  m.def("embedding_lookup", &embedding_py, py::arg("ctx"), py::arg("w"), py::arg("ids"),
        py::arg("scale") = 1.0f,
        "Rows `ids` of W, dequantized on the device and multiplied by scale.");
}
