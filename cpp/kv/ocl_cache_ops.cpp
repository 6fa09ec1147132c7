// The KV-cache write and gather kernels on OpenCL (kernels/kv_cache.cl, kernels/fused_qkv.cl):
// the work-items per row, the dtype defines and the launches of kv/cache_ops.cpp.
#include "device/ocl_device.h"
#include "kv/impl.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>
#include <utility>

namespace specdec::kv {
namespace {
// Work-items per (head, token) row (-DLANES): a tuning value per device type, measured on PoCL
// (1 is fastest on a CPU: the row loop vectorises), SPECDEC_KV_LANES overrides it.
int lanes(const ocl::Context& ctx) {
  static const int from_env = [] {  // read once: this runs for every KV write
    const char* env = std::getenv("SPECDEC_KV_LANES");
    return env != nullptr ? std::max(1, std::atoi(env)) : 0;
  }();
  if (from_env > 0) return from_env;
  return ctx.device().type == "cpu" ? 1 : 32;
}

// Formatted once per thread and (dtype, lanes): every KV write asks for it.
const std::string& cache_define(DType dtype, int lanes) {
  thread_local std::map<std::pair<int, int>, std::string> known;
  const auto key = std::make_pair(static_cast<int>(dtype), lanes);
  auto it = known.find(key);
  if (it == known.end()) {
    it = known.emplace(key, cache_dtype_define(dtype, "kv_cache_write") + " -DLANES=" + std::to_string(lanes)).first;
  }
  return it->second;
}

void set_part_args(ocl::Kernel& k, cl_uint first, const LayerKvView& view, const KvPartView& p) {
  k.arg(first + 0, cl_long{p.offset})
      .arg(first + 1, cl_long{p.stride_block})
      .arg(first + 2, cl_long{p.stride_slot})
      .arg(first + 3, cl_long{p.stride_head})
      .arg(first + 4, cl_int{view.spec.block_size})
      .arg(first + 5, cl_int{p.num_heads})
      .arg(first + 6, cl_int{p.width});
}

}  // namespace

void ocl_kv_cache_write(device::Device& dev, const device::Buffer& cache, const LayerKvView& view,
                        const KvPartView& p, const device::Buffer& src, const device::Buffer& slot_mapping,
                        int num_tokens) {
  ocl::Context& ctx = ocl::context_of(dev);
  ocl::Kernel k = ctx.kernel("kv_cache", "kv_cache_write", cache_define(view.spec.dtype, lanes(ctx)));
  k.arg(0, src).arg(1, slot_mapping).arg(2, cache);
  set_part_args(k, 3, view, p);
  k.arg(10, cl_long{int64_t{p.num_heads} * p.width});
  const size_t n = static_cast<size_t>(lanes(ctx));
  const size_t global[2] = {static_cast<size_t>(p.num_heads) * n, static_cast<size_t>(num_tokens)};
  const size_t local[2] = {n, 1};
  k.launch(ctx, 2, global, local);
}

void ocl_kv_cache_write_kv(device::Device& dev, const device::Buffer& cache, const LayerKvView& view,
                           const KvRows& k, const KvRows& v, const device::Buffer& slot_mapping,
                           int num_tokens) {
  ocl::Context& ctx = ocl::context_of(dev);
  const KvRows& any = view.k.empty() ? v : k;
  ocl::Kernel kern = ctx.kernel("kv_cache", "kv_cache_write_kv", cache_define(view.spec.dtype, lanes(ctx)));
  auto part_args = [&](cl_uint first, const KvRows& r, const KvPartView& p) {
    const bool on = !p.empty();
    kern.arg(first, on ? *r.buffer : *any.buffer)
        .arg(first + 1, cl_long{on ? r.offset : 0})
        .arg(first + 2, cl_long{on ? token_stride(r, p) : 0});
  };
  auto view_args = [&](cl_uint first, const KvPartView& p) {
    const bool on = !p.empty();
    kern.arg(first, cl_long{p.offset})
        .arg(first + 1, cl_long{p.stride_block})
        .arg(first + 2, cl_long{p.stride_slot})
        .arg(first + 3, cl_long{p.stride_head})
        .arg(first + 4, cl_int{on ? p.num_heads : 0})
        .arg(first + 5, cl_int{on ? p.width : 0});
  };
  part_args(0, k, view.k);
  part_args(3, v, view.v);
  kern.arg(6, slot_mapping).arg(7, cache).arg(8, cl_int{view.spec.block_size});
  view_args(9, view.k);
  view_args(15, view.v);
  const size_t n = static_cast<size_t>(lanes(ctx));
  const int heads = std::max(view.k.empty() ? 0 : view.k.num_heads, view.v.empty() ? 0 : view.v.num_heads);
  const size_t global[3] = {static_cast<size_t>(heads) * n, static_cast<size_t>(num_tokens), 2};
  const size_t local[3] = {n, 1, 1};
  kern.launch(ctx, 3, global, local);
}

void ocl_kv_cache_write_qkv(device::Device& dev, const device::Buffer& cache, const LayerKvView& view,
                            const QkvEpilogue& e, const device::Buffer& slot_mapping, int num_tokens) {
  ocl::Context& ctx = ocl::context_of(dev);
  std::string options = cache_dtype_define(view.spec.dtype, "kv_cache_write_qkv");
  if (ctx.device().fp64) options += " -DUSE_FP64";  // cos / sin as the rope kernel takes them
  options += " -cl-fp32-correctly-rounded-divide-sqrt";
  ocl::Kernel k = ctx.kernel("fused_qkv", "qkv_bias_rope_kv", options);
  k.arg(0, *e.x).arg(1, cl_long{0}).arg(2, cl_long{e.x_stride});
  k.arg(3, e.bias != nullptr ? *e.bias : *e.x).arg(4, cl_long{0}).arg(5, cl_int{e.bias != nullptr ? 1 : 0});
  k.arg(6, *e.positions).arg(7, cl_long{0});
  k.arg(8, e.inv_freq != nullptr ? *e.inv_freq : *e.x).arg(9, cl_long{0});
  k.arg(10, cl_int{e.neox ? 1 : 0}).arg(11, cl_int{e.inv_freq != nullptr ? 1 : 0});
  k.arg(12, *e.q_out).arg(13, cl_long{0}).arg(14, cl_long{e.q_stride});
  k.arg(15, cl_int{e.q_heads}).arg(16, cl_int{e.kv_heads}).arg(17, cl_int{e.head_size});
  k.arg(18, slot_mapping).arg(19, cache).arg(20, cl_int{view.spec.block_size});
  k.arg(21, cl_long{view.k.offset}).arg(22, cl_long{view.k.stride_block})
      .arg(23, cl_long{view.k.stride_slot}).arg(24, cl_long{view.k.stride_head});
  k.arg(25, cl_long{view.v.offset}).arg(26, cl_long{view.v.stride_block})
      .arg(27, cl_long{view.v.stride_slot}).arg(28, cl_long{view.v.stride_head});
  const size_t global[2] = {static_cast<size_t>((e.head_size / 2 + 15) / 16), static_cast<size_t>(num_tokens)};
  const size_t local[2] = {1, 1};
  k.launch(ctx, 2, global, local);
}

void ocl_kv_cache_gather(device::Device& dev, const device::Buffer& cache, const LayerKvView& view,
                         const KvPartView& p, const device::Buffer& slot_mapping, const device::Buffer& dst,
                         int num_tokens) {
  ocl::Context& ctx = ocl::context_of(dev);
  ocl::Kernel k = ctx.kernel("kv_cache", "kv_cache_gather", cache_define(view.spec.dtype, lanes(ctx)));
  k.arg(0, cache).arg(1, slot_mapping).arg(2, dst);
  set_part_args(k, 3, view, p);
  const size_t n = static_cast<size_t>(lanes(ctx));
  const size_t global[2] = {static_cast<size_t>(p.num_heads) * n, static_cast<size_t>(num_tokens)};
  const size_t local[2] = {n, 1};
  k.launch(ctx, 2, global, local);
}

}  // namespace specdec::kv
