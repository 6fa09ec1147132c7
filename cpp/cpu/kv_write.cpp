#include "cpu/kv_write.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/dtype.h"
#include "cpu/ops.h"
#include "cpu/strict_fp.h"

namespace specdec::cpu {
namespace {

void store(uint8_t* cache, DType dt, int64_t index, const float* v, int n) {
  switch (dt) {
    case DType::kF32:
      std::memcpy(cache + index * 4, v, sizeof(float) * static_cast<size_t>(n));
      return;
    case DType::kF16:
    case DType::kBF16:
      for (int i = 0; i < n; ++i) {
        const uint16_t h = dt == DType::kF16 ? float_to_half_bits(v[i]) : float_to_bf16_bits(v[i]);
        std::memcpy(cache + (index + i) * 2, &h, 2);
      }
      return;
    case DType::kI8:
      for (int i = 0; i < n; ++i) cache[index + i] = static_cast<uint8_t>(static_cast<int8_t>(v[i]));
      return;
  }
}

void load(const uint8_t* cache, DType dt, int64_t index, float* v, int n) {
  switch (dt) {
    case DType::kF32:
      std::memcpy(v, cache + index * 4, sizeof(float) * static_cast<size_t>(n));
      return;
    case DType::kF16:
    case DType::kBF16:
      for (int i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, cache + (index + i) * 2, 2);
        v[i] = dt == DType::kF16 ? half_bits_to_float(h) : bf16_bits_to_float(h);
      }
      return;
    case DType::kI8:
      for (int i = 0; i < n; ++i) v[i] = static_cast<float>(static_cast<int8_t>(cache[index + i]));
      return;
  }
}

void write_token(uint8_t* cache, const kv::LayerKvView& view, const kv::KvPartView& part, const float* row,
                 int32_t slot) {
  const int bs = view.spec.block_size;
  for (int h = 0; h < part.num_heads; ++h)
    store(cache, view.spec.dtype, part.index(slot / bs, slot % bs, h, 0), row + int64_t{h} * part.width, part.width);
}

}  // namespace

void kv_write(uint8_t* cache, const kv::LayerKvView& view, const kv::KvPartView& part, const KvSrc& src,
              const int32_t* slots, int64_t t0, int64_t t1) {
  if (part.width == 0) return;
  const int64_t stride = src.token_stride ? src.token_stride : int64_t{part.num_heads} * part.width;
  for (int64_t t = t0; t < t1; ++t) {
    if (slots[t] >= 0) write_token(cache, view, part, src.data + t * stride, slots[t]);
  }
}

void kv_gather(const uint8_t* cache, const kv::LayerKvView& view, const kv::KvPartView& part,
               const int32_t* slots, float* dst, int64_t t0, int64_t t1) {
  const int bs = view.spec.block_size;
  const int64_t row = int64_t{part.num_heads} * part.width;
  for (int64_t t = t0; t < t1; ++t) {
    const int32_t slot = slots[t];
    if (slot < 0) {  // padding reads as zeros, as kv_cache_gather_ref and the OpenCL kernel give it
      std::fill(dst + t * row, dst + (t + 1) * row, 0.0f);
      continue;
    }
    for (int h = 0; h < part.num_heads; ++h)
      load(cache, view.spec.dtype, part.index(slot / bs, slot % bs, h, 0), dst + t * row + int64_t{h} * part.width,
           part.width);
  }
}

void qkv_epilogue(uint8_t* cache, const kv::LayerKvView& view, const QkvArgs& a, const int32_t* slots, int64_t i0,
                  int64_t i1) {
  const int64_t qw = int64_t{a.q_heads} * a.head_size, kw = int64_t{a.kv_heads} * a.head_size;
  const int64_t width = qw + 2 * kw;
  thread_local std::vector<float> row;
  row.resize(static_cast<size_t>(width));
  const RopeType type = a.neox ? RopeType::kNeox : RopeType::kNorm;
  for (int64_t i = i0; i < i1; ++i) {
    const int64_t t = i / 2;
    const bool q = i % 2 == 0;  // the q heads, else the k and v heads
    const int64_t begin = q ? 0 : qw, len = q ? qw : 2 * kw;
    float* part = row.data() + begin;
    std::memcpy(part, a.x + t * a.x_stride + begin, sizeof(float) * static_cast<size_t>(len));
    if (a.bias != nullptr) add_bias(part, a.bias + begin, 0, 1, static_cast<int>(len));
    if (a.angles != nullptr) {  // q or k heads, the step's angles
      rope_rotate(part, a.angles + t * a.head_size, 0, 1, q ? a.q_heads : a.kv_heads, a.head_size, a.head_size, type,
                  width);
    } else if (a.inv_freq != nullptr) {
      rope(part, a.positions + t, 0, 1, q ? a.q_heads : a.kv_heads, a.head_size, a.inv_freq, a.head_size, type,
           width);
    }
    if (q) {
      std::memcpy(a.q_out + t * a.q_stride, part, sizeof(float) * static_cast<size_t>(qw));
    } else if (slots[t] >= 0) {
      write_token(cache, view, view.k, part, slots[t]);
      if (view.v.width > 0) write_token(cache, view, view.v, part + kw, slots[t]);
    }
  }
}

}  // namespace specdec::cpu
