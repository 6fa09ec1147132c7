// OCL_PAGED: general OpenCL paged attention (kernels/attention_paged.cl). One work-group per
// (query token, q head) walks the token's visible keys in tiles with an online softmax; K and V
// are read through the view's part strides, so any attention layout works (declared kv_major).
#include <algorithm>
#include <map>
#include <tuple>
#include <cstdlib>
#include <memory>
#include <string>

#include "attention/backends/backends.h"
#include "common/errors.h"
#include "device/ocl_device.h"
#include "kv/cache_ops.h"
#include "common/math.h"

namespace specdec::attn {
namespace {

constexpr int kMaxHeadSize = 512;  // HEAD_MAX of the kernel: the q row kept in local memory

int next_pow2(int64_t x) {
  int p = 1;
  while (p < x) p *= 2;
  return p;
}

// Work-group shape: work-items, keys per work-item per tile, float lanes per vector, output
// vectors per work-item. Tuning values per device type, measured on PoCL's CPU device (there a
// work-item holds 128 output floats: 1, 2 or 4 work-items per head by head_size_v, 16-key
// tiles); SPECDEC_PAGED_LOCAL, SPECDEC_PAGED_KPW and SPECDEC_PAGED_VEC (4 or 8) override them.
// acc is bucketed (a power of two covering at least 128 floats per work-group) so that few
// distinct programs get built.
struct Shape {
  int local = 64;
  int kpw = 1;
  int vec = 4;
  int acc = 1;
};

// getenv(name) clamped to [lo, hi]; `unset` when the variable is not set.
int env_int_or(const char* name, int unset, int lo, int hi) {
  const char* env = std::getenv(name);
  return env != nullptr ? std::clamp(std::atoi(env), lo, hi) : unset;
}

Shape work_group_shape(const ocl::Context& ctx, int head_size_v) {
  Shape s;
  if (ctx.device().type == "cpu") {
    s.local = next_pow2(cdiv(head_size_v, 128));
    s.kpw = std::max(1, 16 / s.local);
    s.vec = 8;
  }
  // tuning overrides, read once (this runs for every layer's launch)
  static const int env_local = env_int_or("SPECDEC_PAGED_LOCAL", 0, 1, 1024);
  static const int env_kpw = env_int_or("SPECDEC_PAGED_KPW", 0, 1, 256);
  static const int env_vec = env_int_or("SPECDEC_PAGED_VEC", -1, 0, 1 << 20);
  if (env_local > 0) s.local = env_local;
  if (env_kpw > 0) s.kpw = env_kpw;
  if (env_vec >= 0) s.vec = env_vec == 4 ? 4 : 8;
  const int64_t lanes = int64_t{s.vec} * s.local;
  s.acc = std::max(next_pow2(cdiv(head_size_v, lanes)), static_cast<int>(cdiv(128, lanes)));
  return s;
}


BackendCapabilities paged_capabilities() {
  BackendCapabilities c;
  c.name = "OCL_PAGED";
  c.description = "general OpenCL paged attention";
  c.kv_cache_dtypes = {DType::kF32, DType::kF16, DType::kBF16};
  c.max_head_size = kMaxHeadSize;
  c.block_size_multiple_of = 1;
  c.is_mla = false;
  c.causal = true;
  c.non_causal = true;
  c.sliding_window = true;
  c.chunked_local = true;  // the default builder's local virtual batches
  c.logit_softcap = true;
  c.sinks = true;
  c.separate_head_size_v = true;
  c.on_device = true;
  c.devices = {device::Kind::kOpenCL};
  c.kv_layout = kv::KvLayout::kKvMajor;
  c.also_reads = {kv::KvLayout::kBlockMajor};  // reads any attention layout through the view's strides
  return c;
}

// Throws ConfigError / UnsupportedError when the call's shapes do not fit each other.
void check_call(const AttentionMetadata& md, const AttentionLayerParams& p,
                const kv::LayerKvView& view, const device::Buffer& cache, const device::Buffer& query,
                const device::Buffer& output) {
  if (!view.spec.is_attention())
    throw UnsupportedError("OCL_PAGED: MLA caches are not supported; use OCL_MLA");
  SPECDEC_CHECK(p.num_kv_heads == view.k.num_heads && p.num_kv_heads == view.v.num_heads,
               "num_kv_heads", p.num_kv_heads,
               str_cat("must equal the cache's ", view.k.num_heads));
  SPECDEC_CHECK(p.num_q_heads >= 1 && p.num_q_heads % p.num_kv_heads == 0, "num_q_heads",
               p.num_q_heads,
               str_cat("must be a positive multiple of num_kv_heads = ", p.num_kv_heads));
  SPECDEC_CHECK(p.head_size == view.k.width, "head_size", p.head_size,
               str_cat("must equal the cache's ", view.k.width));
  SPECDEC_CHECK(p.head_size_v == view.v.width, "head_size_v", p.head_size_v,
               str_cat("must equal the cache's ", view.v.width));
  if (p.head_size > kMaxHeadSize || p.head_size_v > kMaxHeadSize) {
    throw UnsupportedError(str_cat("OCL_PAGED: head sizes up to ", kMaxHeadSize,
                                   " are supported, got ", p.head_size, " / ", p.head_size_v));
  }
  SPECDEC_CHECK(p.logit_softcap >= 0.0f, "logit_softcap", p.logit_softcap, "must be >= 0");
  SPECDEC_CHECK(p.sliding_window >= 0, "sliding_window", p.sliding_window, "must be >= 0");
  SPECDEC_CHECK(p.attention_chunk_size >= 0, "attention_chunk_size", p.attention_chunk_size,
               "must be >= 0");
  SPECDEC_CHECK(md.host.block_size == view.spec.block_size, "block_size", md.host.block_size,
               str_cat("must equal the cache's ", view.spec.block_size));
  check_forward_buffers(md.host, p, view, cache, query, output);
}

class OclPagedBackend final : public AttentionBackend {
 public:
  const BackendCapabilities& capabilities() const override { return caps_; }

  void forward(device::Device& dev, const AttentionMetadata& md, const AttentionLayerParams& p,
               const kv::LayerKvView& view, const device::Buffer& cache, const device::Buffer& query,
               device::Buffer& output) const override {
    ocl::Context& ctx = ocl::context_of(dev);
    check_layer_call(md.host, p, view);
    check_call(md, p, view, cache, query, output);
    if (md.host.num_actual_tokens == 0) return;
    const Shape shape = work_group_shape(ctx, p.head_size_v);
    // the options per (dtype, shape), formatted once per thread (this runs for every layer)
    thread_local std::map<std::tuple<int, int, int, int, int>, std::string> known;
    const auto key = std::make_tuple(static_cast<int>(view.spec.dtype), shape.local, shape.kpw, shape.vec, shape.acc);
    auto it = known.find(key);
    if (it == known.end()) {
      it = known.emplace(key, str_cat(kv::cache_dtype_define(view.spec.dtype, "OCL_PAGED"), " -DLOCAL=",
                                      shape.local, " -DKPW=", shape.kpw, " -DVEC=", shape.vec,
                                      " -DACC=", shape.acc, " -DHEAD_MAX=", kMaxHeadSize)).first;
    }
    const std::string& options = it->second;
    ocl::Kernel k = ctx.kernel("attention_paged", "paged_attention", options);
    k.arg(0, query).arg(1, output).arg(2, cache);
    k.arg(3, md.query_start_loc)
        .arg(4, md.seq_lens)
        .arg(5, md.block_table)
        .arg(6, md.token_request_buf);
    k.arg(7, p.sinks != nullptr ? *p.sinks : md.seq_lens);  // never read without sinks
    k.arg(8, cl_long{view.k.offset}).arg(9, cl_long{view.k.stride_block});
    k.arg(10, cl_long{view.k.stride_slot}).arg(11, cl_long{view.k.stride_head});
    k.arg(12, cl_long{view.v.offset}).arg(13, cl_long{view.v.stride_block});
    k.arg(14, cl_long{view.v.stride_slot}).arg(15, cl_long{view.v.stride_head});
    k.arg(16, cl_int{md.host.block_size}).arg(17, cl_int{md.host.max_blocks_per_req});
    k.arg(18, cl_int{p.num_q_heads}).arg(19, cl_int{p.num_kv_heads});
    k.arg(20, cl_int{p.head_size}).arg(21, cl_int{p.head_size_v});
    k.arg(22, cl_float{p.scale}).arg(23, cl_float{p.logit_softcap});
    k.arg(24, cl_int{p.sliding_window}).arg(25, cl_int{p.attention_chunk_size});
    k.arg(26, cl_int{md.host.causal ? 1 : 0}).arg(27, cl_int{p.sinks != nullptr ? 1 : 0});
    const size_t global[2] = {static_cast<size_t>(shape.local) * p.num_q_heads,
                              static_cast<size_t>(md.host.num_actual_tokens)};
    const size_t local[2] = {static_cast<size_t>(shape.local), 1};
    k.launch(ctx, 2, global, local);
  }

 private:
  BackendCapabilities caps_ = paged_capabilities();
};

}  // namespace

std::unique_ptr<AttentionBackend> make_ocl_paged_backend() {
  return std::make_unique<OclPagedBackend>();
}

}  // namespace specdec::attn
