// The KV-cache ops: the checks, then the device's implementation (OpenCL: kv/ocl_cache_ops.cpp),
// and the host references.
#include "kv/cache_ops.h"

#include <cstring>

#include "common/errors.h"
#include "kv/impl.h"

namespace specdec::kv {

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

void kv_cache_write(device::Device& dev, const device::Buffer& cache, const LayerKvView& view,
                    KvPart part, const device::Buffer& src, const device::Buffer& slot_mapping,
                    int num_tokens) {
  const KvPartView& p = part_of(view, part);
  if (p.empty() || num_tokens == 0) return;  // a zero-sized part has nothing to write
  switch (dev.kind()) {
    case device::Kind::kOpenCL: return ocl_kv_cache_write(dev, cache, view, p, src, slot_mapping, num_tokens);
    case device::Kind::kCpu: return cpu_kv_cache_write(dev, cache, view, p, src, slot_mapping, num_tokens);
  }
}

int64_t token_stride(const KvRows& r, const KvPartView& p) {
  const int64_t row = int64_t{p.num_heads} * p.width;
  SPECDEC_CHECK(r.token_stride == 0 || r.token_stride >= row, "kv rows token_stride", r.token_stride,
               str_cat("0 or at least num_heads * width = ", row));
  return r.token_stride == 0 ? row : r.token_stride;
}

void kv_cache_write_kv(device::Device& dev, const device::Buffer& cache, const LayerKvView& view,
                       const KvRows& k, const KvRows& v, const device::Buffer& slot_mapping,
                       int num_tokens) {
  if (num_tokens == 0 || (view.k.empty() && view.v.empty())) return;
  auto check_rows = [&](const KvRows& r, const KvPartView& p, const char* what) {
    if (p.empty()) return;
    SPECDEC_CHECK(r.buffer != nullptr && !r.buffer->empty(), what, "none", "a device buffer");
    const int64_t need = (r.offset + int64_t{num_tokens - 1} * token_stride(r, p) + int64_t{p.num_heads} * p.width) * 4;
    SPECDEC_CHECK(r.offset >= 0 && static_cast<int64_t>(r.buffer->size_bytes()) >= need, what,
                 str_cat(r.buffer->size_bytes(), " bytes"), str_cat("at least ", need, " bytes"));
  };
  check_rows(k, view.k, "kv_cache_write_kv.k");
  check_rows(v, view.v, "kv_cache_write_kv.v");
  switch (dev.kind()) {
    case device::Kind::kOpenCL: return ocl_kv_cache_write_kv(dev, cache, view, k, v, slot_mapping, num_tokens);
    case device::Kind::kCpu: return cpu_kv_cache_write_kv(dev, cache, view, k, v, slot_mapping, num_tokens);
  }
}

bool qkv_epilogue_fits(const LayerKvView& view, int kv_heads, int head_size) {
  auto fits = [&](const KvPartView& p) { return p.num_heads == kv_heads && p.width == head_size; };
  return head_size > 0 && head_size % 2 == 0 && kv_heads > 0 && fits(view.k) && fits(view.v);
}

void kv_cache_write_qkv(device::Device& dev, const device::Buffer& cache, const LayerKvView& view,
                        const QkvEpilogue& e, const device::Buffer& slot_mapping, int num_tokens) {
  if (num_tokens == 0) return;
  SPECDEC_CHECK(qkv_epilogue_fits(view, e.kv_heads, e.head_size), "kv_cache_write_qkv.view",
               str_cat(view.k.num_heads, " x ", view.k.width, " K, ", view.v.num_heads, " x ", view.v.width, " V"),
               str_cat(e.kv_heads, " heads of head_size ", e.head_size, " (even) in K and V"));
  SPECDEC_CHECK(e.q_heads > 0, "kv_cache_write_qkv.q_heads", e.q_heads, "> 0");
  const int64_t width = int64_t{e.q_heads + 2 * e.kv_heads} * e.head_size;
  const int64_t nq = int64_t{e.q_heads} * e.head_size;
  SPECDEC_CHECK(e.x_stride >= width, "kv_cache_write_qkv.x_stride", e.x_stride, str_cat(">= ", width));
  SPECDEC_CHECK(e.q_stride >= nq, "kv_cache_write_qkv.q_stride", e.q_stride, str_cat(">= ", nq));
  auto holds = [&](const device::Buffer* b, int64_t bytes, const char* what) {
    SPECDEC_CHECK(b != nullptr && !b->empty() && static_cast<int64_t>(b->size_bytes()) >= bytes, what,
                 b == nullptr ? std::string("none") : str_cat(b->size_bytes(), " bytes"), str_cat("at least ", bytes, " bytes"));
  };
  const int64_t t = num_tokens;
  holds(e.x, ((t - 1) * e.x_stride + width) * 4, "kv_cache_write_qkv.x");
  holds(e.q_out, ((t - 1) * e.q_stride + nq) * 4, "kv_cache_write_qkv.q_out");
  holds(e.positions, t * 4, "kv_cache_write_qkv.positions");
  holds(&slot_mapping, t * 4, "kv_cache_write_qkv.slot_mapping");
  if (e.bias != nullptr) holds(e.bias, width * 4, "kv_cache_write_qkv.bias");
  if (e.inv_freq != nullptr) holds(e.inv_freq, e.head_size / 2 * 4, "kv_cache_write_qkv.inv_freq");
  switch (dev.kind()) {
    case device::Kind::kOpenCL: return ocl_kv_cache_write_qkv(dev, cache, view, e, slot_mapping, num_tokens);
    case device::Kind::kCpu: return cpu_kv_cache_write_qkv(dev, cache, view, e, slot_mapping, num_tokens);
  }
}

void kv_cache_gather(device::Device& dev, const device::Buffer& cache, const LayerKvView& view,
                     KvPart part, const device::Buffer& slot_mapping, const device::Buffer& dst,
                     int num_tokens) {
  const KvPartView& p = part_of(view, part);
  if (p.empty() || num_tokens == 0) return;
  switch (dev.kind()) {
    case device::Kind::kOpenCL: return ocl_kv_cache_gather(dev, cache, view, p, slot_mapping, dst, num_tokens);
    case device::Kind::kCpu: return cpu_kv_cache_gather(dev, cache, view, p, slot_mapping, dst, num_tokens);
  }
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
