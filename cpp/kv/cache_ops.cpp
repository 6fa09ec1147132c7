#include "kv/cache_ops.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "common/errors.h"

namespace specdec::kv {
namespace {

// Work-items per (head, token) row (-DLANES): a tuning value per device type, measured on PoCL
// (1 is fastest on a CPU: the row loop vectorises), SPECDEC_KV_LANES overrides it.
int lanes(const ocl::Context& ctx) {
  if (const char* env = std::getenv("SPECDEC_KV_LANES")) return std::max(1, std::atoi(env));
  return ctx.device().type == "cpu" ? 1 : 32;
}

std::string cache_define(DType dtype, int lanes) {
  return cache_dtype_define(dtype, "kv_cache_write") + " -DLANES=" + std::to_string(lanes);
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
    check_config(s == -1 || (s >= 0 && s < num_slots), str_cat("slot_mapping[", i, "]"), s,
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
