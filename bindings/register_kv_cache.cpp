// KV layouts, per-layer views and device allocation with NumPy I/O (tests and tools).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>

#include "common/errors.h"
#include "kv/allocator.h"
#include "kv/cache_ops.h"

namespace py = pybind11;
using namespace specdec;
using namespace specdec::kv;

namespace {

using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

// A slot mapping from any 1-D integer array, range-checked before narrowing to int32.
std::vector<int32_t> slot_vector(const py::array& array) {
  const char kind = array.dtype().kind();
  SPECDEC_CHECK(kind == 'i' || kind == 'u', "slot_mapping", str_cat("array of dtype ", std::string(py::str(array.dtype()))),
               "must be an integer array (-1 = padding)");
  SPECDEC_CHECK(array.ndim() == 1, "slot_mapping", str_cat("array of ", array.ndim(), " dims"),
               "must be 1-D: [num_tokens]");
  const auto wide = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(array);
  std::vector<int32_t> out(static_cast<size_t>(wide.size()));
  for (py::ssize_t i = 0; i < wide.size(); ++i) {
    const int64_t s = wide.data()[i];
    SPECDEC_CHECK(s >= -1 && s <= INT32_MAX, str_cat("slot_mapping[", i, "]"), s, "must be -1 or a slot index");
    out[static_cast<size_t>(i)] = static_cast<int32_t>(s);
  }
  return out;
}

LayoutMap parse_layouts(const std::map<std::string, std::string>& layouts) {
  LayoutMap out;
  for (const auto& [layer, name] : layouts) out[layer] = parse_layout(name);
  return out;
}

KvPart parse_part(const std::string& part) {
  if (part == "k") return KvPart::kK;
  if (part == "v") return KvPart::kV;
  throw ConfigError("part", "'" + part + "'", "allowed parts are 'k' and 'v'");
}

void check_rows(const FloatArray& src, const KvPartView& p, size_t num_tokens, const char* field) {
  SPECDEC_CHECK(src.ndim() == 3 && static_cast<size_t>(src.shape(0)) == num_tokens &&
                   src.shape(1) == p.num_heads && src.shape(2) == p.width,
               field, str_cat("array of ", src.ndim(), " dims, size ", src.size()),
               str_cat("must have shape [num_tokens=", num_tokens, ", ", p.num_heads, ", ", p.width, "]"));
}

// Writes `src` rows into one part of a layer through the slot mapping on the device.
void write_part(KvCacheAllocation& cache, const std::string& layer, KvPart part, const FloatArray& src,
                const std::vector<int32_t>& slots, const device::Buffer& slot_buffer) {
  const LayerKvView& view = cache.view(layer);
  const KvPartView& p = part_of(view, part);
  check_rows(src, p, slots.size(), part == KvPart::kK ? "key" : "value");
  if (p.empty() || slots.empty()) return;
  device::Device& dev = cache.device();
  const device::Buffer src_buffer = dev.allocate(static_cast<size_t>(src.nbytes()), device::Lifetime::kStep);
  dev.write(src_buffer, src.data(), static_cast<size_t>(src.nbytes()));
  kv_cache_write(cache.device(), cache.tensor_of(layer), view, part, src_buffer, slot_buffer,
                 static_cast<int>(slots.size()));
  cache.device().sync();
}

void write_kv(KvCacheAllocation& cache, const std::string& layer, const FloatArray& key,
              const FloatArray& value, const py::array& slot_mapping) {
  const std::vector<int32_t> slots = slot_vector(slot_mapping);
  const LayerKvView& view = cache.view(layer);
  check_slot_mapping(view, slots);
  check_rows(key, view.k, slots.size(), "key");  // both checked before anything is written
  check_rows(value, view.v, slots.size(), "value");
  if (slots.empty()) return;
  device::Device& dev = cache.device();
  const device::Buffer slot_buffer = dev.allocate(slots.size() * sizeof(int32_t), device::Lifetime::kStep);
  dev.write(slot_buffer, slots.data(), slots.size() * sizeof(int32_t));
  write_part(cache, layer, KvPart::kK, key, slots, slot_buffer);
  write_part(cache, layer, KvPart::kV, value, slots, slot_buffer);
}

FloatArray gather(KvCacheAllocation& cache, const std::string& layer, const std::string& part_name,
                  const py::array& slot_mapping) {
  const LayerKvView& view = cache.view(layer);
  const KvPart part = parse_part(part_name);
  const KvPartView& p = part_of(view, part);
  const std::vector<int32_t> slots = slot_vector(slot_mapping);
  check_slot_mapping(view, slots);
  FloatArray out({static_cast<py::ssize_t>(slots.size()), static_cast<py::ssize_t>(p.num_heads),
                  static_cast<py::ssize_t>(p.width)});
  if (p.empty() || slots.empty()) return out;
  device::Device& dev = cache.device();
  const device::Buffer slot_buffer = dev.allocate(slots.size() * sizeof(int32_t), device::Lifetime::kStep);
  dev.write(slot_buffer, slots.data(), slots.size() * sizeof(int32_t));
  const device::Buffer dst = dev.allocate(static_cast<size_t>(out.nbytes()), device::Lifetime::kStep);
  kv_cache_gather(cache.device(), cache.tensor_of(layer), view, part, slot_buffer, dst,
                  static_cast<int>(slots.size()));
  dev.read(dst, out.mutable_data(), static_cast<size_t>(out.nbytes()));
  return out;
}

}  // namespace

void register_kv_views(py::module_& m) {
  py::class_<KvPartView>(m, "KvPartView",
                         "One part (K or V) of a layer's cache: element (block, slot, head, dim) is at "
                         "offset + block*stride_block + slot*stride_slot + head*stride_head + dim.")
      .def_readonly("offset", &KvPartView::offset)
      .def_readonly("stride_block", &KvPartView::stride_block)
      .def_readonly("stride_slot", &KvPartView::stride_slot)
      .def_readonly("stride_head", &KvPartView::stride_head)
      .def_readonly("num_heads", &KvPartView::num_heads)
      .def_readonly("width", &KvPartView::width)
      .def("index", &KvPartView::index, py::arg("block"), py::arg("slot"), py::arg("head"), py::arg("dim"));
  py::class_<LayerKvView>(m, "LayerKvView", "A layer's view of its raw KV tensor.")
      .def_readonly("layer_name", &LayerKvView::layer_name)
      .def_readonly("tensor_index", &LayerKvView::tensor_index)
      .def_property_readonly("layout", [](const LayerKvView& v) { return layout_name(v.layout); })
      .def_readonly("spec", &LayerKvView::spec)
      .def_readonly("num_blocks", &LayerKvView::num_blocks)
      .def_readonly("k", &LayerKvView::k)
      .def_readonly("v", &LayerKvView::v)
      .def_readonly("shape", &LayerKvView::shape)
      .def_readonly("strides", &LayerKvView::strides)
      .def_property_readonly("size_bytes", &LayerKvView::size_bytes);

  m.def("layouts", [] {
    std::vector<std::string> out;
    for (KvLayout l : all_layouts()) out.push_back(layout_name(l));
    return out;
  });
  m.def("make_layer_views",
        [](const KvCacheConfig& config, const std::map<std::string, std::string>& layouts,
           const std::string& default_layout) {
          return make_layer_views(config, parse_layouts(layouts), parse_layout(default_layout));
        },
        py::arg("config"), py::arg("layouts") = std::map<std::string, std::string>{},
        py::arg("default_layout") = "kv_major",
        "Per-layer views of a plan without allocating (checks that aliased layers agree).");

  py::class_<KvCacheAllocation>(m, "KvCache", "Device buffers of a KV-cache plan with per-layer views.")
      .def(py::init([](const KvCacheConfig& config, const std::map<std::string, std::string>& layouts,
                       const std::string& default_layout, std::shared_ptr<device::Device> dev) {
             return std::make_unique<KvCacheAllocation>(std::move(dev), config, parse_layouts(layouts),
                                                        parse_layout(default_layout));
           }),
           py::arg("config"), py::arg("layouts") = std::map<std::string, std::string>{},
           py::arg("default_layout") = "kv_major", py::arg("context"))
      .def_property_readonly("views", &KvCacheAllocation::views)
      .def("view", &KvCacheAllocation::view, py::arg("layer_name"), py::return_value_policy::reference_internal)
      .def_property_readonly("num_tensors", &KvCacheAllocation::num_tensors)
      .def_property_readonly("total_bytes", &KvCacheAllocation::total_bytes)
      .def("read_tensor",
           [](const KvCacheAllocation& c, int index) {
             auto bytes = c.read_tensor(index);
             py::array_t<uint8_t> out(static_cast<py::ssize_t>(bytes.size()));
             std::copy(bytes.begin(), bytes.end(), out.mutable_data());
             return out;
           },
           py::arg("index"), "The raw bytes of tensor `index` (uint8 array).")
      .def("write_kv", &write_kv, py::arg("layer_name"), py::arg("key"), py::arg("value"), py::arg("slot_mapping"),
           "Writes key/value [num_tokens, heads, width] through the slot mapping (-1 = skip) on the device.")
      .def("gather", &gather, py::arg("layer_name"), py::arg("part"), py::arg("slot_mapping"),
           "Reads part 'k' or 'v' at each slot through the layer's view on the device.");
}
