#include "kv/cache_ops.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <utility>

#include "common/errors.h"

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

std::string cache_dtype_define(DType dtype, const std::string& who) {
  switch (dtype) {
    case DType::kF32: return "-DCACHE_F32";
    case DType::kF16: return "-DCACHE_F16";
    case DType::kBF16: return "-DCACHE_BF16";
    case DType::kI8: break;
  }
  throw UnsupportedError(who + ": kv_cache_dtype " + dtype_name(dtype) +
                         " has no device kernel yet; use f32, f16 or bf16");
}

const KvPartView& part_of(const LayerKvView& view, KvPart part) {
  return part == KvPart::kK ? view.k : view.v;
}

void check_slot_mapping(const LayerKvView& view, const std::vector<int32_t>& slot_mapping) {
  const int64_t num_slots = view.num_blocks * view.spec.block_size;
  for (size_t i = 0; i < slot_mapping.size(); ++i) {
    const int64_t s = slot_mapping[i];
    SPECDEC_CHECK(s == -1 || (s >= 0 && s < num_slots), str_cat("slot_mapping[", i, "]"), s,
                 str_cat("must be -1 (padding) or in [0, ", num_slots, ")"));
  }
}

void kv_cache_write(ocl::Context& ctx, const ocl::Buffer& cache, const LayerKvView& view,
                    KvPart part, const ocl::Buffer& src, const ocl::Buffer& slot_mapping,
                    int num_tokens) {
  const KvPartView& p = part_of(view, part);
  if (p.empty() || num_tokens == 0) return;  // a zero-sized part has nothing to write
  ocl::Kernel k = ctx.kernel("kv_cache", "kv_cache_write", cache_define(view.spec.dtype, lanes(ctx)));
  k.arg(0, src).arg(1, slot_mapping).arg(2, cache);
  set_part_args(k, 3, view, p);
  k.arg(10, cl_long{int64_t{p.num_heads} * p.width});
  const size_t n = static_cast<size_t>(lanes(ctx));
  const size_t global[2] = {static_cast<size_t>(p.num_heads) * n, static_cast<size_t>(num_tokens)};
  const size_t local[2] = {n, 1};
  k.launch(ctx, 2, global, local);
}

void kv_cache_write_kv(ocl::Context& ctx, const ocl::Buffer& cache, const LayerKvView& view,
                       const KvRows& k, const KvRows& v, const ocl::Buffer& slot_mapping,
                       int num_tokens) {
  if (num_tokens == 0 || (view.k.empty() && view.v.empty())) return;
  auto stride = [](const KvRows& r, const KvPartView& p) {
    const int64_t row = int64_t{p.num_heads} * p.width;
    SPECDEC_CHECK(r.token_stride == 0 || r.token_stride >= row, "kv rows token_stride", r.token_stride,
                 str_cat("0 or at least num_heads * width = ", row));
    return r.token_stride == 0 ? row : r.token_stride;
  };
  auto check_rows = [&](const KvRows& r, const KvPartView& p, const char* what) {
    if (p.empty()) return;
    SPECDEC_CHECK(r.buffer != nullptr && r.buffer->get() != nullptr, what, "none", "a device buffer");
    const int64_t need = (r.offset + int64_t{num_tokens - 1} * stride(r, p) + int64_t{p.num_heads} * p.width) * 4;
    SPECDEC_CHECK(r.offset >= 0 && static_cast<int64_t>(r.buffer->size_bytes()) >= need, what,
                 str_cat(r.buffer->size_bytes(), " bytes"), str_cat("at least ", need, " bytes"));
  };
  check_rows(k, view.k, "kv_cache_write_kv.k");
  check_rows(v, view.v, "kv_cache_write_kv.v");
  const KvRows& any = view.k.empty() ? v : k;
  ocl::Kernel kern = ctx.kernel("kv_cache", "kv_cache_write_kv", cache_define(view.spec.dtype, lanes(ctx)));
  auto part_args = [&](cl_uint first, const KvRows& r, const KvPartView& p) {
    const bool on = !p.empty();
    kern.arg(first, on ? *r.buffer : *any.buffer)
        .arg(first + 1, cl_long{on ? r.offset : 0})
        .arg(first + 2, cl_long{on ? stride(r, p) : 0});
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

bool qkv_epilogue_fits(const LayerKvView& view, int kv_heads, int head_size) {
  auto fits = [&](const KvPartView& p) { return p.num_heads == kv_heads && p.width == head_size; };
  return head_size > 0 && head_size % 2 == 0 && kv_heads > 0 && fits(view.k) && fits(view.v);
}

void kv_cache_write_qkv(ocl::Context& ctx, const ocl::Buffer& cache, const LayerKvView& view,
                        const QkvEpilogue& e, const ocl::Buffer& slot_mapping, int num_tokens) {
  if (num_tokens == 0) return;
  SPECDEC_CHECK(qkv_epilogue_fits(view, e.kv_heads, e.head_size), "kv_cache_write_qkv.view",
               str_cat(view.k.num_heads, " x ", view.k.width, " K, ", view.v.num_heads, " x ", view.v.width, " V"),
               str_cat(e.kv_heads, " heads of head_size ", e.head_size, " (even) in K and V"));
  SPECDEC_CHECK(e.q_heads > 0, "kv_cache_write_qkv.q_heads", e.q_heads, "> 0");
  const int64_t width = int64_t{e.q_heads + 2 * e.kv_heads} * e.head_size;
  const int64_t nq = int64_t{e.q_heads} * e.head_size;
  SPECDEC_CHECK(e.x_stride >= width, "kv_cache_write_qkv.x_stride", e.x_stride, str_cat(">= ", width));
  SPECDEC_CHECK(e.q_stride >= nq, "kv_cache_write_qkv.q_stride", e.q_stride, str_cat(">= ", nq));
  auto holds = [&](const ocl::Buffer* b, int64_t bytes, const char* what) {
    SPECDEC_CHECK(b != nullptr && b->get() != nullptr && static_cast<int64_t>(b->size_bytes()) >= bytes, what,
                 b == nullptr ? std::string("none") : str_cat(b->size_bytes(), " bytes"), str_cat("at least ", bytes, " bytes"));
  };
  const int64_t t = num_tokens;
  holds(e.x, ((t - 1) * e.x_stride + width) * 4, "kv_cache_write_qkv.x");
  holds(e.q_out, ((t - 1) * e.q_stride + nq) * 4, "kv_cache_write_qkv.q_out");
  holds(e.positions, t * 4, "kv_cache_write_qkv.positions");
  holds(&slot_mapping, t * 4, "kv_cache_write_qkv.slot_mapping");
  if (e.bias != nullptr) holds(e.bias, width * 4, "kv_cache_write_qkv.bias");
  if (e.inv_freq != nullptr) holds(e.inv_freq, e.head_size / 2 * 4, "kv_cache_write_qkv.inv_freq");
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
  const size_t global[2] = {static_cast<size_t>((e.head_size / 2 + 15) / 16), static_cast<size_t>(t)};
  const size_t local[2] = {1, 1};
  k.launch(ctx, 2, global, local);
}

void kv_cache_gather(ocl::Context& ctx, const ocl::Buffer& cache, const LayerKvView& view,
                     KvPart part, const ocl::Buffer& slot_mapping, const ocl::Buffer& dst,
                     int num_tokens) {
  const KvPartView& p = part_of(view, part);
  if (p.empty() || num_tokens == 0) return;
  ocl::Kernel k = ctx.kernel("kv_cache", "kv_cache_gather", cache_define(view.spec.dtype, lanes(ctx)));
  k.arg(0, cache).arg(1, slot_mapping).arg(2, dst);
  set_part_args(k, 3, view, p);
  const size_t n = static_cast<size_t>(lanes(ctx));
  const size_t global[2] = {static_cast<size_t>(p.num_heads) * n, static_cast<size_t>(num_tokens)};
  const size_t local[2] = {n, 1};
  k.launch(ctx, 2, global, local);
}

float load_element(const std::vector<uint8_t>& raw, DType dtype, int64_t index) {
  const size_t at = static_cast<size_t>(index) * dtype_size(dtype);
  switch (dtype) {
    case DType::kF32: { float f; std::memcpy(&f, raw.data() + at, 4); return f; }
    case DType::kF16: { uint16_t h; std::memcpy(&h, raw.data() + at, 2); return half_bits_to_float(h); }
    case DType::kBF16: { uint16_t h; std::memcpy(&h, raw.data() + at, 2); return bf16_bits_to_float(h); }
    case DType::kI8: return static_cast<float>(static_cast<int8_t>(raw[at]));
  }
  return 0.0f;
}

void store_element(std::vector<uint8_t>& raw, DType dtype, int64_t index, float value) {
  const size_t at = static_cast<size_t>(index) * dtype_size(dtype);
  switch (dtype) {
    case DType::kF32: std::memcpy(raw.data() + at, &value, 4); break;
    case DType::kF16: { uint16_t h = float_to_half_bits(value); std::memcpy(raw.data() + at, &h, 2); break; }
    case DType::kBF16: { uint16_t h = float_to_bf16_bits(value); std::memcpy(raw.data() + at, &h, 2); break; }
    case DType::kI8: raw[at] = static_cast<uint8_t>(static_cast<int8_t>(value)); break;
  }
}

void kv_cache_write_ref(std::vector<uint8_t>& raw, const LayerKvView& view, KvPart part,
                        const std::vector<float>& src, const std::vector<int32_t>& slot_mapping) {
  const KvPartView& p = part_of(view, part);
  const int bs = view.spec.block_size;
  const int64_t row = int64_t{p.num_heads} * p.width;
  for (size_t t = 0; t < slot_mapping.size(); ++t) {
    if (slot_mapping[t] < 0) continue;
    const int64_t block = slot_mapping[t] / bs, pos = slot_mapping[t] % bs;
    for (int h = 0; h < p.num_heads; ++h) {
      for (int d = 0; d < p.width; ++d) {
        store_element(raw, view.spec.dtype, p.index(block, pos, h, d),
                      src[t * row + int64_t{h} * p.width + d]);
      }
    }
  }
}

std::vector<float> kv_cache_gather_ref(const std::vector<uint8_t>& raw, const LayerKvView& view,
                                       KvPart part, const std::vector<int32_t>& slot_mapping) {
  const KvPartView& p = part_of(view, part);
  const int bs = view.spec.block_size;
  const int64_t row = int64_t{p.num_heads} * p.width;
  std::vector<float> out(slot_mapping.size() * row, 0.0f);
  for (size_t t = 0; t < slot_mapping.size(); ++t) {
    if (slot_mapping[t] < 0) continue;
    const int64_t block = slot_mapping[t] / bs, pos = slot_mapping[t] % bs;
    for (int h = 0; h < p.num_heads; ++h) {
      for (int d = 0; d < p.width; ++d) {
        out[t * row + int64_t{h} * p.width + d] = load_element(raw, view.spec.dtype, p.index(block, pos, h, d));
      }
    }
  }
  return out;
}

}  // namespace specdec::kv
