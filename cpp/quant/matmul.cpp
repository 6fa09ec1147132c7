// Dispatch of the quantized matmul, activation and embedding kernels (kernels/quant_*.cl).
#include "quant/matmul.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "common/errors.h"

namespace specdec::quant {
namespace {

// Largest NB compiled; n above it runs in chunks of kMaxRowsPerItem rows (second grid dimension).
constexpr int kMaxRowsPerItem = 64;

const char* kProbeSource = R"(
typedef char c32 __attribute__((ext_vector_type(32)));
typedef char c64 __attribute__((ext_vector_type(64)));
typedef short s32 __attribute__((ext_vector_type(32)));
kernel void probe(global const c64* a, global const c32* c, global s32* b, global int16* out) {
  b[0] = __builtin_ia32_pmaddubsw512(a[0], a[1]);
  out[0] = __builtin_ia32_pmaddwd512(b[1], __builtin_convertvector(c[0], s32));
}
)";

enum class Family { kFloat, kQ32, kK };

Family family(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return Family::kFloat;
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
      return Family::kK;
    default:
      return Family::kQ32;
  }
}

// "-DWEIGHT_Q4_K" for q4_K.
std::string weight_define(GgmlType type) {
  std::string name = weight_format(type).name;
  std::transform(name.begin(), name.end(), name.begin(),
                 [](unsigned char c) { return std::toupper(c); });
  return "-DWEIGHT_" + name;
}

cl_ulong plane_offset(const DeviceWeight& w, size_t i) {
  return i < w.layout.planes.size() ? static_cast<cl_ulong>(w.layout.planes[i].offset) : 0;
}

void check_holds(const ocl::Buffer& buf, int64_t n, int64_t width, size_t elem_bytes,
                 const std::string& field, const std::string& shape) {
  const auto need = static_cast<size_t>(n) * static_cast<size_t>(width) * elem_bytes;
  check_config(
      buf.get() != nullptr && buf.size_bytes() >= need, field, str_cat(buf.size_bytes(), " bytes"),
      str_cat("must hold ", shape, " = ", n, " x ", width, " elements (", need, " bytes)"));
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

std::string MatmulConfig::options() const {
  return str_cat(
      "-DNB=", rows_per_item, avx512bw ? " -DQUANT_AVX512BW" : "",
      prefetch_bytes > 0 ? str_cat(" -DQUANT_PREFETCH=", prefetch_bytes) : std::string());
}

bool device_has_avx512bw(ocl::Context& ctx) {
  static std::mutex mu;
  static std::map<std::string, bool> known;
  const std::string key = ctx.device().platform_name + "|" + ctx.device().name;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = known.find(key); it != known.end()) return it->second;
  bool ok = false;
  // The CPU must have AVX-512 BW (cpuid), and the device's compiler must know the builtins: the
  // probe is compiled only where it should build, so that no failed build prints errors.
  if (ocl::cpu_features(ctx.device()).avx512bw) {
    try {
      ctx.build("quant_probe", kProbeSource, "");
      ok = true;
    } catch (const ocl::OclError&) {
      ok = false;  // the compiler does not know the builtins: use the portable path
    }
  }
  known[key] = ok;
  return ok;
}

MatmulConfig matmul_config(ocl::Context& ctx, int64_t n) {
  MatmulConfig cfg;
  // NB: 1 keeps the decode accumulator in registers; 16 covers any verify step in one pass over
  // the weights; prefill runs in chunks of 64 rows. Measured in bench/quant_bench.cpp.
  cfg.rows_per_item = n <= 1 ? 1 : n <= 16 ? 16 : kMaxRowsPerItem;
  if (const char* env = std::getenv("SPECDEC_QUANT_NB")) {
    cfg.rows_per_item = std::clamp(std::atoi(env), 1, kMaxRowsPerItem);
  }
  const char* isa = std::getenv("SPECDEC_QUANT_ISA");
  if (isa != nullptr && std::string(isa) == "portable") {
    cfg.avx512bw = false;
  } else {
    cfg.avx512bw = device_has_avx512bw(ctx);
  }
  // Software prefetch 2 KiB ahead: on PoCL's CPU device it lifts a GEMV from 70-85 % to 90-100 %
  // of the streaming bandwidth (the hardware prefetchers alone leave the cores waiting between
  // bursts of integer work). Only the clang-builtin path has it.
  cfg.prefetch_bytes = cfg.avx512bw ? 2048 : 0;
  if (const char* env = std::getenv("SPECDEC_QUANT_PREFETCH"))
    cfg.prefetch_bytes = std::clamp(std::atoi(env), 0, 1 << 20);
  return cfg;
}

void quantize_activations(ocl::Context& ctx, const ocl::Buffer& x, int64_t n, int64_t cols,
                          QuantizedActivations& out) {
  check_config(n >= 0, "n", n, "must be >= 0");
  check_config(cols > 0, "cols", cols, "must be > 0");
  check_holds(x, n, cols, sizeof(float), "x", "[n, cols]");
  out.n = n;
  out.cols = cols;
  // No block format has rows of such length: only F32 / F16 / BF16 weights (which read x) can
  // follow, so there is nothing to quantise.
  if (n == 0 || cols % 32 != 0) return;
  const auto elems = static_cast<size_t>(n * cols);
  if (out.q8.size_bytes() < elems) out.q8 = ocl::Buffer(ctx, elems);
  if (out.q16.size_bytes() < elems * 2) out.q16 = ocl::Buffer(ctx, elems * 2);
  if (out.rec.size_bytes() < elems / 32 * 16) out.rec = ocl::Buffer(ctx, elems / 32 * 16);
  ocl::Kernel k = ctx.kernel("quant_activation", "quantize_activations");
  k.arg(0, x).arg(1, out.q8).arg(2, out.q16).arg(3, out.rec).arg(4, static_cast<cl_int>(cols));
  launch_2d(ctx, k, cols / 32, n);
}

void matmul(ocl::Context& ctx, const DeviceWeight& w, const ocl::Buffer& x,
            const QuantizedActivations& xq, int64_t n, ocl::Buffer& y) {
  check_config(n >= 0, "n", n, "must be >= 0");
  const int64_t rows = w.rows(), cols = w.cols();
  check_holds(y, n, rows, sizeof(float), "y", "[n, rows]");
  if (n == 0) return;
  const MatmulConfig cfg = matmul_config(ctx, n);
  const std::string options = weight_define(w.type()) + " " + cfg.options();
  const int64_t chunks = (n + cfg.rows_per_item - 1) / cfg.rows_per_item;
  const Family fam = family(w.type());
  if (fam == Family::kFloat) {
    check_holds(x, n, cols, sizeof(float), "x", "[n, cols]");
    ocl::Kernel k = ctx.kernel("quant_matmul_float", "matmul_float", options);
    k.arg(0, w.buffer).arg(1, plane_offset(w, 0)).arg(2, x).arg(3, y);
    k.arg(4, static_cast<cl_int>(rows))
        .arg(5, static_cast<cl_int>(cols))
        .arg(6, static_cast<cl_int>(n));
    launch_2d(ctx, k, w.layout.groups, chunks, local_items());
    return;
  }
  check_config(xq.n >= n && xq.cols == cols && xq.rec.size_bytes() > 0, "quantized activations",
               str_cat(xq.n, " x ", xq.cols),
               str_cat("must be quantize_activations of x [", n, ", ", cols, "]"));
  if (fam == Family::kQ32) {
    ocl::Kernel k = ctx.kernel("quant_matmul_q", "matmul_q", options);
    k.arg(0, w.buffer);
    for (cl_uint p = 0; p < 3; ++p) k.arg(1 + p, plane_offset(w, p));
    k.arg(4, xq.q8).arg(5, xq.q16).arg(6, xq.rec).arg(7, y);
    k.arg(8, static_cast<cl_int>(rows))
        .arg(9, static_cast<cl_int>(cols))
        .arg(10, static_cast<cl_int>(n));
    launch_2d(ctx, k, w.layout.groups, chunks, local_items());
  } else {
    ocl::Kernel k = ctx.kernel("quant_matmul_k", "matmul_k", options);
    k.arg(0, w.buffer);
    for (cl_uint p = 0; p < 4; ++p) k.arg(1 + p, plane_offset(w, p));
    k.arg(5, xq.q8).arg(6, xq.rec).arg(7, y);
    k.arg(8, static_cast<cl_int>(rows))
        .arg(9, static_cast<cl_int>(cols))
        .arg(10, static_cast<cl_int>(n));
    launch_2d(ctx, k, w.layout.groups, chunks, local_items());
  }
}

void matmul(ocl::Context& ctx, const DeviceWeight& w, const ocl::Buffer& x, int64_t n,
            ocl::Buffer& y) {
  QuantizedActivations xq;
  if (family(w.type()) != Family::kFloat && n > 0) quantize_activations(ctx, x, n, w.cols(), xq);
  matmul(ctx, w, x, xq, n, y);
}

void embedding_lookup(ocl::Context& ctx, const DeviceWeight& w, const ocl::Buffer& ids, int64_t n,
                      ocl::Buffer& out, float scale) {
  check_config(n >= 0, "n", n, "must be >= 0");
  check_holds(ids, n, 1, sizeof(int32_t), "ids", "[n]");
  check_holds(out, n, w.cols(), sizeof(float), "out", "[n, cols]");
  if (n == 0) return;
  ocl::Kernel k = ctx.kernel("quant_embedding", "embedding_lookup", weight_define(w.type()));
  k.arg(0, w.buffer);
  for (cl_uint p = 0; p < 4; ++p) k.arg(1 + p, plane_offset(w, p));
  k.arg(5, ids).arg(6, out).arg(7, static_cast<cl_int>(w.rows()));
  k.arg(8, static_cast<cl_int>(w.cols())).arg(9, static_cast<cl_float>(scale));
  launch_2d(ctx, k, (w.cols() + 31) / 32, n);
}

void embedding_lookup(ocl::Context& ctx, const DeviceWeight& w, std::span<const int32_t> ids,
                      ocl::Buffer& out, float scale) {
  for (size_t i = 0; i < ids.size(); ++i) {
    check_config(ids[i] >= 0 && ids[i] < w.rows(), str_cat("ids[", i, "]"), ids[i],
                 str_cat("must be a row of ", w.name, " in [0, ", w.rows(), ")"));
  }
  if (ids.empty()) return;
  ocl::Buffer buf(ctx, ids.size() * sizeof(int32_t), CL_MEM_READ_ONLY);
  buf.write(ctx, ids.data(), ids.size() * sizeof(int32_t));
  embedding_lookup(ctx, w, buf, static_cast<int64_t>(ids.size()), out, scale);
}

}  // namespace specdec::quant
