// The native CPU device's KV-cache writes (cpu/kv_write.h): bitwise kv::kv_cache_write_ref and
// kv_cache_gather_ref in every layout and cache dtype (padding slots skipped, token strides), and
// the fused q | k | v epilogue bitwise the separate references (add_bias, rope, the q columns,
// kv_cache_write_ref of k and v). Tokens split between calls give the same bytes.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "cpu/kv_write.h"
#include "cpu/ops.h"
#include "kv/cache_ops.h"
#include "kv/layout.h"
#include "ops/reference.h"
#include "ops/rope.h"

namespace specdec::cpu {
namespace {

std::vector<float> randn(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

struct Layer {
  kv::LayerKvView view;
  std::vector<uint8_t> raw;
};

Layer layer(const kv::KvCacheSpec& spec, kv::KvLayout layout) {
  Layer l;
  l.view = kv::make_layer_view("layer", 0, spec, layout, 8 * spec.page_size_bytes());
  l.raw.assign(static_cast<size_t>(l.view.size_bytes()), 0xAB);
  return l;
}

const std::vector<int32_t> kSlots = {5, 17, -1, 64, 127, 0, 33};

TEST(CpuKvWrite, WriteAndGatherBitwiseTheReferences) {
  for (kv::KvLayout layout : {kv::KvLayout::kKvMajor, kv::KvLayout::kBlockMajor}) {
    for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
      const kv::KvCacheSpec spec = kv::KvCacheSpec::full_attention(16, 3, 32, dt, 16);
      Layer want = layer(spec, layout), got = want;
      const int64_t tokens = static_cast<int64_t>(kSlots.size());
      for (kv::KvPart part : {kv::KvPart::kK, kv::KvPart::kV}) {
        const kv::KvPartView& pv = kv::part_of(want.view, part);
        const int64_t row = int64_t{pv.num_heads} * pv.width, stride = row + 40;
        const std::vector<float> src = randn(static_cast<size_t>(tokens * stride), part == kv::KvPart::kK ? 1 : 2);
        std::vector<float> dense(static_cast<size_t>(tokens * row));
        for (int64_t t = 0; t < tokens; ++t)
          std::memcpy(&dense[t * row], &src[t * stride], sizeof(float) * static_cast<size_t>(row));
        kv::kv_cache_write_ref(want.raw, want.view, part, dense, kSlots);
        kv_write(got.raw.data(), got.view, pv, KvSrc{src.data(), stride}, kSlots.data(), 0, 3);
        kv_write(got.raw.data(), got.view, pv, KvSrc{src.data(), stride}, kSlots.data(), 3, tokens);
        EXPECT_EQ(got.raw, want.raw) << kv::layout_name(layout) << " " << dtype_name(dt);
        const std::vector<float> gw = kv::kv_cache_gather_ref(want.raw, want.view, part, kSlots);
        std::vector<float> gg(gw.size());
        for (size_t i = 0; i < gw.size(); ++i) gg[i] = gw[i];
        std::fill(gg.begin(), gg.end(), -1.0f);  // every row written: slot -1 ones as zeros
        kv_gather(got.raw.data(), got.view, pv, kSlots.data(), gg.data(), 0, tokens);
        EXPECT_EQ(std::memcmp(gg.data(), gw.data(), gw.size() * 4), 0) << "gather";
      }
    }
  }
}

TEST(CpuKvWrite, QkvEpilogueBitwiseTheSeparateReferences) {
  const int qh = 4, kvh = 2, hs = 32;
  const int64_t tokens = static_cast<int64_t>(kSlots.size()), width = int64_t{qh + 2 * kvh} * hs;
  const int64_t x_stride = width + 8, q_stride = int64_t{qh} * hs + 4;
  const std::vector<float> x = randn(static_cast<size_t>(tokens * x_stride), 3);
  const std::vector<float> bias = randn(static_cast<size_t>(width), 4);
  const std::vector<int32_t> pos = {0, 1, 2, 3, 100, 7, 4096};
  const std::vector<float> inv = ops::rope_inv_freq(hs, 10000.0);
  for (bool neox : {false, true}) {
    for (bool with_bias : {false, true}) {
      const kv::KvCacheSpec spec = kv::KvCacheSpec::full_attention(16, kvh, hs, DType::kF16);
      Layer want = layer(spec, kv::KvLayout::kKvMajor), got = want;
      // the references, one op after another
      std::vector<float> rows(static_cast<size_t>(tokens * width));
      for (int64_t t = 0; t < tokens; ++t)
        std::memcpy(&rows[t * width], &x[t * x_stride], sizeof(float) * static_cast<size_t>(width));
      if (with_bias) ops::ref::add_bias(rows, bias, tokens, static_cast<int>(width));
      ops::ref::rope(rows, pos, tokens, qh + kvh, hs, inv, neox ? RopeType::kNeox : RopeType::kNorm, width);
      std::vector<float> want_q(static_cast<size_t>(tokens * q_stride), -3.0f), k(tokens * kvh * hs), v(k.size());
      for (int64_t t = 0; t < tokens; ++t) {
        std::memcpy(&want_q[t * q_stride], &rows[t * width], sizeof(float) * qh * hs);
        std::memcpy(&k[t * kvh * hs], &rows[t * width + qh * hs], sizeof(float) * kvh * hs);
        std::memcpy(&v[t * kvh * hs], &rows[t * width + (qh + kvh) * hs], sizeof(float) * kvh * hs);
      }
      kv::kv_cache_write_ref(want.raw, want.view, kv::KvPart::kK, k, kSlots);
      kv::kv_cache_write_ref(want.raw, want.view, kv::KvPart::kV, v, kSlots);
      // the angles computed in the op, or once beforehand for the call's tokens (as the CPU device
      // does for a step's layers): the same bits
      std::vector<float> angles(static_cast<size_t>(tokens * hs));
      rope_angles(pos.data(), 0, tokens, inv.data(), hs / 2, angles.data());
      for (bool step_angles : {false, true}) {
        Layer got_l = got;
        std::vector<float> got_q(want_q.size(), -3.0f);
        const QkvArgs a{x.data(), x_stride, with_bias ? bias.data() : nullptr, pos.data(), inv.data(),
                        step_angles ? angles.data() : nullptr, neox, got_q.data(), q_stride, qh, kvh, hs};
        // items: token t's q heads (2t), then its k and v heads (2t + 1); split inside a token
        qkv_epilogue(got_l.raw.data(), got_l.view, a, kSlots.data(), 0, 3);
        qkv_epilogue(got_l.raw.data(), got_l.view, a, kSlots.data(), 3, 8);
        qkv_epilogue(got_l.raw.data(), got_l.view, a, kSlots.data(), 8, 2 * tokens);
        EXPECT_EQ(std::memcmp(got_q.data(), want_q.data(), want_q.size() * 4), 0) << neox << with_bias << step_angles;
        EXPECT_EQ(got_l.raw, want.raw) << neox << with_bias << step_angles;
      }
    }
  }
}

}  // namespace
}  // namespace specdec::cpu
