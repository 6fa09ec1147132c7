#include "ops/ocl_common.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <tuple>

#include "common/errors.h"
#include "common/math.h"
#include "ops/sampling.h"

namespace specdec::ops {
int reduction_local_size(const ocl::Context& ctx) {
  static const int from_env = [] {  // read once: this runs for every norm launch
    const char* env = std::getenv("SPECDEC_OPS_LOCAL");
    if (env == nullptr) return 0;
    int v = std::clamp(std::atoi(env), 1, 256);
    int p = 1;
    while (p * 2 <= v) p *= 2;
    return p;
  }();
  if (from_env > 0) return from_env;
  // PoCL's CPU device runs a work-group's items in a loop on one core, so splitting a row buys
  // nothing there: one work-item per row (16-float vectors, no barriers) measured 1-3x faster
  // than 8 per row (rms_norm of 768 rows x 128: 31 vs 99 us; log_softmax of 5 x 262144: 1.9 vs
  // 7.9 ms). GPUs get 256 work-items per row.
  return ctx.device().type == "cpu" ? 1 : 256;
}

void launch_rows(ocl::Context& ctx, ocl::Kernel& kernel, int64_t rows, int local,
                 cl_uint num_rows_arg) {
  if (rows <= 0) return;  // nothing to do (and no zero-sized launch)
  kernel.arg(num_rows_arg, cl_long{rows});
  if (local == 1) {
    // one row per work-group: a fixed local size (PoCL builds a work-group function per local
    // size, so one that followed the row count compiled kernels inside requests), and rows spread
    // over the device's workers one by one
    const size_t global = static_cast<size_t>(rows), one = 1;
    kernel.launch(ctx, 1, &global, &one);
    return;
  }
  const size_t global = static_cast<size_t>(rows) * static_cast<size_t>(local);
  const size_t local_size = static_cast<size_t>(local);
  kernel.launch(ctx, 1, &global, &local_size);
}

const std::string& ops_build_options(const ocl::Context& ctx, int local) {
  if (local == 0) local = reduction_local_size(ctx);
  // built once per thread and (device, local): every forward-op launch asks for it
  thread_local std::map<std::tuple<const void*, bool, int>, std::string> cache;
  const auto key = std::make_tuple(static_cast<const void*>(ctx.device().id), ctx.device().fp64, local);
  if (const auto it = cache.find(key); it != cache.end()) return it->second;
  std::string options = "-DLOCAL=" + std::to_string(local);
  if (ctx.device().fp64) options += " -DUSE_FP64";
  // Correctly rounded / and sqrt (IEEE; OpenCL allows 2.5 ulp otherwise, and NVIDIA's runtime
  // takes it): the norms and the activation quantisation fused into them must give the same
  // scales as the C++ references on every device. No change on PoCL's CPU device.
  options += " -cl-fp32-correctly-rounded-divide-sqrt";
  return cache.emplace(key, std::move(options)).first->second;
}

bool top_k_uses_heap(const ocl::Context& ctx) {
  if (const char* env = std::getenv("SPECDEC_OPS_TOPK")) return std::string(env) != "group";
  return reduction_local_size(ctx) == 1;
}

int top_k_local_size(const ocl::Context& ctx) {
  // NSUB = local * 16 subsets must be >= kMaxTopK and fit the candidate buffer.
  return std::clamp(std::max(reduction_local_size(ctx), 64), kMaxTopK / 16, kTopKCandidates / 16);
}

}  // namespace specdec::ops
