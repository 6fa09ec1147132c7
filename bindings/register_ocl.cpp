// OpenCL devices and contexts.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "common/errors.h"
#include "device/ocl_device.h"
#include "ocl/context.h"
#include "ocl/device.h"
#include "ocl/kernel_sources.h"
#include "quant/ocl_matmul.h"

namespace py = pybind11;
using specdec::ocl::DeviceInfo;

namespace {

std::vector<std::string> cpu_feature_list(const DeviceInfo& d) {
  const specdec::ocl::CpuFeatures f = specdec::ocl::cpu_features(d);
  std::vector<std::string> out;
  const std::string s = f.summary();
  if (s == "none") return out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = s.find(' ', start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

py::dict device_dict(const DeviceInfo& d) {
  py::dict out;
  out["index"] = d.index;
  out["platform_index"] = d.platform_index;
  out["device_index"] = d.device_index;
  out["platform"] = d.platform_name;
  out["name"] = d.name;
  out["vendor"] = d.vendor;
  out["type"] = d.type;
  out["version"] = d.version;
  out["driver_version"] = d.driver_version;
  out["opencl_c_version"] = d.opencl_c_version;
  out["compute_units"] = d.compute_units;
  out["global_mem_bytes"] = d.global_mem_bytes;
  out["max_alloc_bytes"] = d.max_alloc_bytes;
  out["local_mem_bytes"] = d.local_mem_bytes;
  out["max_work_group_size"] = d.max_work_group_size;
  out["max_clock_mhz"] = d.max_clock_mhz;
  out["fp16"] = d.fp16;
  out["fp64"] = d.fp64;
  out["subgroups"] = d.subgroups;
  out["cpu_features"] = cpu_feature_list(d);
  return out;
}

}  // namespace

// The device over a _core.Context, for bindings that take a Context and call ops on Device&
// (declared where used; until step 6 of docs/device_seam.md binds the Device itself).
std::shared_ptr<specdec::device::Device> device_of(const std::shared_ptr<specdec::ocl::Context>& ctx) {
  return specdec::device::wrap(ctx);
}

void register_ocl(py::module_& m) {
  py::class_<DeviceInfo>(m, "DeviceInfo", "An OpenCL device and its main properties.")
      .def_readonly("index", &DeviceInfo::index)
      .def_readonly("platform_index", &DeviceInfo::platform_index)
      .def_readonly("device_index", &DeviceInfo::device_index)
      .def_readonly("platform", &DeviceInfo::platform_name)
      .def_readonly("name", &DeviceInfo::name)
      .def_readonly("vendor", &DeviceInfo::vendor)
      .def_readonly("type", &DeviceInfo::type)
      .def_readonly("version", &DeviceInfo::version)
      .def_readonly("driver_version", &DeviceInfo::driver_version)
      .def_readonly("opencl_c_version", &DeviceInfo::opencl_c_version)
      .def_readonly("compute_units", &DeviceInfo::compute_units)
      .def_readonly("global_mem_bytes", &DeviceInfo::global_mem_bytes)
      .def_readonly("max_alloc_bytes", &DeviceInfo::max_alloc_bytes)
      .def_readonly("local_mem_bytes", &DeviceInfo::local_mem_bytes)
      .def_readonly("max_work_group_size", &DeviceInfo::max_work_group_size)
      .def_readonly("max_clock_mhz", &DeviceInfo::max_clock_mhz)
      .def_readonly("fp16", &DeviceInfo::fp16)
      .def_readonly("fp64", &DeviceInfo::fp64)
      .def_readonly("subgroups", &DeviceInfo::subgroups)
      .def_readonly("extensions", &DeviceInfo::extensions)
      .def_property_readonly("cpu_features", &cpu_feature_list,
                             "x86 SIMD features of the CPU a CPU device runs on (cpuid): avx2, "
                             "fma, avx512f, avx512bw, avx512vnni; [] for other devices.")
      .def("as_dict", &device_dict)
      .def("summary", &DeviceInfo::summary)
      .def("__repr__", [](const DeviceInfo& d) {
        return specdec::str_cat("DeviceInfo(index=", d.index, ", name='", d.name, "', type='", d.type,
                                "', platform='", d.platform_name, "', version='", d.version,
                                "', compute_units=", d.compute_units, ", global_mem_bytes=",
                                d.global_mem_bytes, ", fp16=", d.fp16 ? "True" : "False", ")");
      });

  m.def("devices", &specdec::ocl::list_devices,
        "Every OpenCL device of every platform (empty when no OpenCL driver is installed).");
  m.def("select_device", &specdec::ocl::select_device, py::arg("device") = "",
        "The device a selector picks: '' (SPECDEC_DEVICE, else auto), 'auto', an index, 'P:D', "
        "'gpu'/'cpu'/'accelerator', or part of a name.");
  m.def("kernel_programs", &specdec::ocl::kernel_program_names,
        "Names of the OpenCL programs embedded at build time.");

  py::class_<specdec::ocl::Context, std::shared_ptr<specdec::ocl::Context>>(
      m, "Context", "An OpenCL context and queue on one device, with a program cache.")
      .def(py::init([](const std::string& device) { return specdec::ocl::Context::create(device); }),
           py::arg("device") = "")
      .def_property_readonly("device", &specdec::ocl::Context::device)
      .def("build", [](specdec::ocl::Context& c, const std::string& name, const std::string& source,
                       const std::string& options) { c.build(name, source, options); },
           py::arg("name"), py::arg("source"), py::arg("options") = "",
           "Builds OpenCL C source (cached by name and options); OpenCLError with the build log on failure.")
      .def_property_readonly("num_cached_programs", &specdec::ocl::Context::num_cached_programs)
      .def("build_logs", &specdec::ocl::Context::build_logs,
           "(program [options], log) of every program built so far whose build log is not empty.")
      .def("finish", &specdec::ocl::Context::finish)
      .def_property_readonly("profiling", &specdec::ocl::Context::profiling,
                             "Whether kernels are timed (SPECDEC_PROFILE set at creation).")
      .def("take_profile", [](specdec::ocl::Context& c) {
            const auto p = c.take_profile();
            py::list kernels;
            for (const auto& k : p.kernels) {
              py::dict d;
              d["kernel"] = k.kernel;
              d["launches"] = k.launches;
              d["device_us"] = k.device_us;
              kernels.append(d);
            }
            py::dict out;
            out["kernels"] = kernels;
            out["span_us"] = p.span_us;
            out["dropped"] = p.dropped;
            return out;
          },
          "Waits for the queue; per kernel (first-launch order) the launches and device "
          "microseconds since the last call, and the span first queued -> last ended. Empty "
          "unless SPECDEC_PROFILE was set when the context was created.");
  m.def("quant_isa", [](specdec::ocl::Context& c) {
        return std::string(specdec::quant::quant_isa_name(specdec::quant::device_quant_isa(c)));
      }, py::arg("context"),
        "The integer-dot path the quantized matmuls use on the context's device (portable, avx2, "
        "avx512bw, avx512vnni): SPECDEC_QUANT_ISA, else the fastest the device runs.");
  m.def("quant_isas", [](specdec::ocl::Context& c) {
        std::vector<std::string> out;
        for (auto isa : specdec::quant::device_quant_isas(c)) out.emplace_back(specdec::quant::quant_isa_name(isa));
        return out;
      }, py::arg("context"), "Every integer-dot path the context's device runs, fastest last.");
}
