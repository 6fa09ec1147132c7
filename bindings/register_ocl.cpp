// OpenCL devices, and _core.Context: a device::Device (docs/device_seam.md, step 6), with the
// OpenCL context's extras (device info, program builds) on an OpenCL device.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "common/errors.h"
#include "cpu/isa.h"
#include "device/cpu_device.h"
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

// The OpenCL context under a Context's device, for what only OpenCL has (device info, builds).
specdec::ocl::Context& ocl_context(specdec::device::Device& dev, const char* what) {
  if (dev.kind() != specdec::device::Kind::kOpenCL) {
    throw specdec::UnsupportedError(specdec::str_cat("Context.", what, " is for OpenCL devices; this is a ",
                                                     specdec::device::kind_name(dev.kind()), " device"));
  }
  return specdec::ocl::context_of(dev);
}

py::dict profile_dict(const specdec::device::Profile& p) {
  py::list kernels;
  for (const auto& op : p.ops) {
    py::dict d;
    d["kernel"] = op.name;
    d["launches"] = op.launches;
    d["device_us"] = op.device_us;
    if (p.pool.threads > 0) d["wait_us"] = op.wait_us;  // the native device's barrier waits
    kernels.append(d);
  }
  py::dict out;
  out["kernels"] = kernels;
  out["span_us"] = p.span_us;
  out["dropped"] = p.dropped;
  if (p.pool.threads > 0) {  // the native device's pool: thread time and its waiting part
    py::dict pool;
    pool["threads"] = p.pool.threads;
    pool["regions"] = p.pool.regions;
    pool["barriers"] = p.pool.barriers;
    pool["thread_us"] = p.pool.thread_us;
    pool["wait_us"] = p.pool.wait_us;
    pool["barrier_wait_us"] = p.pool.barrier_wait_us;
    out["pool"] = pool;
  } else {
    out["pool"] = py::none();
  }
  return out;
}

void register_context(py::module_& m) {
  using specdec::device::Device;
  py::class_<Device, std::shared_ptr<Device>>(
      m, "Context", "A device (device::open): on OpenCL a context and queue with a program cache.")
      .def(py::init([](const std::string& device) { return specdec::device::open(device); }),
           py::arg("device") = "")
      .def_property_readonly("device", [](Device& d) -> py::object {
        if (d.kind() == specdec::device::Kind::kOpenCL) return py::cast(ocl_context(d, "device").device());
        return py::cast(d.info());
      }, "The device's description: an OpenCL DeviceInfo, or the native CPU device's NativeDeviceInfo "
         "(the same field names).")
      .def_property_readonly("kind", [](Device& d) { return std::string(specdec::device::kind_name(d.kind())); },
                             "'opencl' or 'cpu' (the native CPU device).")
      .def("build", [](Device& d, const std::string& name, const std::string& source,
                       const std::string& options) { ocl_context(d, "build").build(name, source, options); },
           py::arg("name"), py::arg("source"), py::arg("options") = "",
           "Builds OpenCL C source (cached by name and options); OpenCLError with the build log on failure.")
      .def_property_readonly("num_cached_programs",
                             [](Device& d) { return ocl_context(d, "num_cached_programs").num_cached_programs(); })
      .def("build_logs", [](Device& d) { return ocl_context(d, "build_logs").build_logs(); },
           "(program [options], log) of every program built so far whose build log is not empty.")
      .def("finish", &Device::sync, "Waits for every op enqueued so far.")
      .def_property_readonly("profiling", &Device::profiling,
                             "Whether kernels are timed (SPECDEC_PROFILE set at creation).")
      .def("take_profile", [](Device& d) { return profile_dict(d.take_profile()); },
           "Waits for the queue; per kernel (first-launch order) the launches and device "
           "microseconds since the last call, and the span first queued -> last ended. Empty "
           "unless SPECDEC_PROFILE was set when the context was created.");
  m.def("quant_isa", [](Device& d) {
        if (d.kind() == specdec::device::Kind::kCpu) {
          return std::string(specdec::cpu::isa_name(specdec::device::cpu_of(d).isa()));
        }
        return std::string(specdec::quant::quant_isa_name(specdec::quant::device_quant_isa(ocl_context(d, "quant_isa"))));
      }, py::arg("context"),
        "The integer-dot path the quantized matmuls use on the context's device: on OpenCL portable, "
        "avx2, avx512bw, avx512vnni (SPECDEC_QUANT_ISA, else the fastest the device runs); on the "
        "native CPU device its path (portable, avx2, avx_vnni, avx512bw, avx512_vnni; SPECDEC_CPU_ISA).");
  m.def("quant_isas", [](Device& d) {
        std::vector<std::string> out;
        if (d.kind() == specdec::device::Kind::kCpu) {
          for (auto isa : specdec::cpu::cpu_isas()) out.emplace_back(specdec::cpu::isa_name(isa));
          return out;
        }
        for (auto isa : specdec::quant::device_quant_isas(ocl_context(d, "quant_isas"))) {
          out.emplace_back(specdec::quant::quant_isa_name(isa));
        }
        return out;
      }, py::arg("context"), "Every integer-dot path the context's device runs, fastest last.");
}

}  // namespace

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

  using specdec::device::Info;
  py::class_<Info>(m, "NativeDeviceInfo",
                   "The native CPU device (device='native'): the CPU, its SIMD path and threads, with "
                   "DeviceInfo's field names.")
      .def_readonly("name", &Info::name)
      .def_readonly("vendor", &Info::vendor)
      .def_readonly("platform", &Info::platform)
      .def_readonly("type", &Info::type)
      .def_readonly("compute_units", &Info::compute_units)
      .def_readonly("global_mem_bytes", &Info::global_mem_bytes)
      .def_readonly("max_alloc_bytes", &Info::max_alloc_bytes)
      .def_readonly("local_mem_bytes", &Info::local_mem_bytes)
      .def_readonly("fp64", &Info::fp64)
      .def_property_readonly("index", [](const Info&) { return -1; })
      .def_property_readonly("kind", [](const Info& i) { return std::string(specdec::device::kind_name(i.kind)); })
      .def_property_readonly("fp16", [](const Info&) { return false; })
      .def("summary", &Info::summary)
      .def("as_dict", [](const Info& i) {
        py::dict d;
        d["kind"] = specdec::device::kind_name(i.kind);
        d["name"] = i.name;
        d["vendor"] = i.vendor;
        d["platform"] = i.platform;
        d["type"] = i.type;
        d["compute_units"] = i.compute_units;
        d["global_mem_bytes"] = i.global_mem_bytes;
        d["max_alloc_bytes"] = i.max_alloc_bytes;
        return d;
      })
      .def("__repr__", [](const Info& i) {
        return specdec::str_cat("NativeDeviceInfo(name='", i.name, "', platform='", i.platform,
                                "', threads=", i.compute_units, ")");
      });

  m.def("devices", &specdec::ocl::list_devices,
        "Every OpenCL device of every platform (empty when no OpenCL driver is installed).");
  m.def("select_device", &specdec::ocl::select_device, py::arg("device") = "",
        "The device a selector picks: '' (SPECDEC_DEVICE, else auto), 'auto', an index, 'P:D', "
        "'gpu'/'cpu'/'accelerator', or part of a name.");
  m.def("auto_is_native", &specdec::device::auto_is_native,
        "Whether device 'auto' (the default without SPECDEC_DEVICE) is the native CPU device: no "
        "OpenCL GPU or accelerator, and a CPU with AVX2 or better (or no OpenCL device at all).");
  m.def("kernel_programs", &specdec::ocl::kernel_program_names,
        "Names of the OpenCL programs embedded at build time.");

  register_context(m);
}
