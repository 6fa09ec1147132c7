// Run-time instruction-set detection for the native CPU device: which SIMD paths this CPU and
// its OS can run (cpuid AND the XCR0 state the OS saves; AMX also needs Linux's per-process
// permission for its tile data), and which one the kernels use (SPECDEC_CPU_ISA forces a lower
// one). ISA code lives in its own translation units, compiled with per-file flags
// (CMakeLists.txt) and reached through function pointers chosen here at run time, so the library
// runs on any x86-64 CPU (and builds, with the portable path only, on other architectures).
#pragma once

#include <string>
#include <vector>

namespace specdec::cpu {

// The SIMD paths, slowest first. A path needs every feature listed:
//   kAvx2:       AVX2, FMA, F16C, OS-saved YMM state;
//   kAvxVnni:    kAvx2 plus AVX-VNNI (256-bit vpdpbusd, VEX encoded);
//   kAvx512bw:   kAvx2 plus AVX-512 F / BW / VL and OS-saved ZMM / opmask state;
//   kAvx512vnni: kAvx512bw plus AVX512_VNNI;
//   kAmxInt8:    kAvx512vnni plus AMX-TILE / AMX-INT8, OS-saved tile state and the Linux
//                permission for tile data (arch_prctl(ARCH_REQ_XCOMP_PERM, 18)) granted.
enum class Isa { kPortable, kAvx2, kAvxVnni, kAvx512bw, kAvx512vnni, kAmxInt8 };

// "portable", "avx2", "avx_vnni", "avx512bw", "avx512_vnni", "amx_int8".
const char* isa_name(Isa isa);
// The path named `name` (as isa_name writes it); ConfigError naming `field`, the value and the
// known names otherwise.
Isa parse_isa(const std::string& name, const std::string& field = "SPECDEC_CPU_ISA");

// What cpuid and XCR0 report (all false on non-x86 builds).
struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false, avx_vnni = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512_vnni = false;
  bool amx_tile = false, amx_int8 = false;
  bool os_ymm = false;         // XCR0 bits 1, 2 (SSE, AVX state)
  bool os_zmm = false;         // XCR0 bits 5, 6, 7 (opmask, ZMM_Hi256, Hi16_ZMM)
  bool os_amx = false;         // XCR0 bits 17, 18 (TILECFG, TILEDATA)
  bool amx_permitted = false;  // Linux granted tile data to this process (requested once)
};

// This CPU's features, read once per process (the AMX permission is requested on the first call
// when the CPU and OS support AMX; call it from the main thread before starting workers).
const CpuFeatures& cpu_features();

// The paths `f` allows, kPortable first, fastest last.
std::vector<Isa> runnable_isas(const CpuFeatures& f);
// The paths this CPU runs (runnable_isas(cpu_features())).
const std::vector<Isa>& cpu_isas();

// The path to use on a CPU that runs `runnable`: the one `forced` names (SPECDEC_CPU_ISA's
// value; null or empty: none), else the fastest. A name this CPU cannot run or an unknown name
// is a ConfigError naming SPECDEC_CPU_ISA, the value and the paths this CPU can run.
Isa choose_isa(const std::vector<Isa>& runnable, const char* forced);
// choose_isa(cpu_isas(), getenv("SPECDEC_CPU_ISA")), read once per process.
Isa cpu_isa();

}  // namespace specdec::cpu
