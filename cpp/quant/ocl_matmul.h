// The OpenCL matmul's integer-dot paths and launch configuration (implemented in
// quant/ocl_matmul.cpp): for the OpenCL device's files, the bindings' quant_isa, and the tests and
// benchmarks that force or report a path. The ops themselves are in quant/matmul.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ocl/context.h"
#include "ocl/device.h"

namespace specdec::quant {

// The integer-dot path of the block-format kernels (kernels/quant_common.clh). Every path gives
// bitwise the same results; they differ in speed only.
enum class QuantIsa { kPortable, kAvx2, kAvx512bw, kAvx512vnni };
const char* quant_isa_name(QuantIsa isa);  // "portable", "avx2", "avx512bw", "avx512vnni"
// Parses a name as quant_isa_name writes it; ConfigError naming `field` and the allowed names.
QuantIsa parse_quant_isa(const std::string& name, const std::string& field = "SPECDEC_QUANT_ISA");

// The paths ctx's device can run, portable first and fastest last: an x86 path is offered only
// where the device is a CPU whose cpuid has the features and whose compiler builds the path's
// builtins (probed once per device; the probe is compiled only where it should build, so no
// failed build prints errors).
const std::vector<QuantIsa>& device_quant_isas(ocl::Context& ctx);
// The path matmul uses on ctx's device: the override if one is set, else SPECDEC_QUANT_ISA
// (read once per process), else the fastest the device runs. A forced path the device cannot
// run is a ConfigError naming the variable, the value and the paths it can run.
QuantIsa device_quant_isa(ocl::Context& ctx);
// Forces a path for every later matmul (tests and benchmarks); nullopt restores the default.
void set_quant_isa_override(std::optional<QuantIsa> isa);

// Kernel tuning for one call: activation rows per work-item (NB) and the integer-dot path.
struct MatmulConfig {
  int rows_per_item = 1;  // NB
  QuantIsa isa = QuantIsa::kPortable;
  int prefetch_bytes = 0;  // software prefetch distance in the main weight plane (0: none)
  std::string options() const;
};
// The configuration matmul uses for n activation rows on ctx's device. Environment overrides
// (tuning, read once per process): SPECDEC_QUANT_NB (fixed NB), SPECDEC_QUANT_ISA (see
// device_quant_isa), SPECDEC_QUANT_PREFETCH (bytes, 0 = off).
MatmulConfig matmul_config(ocl::Context& ctx, int64_t n);
// The software prefetch distance a device gets unless SPECDEC_QUANT_PREFETCH says otherwise:
// 2048 bytes on CPUs with an x86 integer path, 0 elsewhere (measured: matmul.cpp).
int default_prefetch_bytes(const ocl::DeviceInfo& device, QuantIsa isa);
// Forces the prefetch distance for this process (tests: both settings give bitwise the same
// results); nullopt restores SPECDEC_QUANT_PREFETCH or the default.
void set_quant_prefetch_override(std::optional<int> bytes);
// Whether ctx's device runs the AVX-512 BW path (or VNNI, which implies it).
bool device_has_avx512bw(ocl::Context& ctx);

}  // namespace specdec::quant
