#include "cpu/isa.h"

#include <cstdint>
#include <cstdlib>

#include "common/errors.h"

#if defined(__x86_64__)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif

namespace specdec::cpu {
namespace {

constexpr Isa kAllIsas[] = {Isa::kPortable, Isa::kAvx2,       Isa::kAvxVnni,
                            Isa::kAvx512bw, Isa::kAvx512vnni, Isa::kAmxInt8};

std::string isa_list(const std::vector<Isa>& isas) {
  std::string out;
  for (Isa isa : isas) out += str_cat(out.empty() ? "" : ", ", isa_name(isa));
  return out;
}

#if defined(__x86_64__)
struct Regs {
  uint32_t a = 0, b = 0, c = 0, d = 0;
};

Regs cpuid(uint32_t leaf, uint32_t subleaf) {
  Regs r;
  if (!__get_cpuid_count(leaf, subleaf, &r.a, &r.b, &r.c, &r.d)) return Regs{};
  return r;
}

bool bit(uint32_t v, int i) { return ((v >> i) & 1u) != 0; }

// XCR0 (the state components the OS saves); only valid when CPUID.1:ECX.OSXSAVE is set.
uint64_t xcr0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

// Linux >= 5.16 hands out AMX tile data per process on request; true when granted (or already).
bool request_amx_permission() {
#if defined(__linux__) && defined(SYS_arch_prctl)
  constexpr long kGetXcompPerm = 0x1022, kReqXcompPerm = 0x1023, kXtileData = 18;
  const auto permitted = [] {
    uint64_t perm = 0;
    return syscall(SYS_arch_prctl, kGetXcompPerm, &perm) == 0 && ((perm >> kXtileData) & 1u) != 0;
  };
  if (permitted()) return true;
  return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0 && permitted();
#else
  return false;
#endif
}

CpuFeatures detect() {
  CpuFeatures f;
  const Regs max = cpuid(0, 0);
  if (max.a < 1) return f;
  const Regs l1 = cpuid(1, 0);
  const bool osxsave = bit(l1.c, 27), avx = bit(l1.c, 28);
  f.fma = bit(l1.c, 12);
  f.f16c = bit(l1.c, 29);
  if (max.a >= 7) {
    const Regs l7 = cpuid(7, 0);
    f.avx2 = bit(l7.b, 5);
    f.avx512f = bit(l7.b, 16);
    f.avx512bw = bit(l7.b, 30);
    f.avx512vl = bit(l7.b, 31);
    f.avx512_vnni = bit(l7.c, 11);
    f.amx_tile = bit(l7.d, 24);
    f.amx_int8 = bit(l7.d, 25);
    if (l7.a >= 1) f.avx_vnni = bit(cpuid(7, 1).a, 4);
  }
  if (osxsave) {
    const uint64_t x = xcr0();
    f.os_ymm = avx && (x & 0x6) == 0x6;
    f.os_zmm = f.os_ymm && (x & 0xE0) == 0xE0;
    f.os_amx = (x & 0x60000) == 0x60000;
  }
  if (f.amx_tile && f.amx_int8 && f.os_amx) f.amx_permitted = request_amx_permission();
  return f;
}
#else
CpuFeatures detect() { return CpuFeatures{}; }
#endif

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kPortable:
      return "portable";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvxVnni:
      return "avx_vnni";
    case Isa::kAvx512bw:
      return "avx512bw";
    case Isa::kAvx512vnni:
      return "avx512_vnni";
    case Isa::kAmxInt8:
      return "amx_int8";
  }
  return "?";
}

Isa parse_isa(const std::string& name, const std::string& field) {
  for (Isa isa : kAllIsas) {
    if (name == isa_name(isa)) return isa;
  }
  throw ConfigError(field, str_cat("'", name, "'"),
                    str_cat("expected one of ",
                            isa_list(std::vector<Isa>(std::begin(kAllIsas), std::end(kAllIsas)))));
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

std::vector<Isa> runnable_isas(const CpuFeatures& f) {
  std::vector<Isa> isas = {Isa::kPortable};
  const bool avx2 = f.avx2 && f.fma && f.f16c && f.os_ymm;
  if (!avx2) return isas;
  isas.push_back(Isa::kAvx2);
  if (f.avx_vnni) isas.push_back(Isa::kAvxVnni);
  if (!(f.avx512f && f.avx512bw && f.avx512vl && f.os_zmm)) return isas;
  isas.push_back(Isa::kAvx512bw);
  if (!f.avx512_vnni) return isas;
  isas.push_back(Isa::kAvx512vnni);
  if (f.amx_tile && f.amx_int8 && f.os_amx && f.amx_permitted) isas.push_back(Isa::kAmxInt8);
  return isas;
}

const std::vector<Isa>& cpu_isas() {
  static const std::vector<Isa> isas = runnable_isas(cpu_features());
  return isas;
}

Isa choose_isa(const std::vector<Isa>& runnable, const char* forced) {
  if (forced == nullptr || *forced == '\0') return runnable.back();
  const std::string value = forced;
  for (Isa isa : runnable) {
    if (value == isa_name(isa)) return isa;
  }
  bool known = false;
  for (Isa isa : kAllIsas) known = known || value == isa_name(isa);
  throw ConfigError(
      "SPECDEC_CPU_ISA", str_cat("'", value, "'"),
      str_cat(known ? "not a path this CPU can run" : "not a path name", "; this CPU runs ",
              isa_list(runnable), " (unset the variable for the fastest)"));
}

Isa cpu_isa() {
  static const Isa isa = choose_isa(cpu_isas(), std::getenv("SPECDEC_CPU_ISA"));
  return isa;
}

}  // namespace specdec::cpu
