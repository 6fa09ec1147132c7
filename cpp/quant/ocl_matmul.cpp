// The quantized matmul, activation and embedding kernels on OpenCL (kernels/quant_*.cl): the
// integer-dot path probing, the launch configuration and the launches.
#include "device/ocl_device.h"
#include "quant/impl.h"
#include "quant/matmul.h"
#include "quant/ocl_matmul.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdlib>
#include <limits>
#include <map>
#include <tuple>
#include <mutex>
#include <vector>

#include "common/errors.h"

namespace specdec::quant {
namespace {

// Largest NB compiled; n above it runs in chunks of kMaxRowsPerItem rows (second grid dimension).
constexpr int kMaxRowsPerItem = 64;

// One probe per x86 path: the builtins its DOT4 / WIDEN / DOT2 / IQ4 table lookup use
// (kernels/quant_common.clh), compiled only where the device compiler's target has the features (else the program holds a
// kernel `absent` instead of `probe`), so that no failed build prints errors.
const char* probe_source(QuantIsa isa) {
  switch (isa) {
    case QuantIsa::kAvx2:
      return R"(
#ifdef __AVX2__
typedef char c32 __attribute__((ext_vector_type(32)));
kernel void probe(global c32* a, global const short16* b, global int8* out) {
  out[0] = __builtin_ia32_pmaddwd256(__builtin_ia32_pmaddubsw256(a[0], a[1]), b[0]);
  a[2] = __builtin_ia32_pshufb256(a[0], a[1]);
}
#else
kernel void absent(global int* out) { out[0] = 0; }
#endif
)";
    case QuantIsa::kAvx512bw:
      return R"(
#ifdef __AVX512BW__
typedef char c32 __attribute__((ext_vector_type(32)));
typedef char c64 __attribute__((ext_vector_type(64)));
typedef short s32 __attribute__((ext_vector_type(32)));
kernel void probe(global c64* a, global const c32* c, global s32* b, global int16* out) {
  b[0] = __builtin_ia32_pmaddubsw512(a[0], a[1]);
  a[2] = __builtin_ia32_pshufb512(a[0], a[1]);
  out[0] = __builtin_ia32_pmaddwd512(b[1], __builtin_convertvector(c[0], s32));
}
#else
kernel void absent(global int* out) { out[0] = 0; }
#endif
)";
    case QuantIsa::kAvx512vnni:
      return R"(
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
kernel void probe(global const int16* a, global int16* out) {
  out[0] = __builtin_ia32_vpdpbusd512(a[0], a[1], a[2]);
}
#else
kernel void absent(global int* out) { out[0] = 0; }
#endif
)";
    case QuantIsa::kPortable:
      break;
  }
  return "";
}

bool cpu_has(const ocl::CpuFeatures& f, QuantIsa isa) {
  switch (isa) {
    case QuantIsa::kAvx2:
      return f.avx2;
    case QuantIsa::kAvx512bw:
      return f.avx512bw;
    case QuantIsa::kAvx512vnni:
      return f.avx512bw && f.avx512vnni;
    case QuantIsa::kPortable:
      return true;
  }
  return false;
}

// Runs the VNNI probe on known bytes: vpdpbusd's operand order and signedness (unsigned weights
// times signed activations, exact in int32) as the kernels assume. No machine of this project's
// CI compiles that path (PoCL targets skylake-avx512 on Zen 4), so it is checked where it runs.
bool vnni_probe_agrees(ocl::Context& ctx, cl_program program) {
  std::vector<int32_t> in(48), out(16, 0), want(16);
  auto* bytes = reinterpret_cast<uint8_t*>(in.data());
  for (int i = 0; i < 16; ++i) in[i] = 1000 * i - 7;  // the accumulator
  for (int i = 0; i < 64; ++i) bytes[64 + i] = static_cast<uint8_t>(255 - 3 * i);  // unsigned
  for (int i = 0; i < 64; ++i) bytes[128 + i] = static_cast<uint8_t>(11 * i + 128);  // signed
  for (int l = 0; l < 16; ++l) {
    want[l] = in[l];
    for (int j = 0; j < 4; ++j) {
      want[l] += static_cast<int32_t>(bytes[64 + 4 * l + j]) *
                 static_cast<int32_t>(static_cast<int8_t>(bytes[128 + 4 * l + j]));
    }
  }
  try {
    ocl::Buffer a(ctx, in.size() * 4), o(ctx, out.size() * 4);
    a.write(ctx, in.data(), in.size() * 4);
    cl_int err = CL_SUCCESS;
    cl_kernel k = clCreateKernel(program, "probe", &err);
    ocl::check(err, "clCreateKernel", "quant_probe_avx512vnni");
    ocl::Kernel kernel(k, "probe");
    clReleaseKernel(k);  // kernel holds its own reference
    kernel.arg(0, a).arg(1, o);
    const size_t one = 1;
    kernel.launch(ctx, 1, &one, &one);
    o.read(ctx, out.data(), out.size() * 4);
  } catch (const std::exception&) {
    return false;
  }
  return out == want;
}

// The override (set_quant_isa_override) or SPECDEC_QUANT_ISA, read once.
std::mutex g_isa_mu;
std::optional<QuantIsa> g_isa_override;
bool g_isa_override_set = false;
// Bumped by every set_quant_isa_override: invalidates the per-thread cache of matmul_config.
std::atomic<uint64_t> g_isa_generation{1};

std::optional<QuantIsa> forced_isa() {
  static const std::optional<QuantIsa> from_env = []() -> std::optional<QuantIsa> {
    const char* env = std::getenv("SPECDEC_QUANT_ISA");
    if (env == nullptr || *env == '\0') return std::nullopt;
    return parse_quant_isa(env);
  }();
  std::lock_guard<std::mutex> lock(g_isa_mu);
  return g_isa_override_set ? g_isa_override : from_env;
}

int env_int(const char* name, int fallback, int lo, int hi) {
  const char* env = std::getenv(name);
  return env != nullptr ? std::clamp(std::atoi(env), lo, hi) : fallback;
}


// "-DWEIGHT_Q4_K" for q4_K.
std::string weight_define(GgmlType type) {
  std::string name = weight_format(type).name;
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return std::toupper(c); });
  return "-DWEIGHT_" + name;
}

// weight_define(type) + " " + cfg.options(), built once per thread and combination (a matmul
// launch formats no strings).
const std::string& matmul_options(GgmlType type, const MatmulConfig& cfg) {
  thread_local std::map<std::tuple<uint32_t, int, int, int>, std::string> cache;
  const auto key = std::make_tuple(static_cast<uint32_t>(type), cfg.rows_per_item,
                                   static_cast<int>(cfg.isa), cfg.prefetch_bytes);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, weight_define(type) + " " + cfg.options()).first;
  return it->second;
}

cl_ulong plane_offset(const DeviceWeight& w, size_t i) {
  return i < w.layout.planes.size() ? static_cast<cl_ulong>(w.layout.planes[i].offset) : 0;
}


// Work-items per work-group along dim 0 (SPECDEC_QUANT_LOCAL, tuning): the global size is rounded
// up to a multiple and kernels return early past the end.
int64_t local_items() {
  static const int64_t v = [] {
    const char* env = std::getenv("SPECDEC_QUANT_LOCAL");
    return env != nullptr ? std::clamp<int64_t>(std::atoll(env), 1, 64) : 1;
  }();
  return v;
}

void launch_2d(ocl::Context& ctx, ocl::Kernel& k, int64_t d0, int64_t d1, int64_t l0 = 1) {
  const size_t global[2] = {static_cast<size_t>((d0 + l0 - 1) / l0 * l0), static_cast<size_t>(d1)};
  const size_t local[2] = {static_cast<size_t>(l0), 1};
  k.launch(ctx, 2, global, local);
}

}  // namespace

const char* quant_isa_name(QuantIsa isa) {
  switch (isa) {
    case QuantIsa::kPortable:
      return "portable";
    case QuantIsa::kAvx2:
      return "avx2";
    case QuantIsa::kAvx512bw:
      return "avx512bw";
    case QuantIsa::kAvx512vnni:
      return "avx512vnni";
  }
  return "?";
}

QuantIsa parse_quant_isa(const std::string& name, const std::string& field) {
  for (QuantIsa isa : {QuantIsa::kPortable, QuantIsa::kAvx2, QuantIsa::kAvx512bw,
                       QuantIsa::kAvx512vnni}) {
    if (name == quant_isa_name(isa)) return isa;
  }
  throw ConfigError(field, "'" + name + "'", "must be one of portable, avx2, avx512bw, avx512vnni");
}

std::string MatmulConfig::options() const {
  const char* define = isa == QuantIsa::kAvx2        ? " -DQUANT_AVX2"
                       : isa == QuantIsa::kAvx512bw   ? " -DQUANT_AVX512BW"
                       : isa == QuantIsa::kAvx512vnni ? " -DQUANT_AVX512VNNI"
                                                      : "";
  std::string options = "-DNB=" + std::to_string(rows_per_item) + define;  // no ostream: per launch
  if (prefetch_bytes > 0) options += " -DQUANT_PREFETCH=" + std::to_string(prefetch_bytes);
  return options;
}

const std::vector<QuantIsa>& device_quant_isas(ocl::Context& ctx) {
  static std::mutex mu;
  static std::map<std::string, std::vector<QuantIsa>> known;
  const std::string key = ctx.device().platform_name + "|" + ctx.device().name;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = known.find(key); it != known.end()) return it->second;
  std::vector<QuantIsa> isas = {QuantIsa::kPortable};
  const ocl::CpuFeatures features = ocl::cpu_features(ctx.device());
  for (QuantIsa isa : {QuantIsa::kAvx2, QuantIsa::kAvx512bw, QuantIsa::kAvx512vnni}) {
    // cpuid first: the probe is compiled only where it should build (no failed build logs);
    // then the device's compiler must know the builtins for its target (PoCL may target an older
    // CPU than the host, e.g. POCL_LLVM_CPU_NAME).
    if (!cpu_has(features, isa)) continue;
    try {
      cl_program p = ctx.build(str_cat("quant_probe_", quant_isa_name(isa)), probe_source(isa), "");
      char names[256] = {};
      if (clGetProgramInfo(p, CL_PROGRAM_KERNEL_NAMES, sizeof(names) - 1, names, nullptr) ==
              CL_SUCCESS &&
          std::string(names) == "probe") {
        if (isa != QuantIsa::kAvx512vnni || vnni_probe_agrees(ctx, p)) isas.push_back(isa);
      }
    } catch (const ocl::OclError&) {
      // the compiler does not know the builtins: not this path
    }
  }
  return known.emplace(key, std::move(isas)).first->second;
}

QuantIsa device_quant_isa(ocl::Context& ctx) {
  const std::vector<QuantIsa>& isas = device_quant_isas(ctx);
  if (const std::optional<QuantIsa> forced = forced_isa()) {
    if (std::find(isas.begin(), isas.end(), *forced) == isas.end()) {
      std::string allowed;
      for (QuantIsa isa : isas) allowed += str_cat(allowed.empty() ? "" : ", ", quant_isa_name(isa));
      throw ConfigError("SPECDEC_QUANT_ISA", str_cat("'", quant_isa_name(*forced), "'"),
                        str_cat("is not a path device '", ctx.device().name, "' can run (",
                                allowed, ")"));
    }
    return *forced;
  }
  return isas.back();
}

namespace {
std::atomic<int> g_prefetch_override{-1};  // -1: none
}  // namespace

void set_quant_prefetch_override(std::optional<int> bytes) {
  g_prefetch_override.store(bytes.has_value() ? std::max(0, *bytes) : -1);
}

void set_quant_isa_override(std::optional<QuantIsa> isa) {
  std::lock_guard<std::mutex> lock(g_isa_mu);
  g_isa_override = isa;
  g_isa_override_set = isa.has_value();
  g_isa_generation.fetch_add(1);
}

bool device_has_avx512bw(ocl::Context& ctx) {
  const std::vector<QuantIsa>& isas = device_quant_isas(ctx);
  return std::find(isas.begin(), isas.end(), QuantIsa::kAvx512bw) != isas.end();
}

int default_prefetch_bytes(const ocl::DeviceInfo& device, QuantIsa isa) {
  // Software prefetch (x86 builtin paths only) 2 KiB ahead: on a 2-core Xeon VM (AVX-512) it
  // lifted a GEMV from 70-85 % to 90-100 % of the streaming bandwidth (the hardware prefetchers
  // alone left the cores waiting between bursts of integer work). On an AMD EPYC Zen 4 a 1.5B
  // decode step's matmuls take the same time with or without it, and 4- and 8-row passes are
  // faster with it (bench/quant_bench --step-only, alternating runs on a quiet machine;
  // docs/quant.md). GPUs and the portable path: none.
  if (isa == QuantIsa::kPortable || device.type != "cpu") return 0;
  return 2048;
}

MatmulConfig matmul_config(ocl::Context& ctx, int64_t n) {
  MatmulConfig cfg;
  // NB: 1 keeps the decode accumulator in registers; 16 covers any verify step in one pass over
  // the weights; prefill runs in chunks of 64 rows. Measured in bench/quant_bench.cpp.
  static const int fixed_nb = env_int("SPECDEC_QUANT_NB", 0, 0, kMaxRowsPerItem);
  cfg.rows_per_item = fixed_nb > 0 ? fixed_nb : n <= 1 ? 1 : n <= 16 ? 16 : kMaxRowsPerItem;
  // The path, resolved once per (thread, context) instead of a lock and a map lookup per call.
  struct Resolved {
    const ocl::Context* ctx = nullptr;
    cl_context handle = nullptr;
    uint64_t generation = 0;
    QuantIsa isa = QuantIsa::kPortable;
    int prefetch_bytes = 0;
  };
  thread_local Resolved resolved;
  const uint64_t generation = g_isa_generation.load(std::memory_order_relaxed);
  if (resolved.ctx != &ctx || resolved.handle != ctx.get() || resolved.generation != generation) {
    const QuantIsa isa = device_quant_isa(ctx);
    resolved = {&ctx, ctx.get(), generation, isa, default_prefetch_bytes(ctx.device(), isa)};
  }
  cfg.isa = resolved.isa;
  static const int prefetch = env_int("SPECDEC_QUANT_PREFETCH", -1, 0, 1 << 20);
  const int forced = g_prefetch_override.load(std::memory_order_relaxed);
  cfg.prefetch_bytes = forced >= 0 ? forced : prefetch >= 0 ? prefetch : resolved.prefetch_bytes;
  return cfg;
}

void ocl_quantize_activations(device::Device& dev, const device::Buffer& x, int64_t n, int64_t cols,
                              QuantizedActivations& out, int scale_block) {
  ocl::Context& ctx = ocl::context_of(dev);
  // correctly rounded divisions on every device (OpenCL allows 2.5 ulp otherwise: an int8 value
  // could then differ from the reference's and from the fused norms')
  const bool group = scale_block == 256;
  ocl::Kernel k = ctx.kernel("quant_activation",
                             group ? "quantize_activations_256" : "quantize_activations",
                             "-cl-fp32-correctly-rounded-divide-sqrt");
  k.arg(0, x).arg(1, out.q8).arg(2, out.q16).arg(3, out.rec).arg(4, static_cast<cl_int>(cols));
  launch_2d(ctx, k, cols / scale_block, n);
}

void ocl_matmul(device::Device& dev, const DeviceWeight& w, const device::Buffer& x,
                const QuantizedActivations& xq, int64_t n, device::Buffer& y, int64_t y_offset, int64_t ldy) {
  ocl::Context& ctx = ocl::context_of(dev);
  const int64_t rows = w.rows(), cols = w.cols();
  const cl_int y_off = static_cast<cl_int>(y_offset), y_ld = static_cast<cl_int>(ldy);
  const MatmulConfig cfg = matmul_config(ctx, n);
  const std::string& options = matmul_options(w.type(), cfg);
  const int64_t chunks = (n + cfg.rows_per_item - 1) / cfg.rows_per_item;
  const Family fam = family(w.type());
  if (fam == Family::kFloat) {
    ocl::Kernel k = ctx.kernel("quant_matmul_float", "matmul_float", options);
    k.arg(0, w.buffer).arg(1, plane_offset(w, 0)).arg(2, x).arg(3, y);
    k.arg(4, static_cast<cl_int>(rows))
        .arg(5, static_cast<cl_int>(cols))
        .arg(6, static_cast<cl_int>(n))
        .arg(7, y_off)
        .arg(8, y_ld);
    launch_2d(ctx, k, w.layout.groups, chunks, local_items());
    return;
  }
  if (fam == Family::kQ32) {
    ocl::Kernel k = ctx.kernel("quant_matmul_q", "matmul_q", options);
    k.arg(0, w.buffer);
    for (cl_uint p = 0; p < 3; ++p) k.arg(1 + p, plane_offset(w, p));
    k.arg(4, xq.q8).arg(5, xq.q16).arg(6, xq.rec).arg(7, y);
    k.arg(8, static_cast<cl_int>(rows))
        .arg(9, static_cast<cl_int>(cols))
        .arg(10, static_cast<cl_int>(n))
        .arg(11, y_off)
        .arg(12, y_ld);
    launch_2d(ctx, k, w.layout.groups, chunks, local_items());
  } else {
    ocl::Kernel k = ctx.kernel("quant_matmul_k", "matmul_k", options);
    k.arg(0, w.buffer);
    for (cl_uint p = 0; p < 4; ++p) k.arg(1 + p, plane_offset(w, p));
    k.arg(5, xq.q8).arg(6, xq.rec).arg(7, y);
    k.arg(8, static_cast<cl_int>(rows))
        .arg(9, static_cast<cl_int>(cols))
        .arg(10, static_cast<cl_int>(n))
        .arg(11, y_off)
        .arg(12, y_ld);
    launch_2d(ctx, k, w.layout.groups, chunks, local_items());
  }
}

void ocl_embedding_lookup(device::Device& dev, const DeviceWeight& w, const device::Buffer& ids, int64_t n,
                          device::Buffer& out, float scale) {
  ocl::Context& ctx = ocl::context_of(dev);
  ocl::Kernel k = ctx.kernel("quant_embedding", "embedding_lookup", weight_define(w.type()));
  k.arg(0, w.buffer);
  for (cl_uint p = 0; p < 4; ++p) k.arg(1 + p, plane_offset(w, p));
  k.arg(5, ids).arg(6, out).arg(7, static_cast<cl_int>(w.rows()));
  k.arg(8, static_cast<cl_int>(w.cols())).arg(9, static_cast<cl_float>(scale));
  launch_2d(ctx, k, (w.cols() + 31) / 32, n);
}

}  // namespace specdec::quant
