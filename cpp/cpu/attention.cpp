#include "cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/dtype.h"
#include "cpu/isa.h"

namespace specdec::cpu {

bool f16_to_f32_f16c(const uint16_t* src, float* dst, int n);  // convert_f16c.cpp

namespace {

bool have_f16c() {
  static const bool yes = [] {
    const CpuFeatures& f = cpu_features();
    return f.f16c && f.os_ymm;
  }();
  return yes;
}

// Every f16 value as f32 (256 KiB, built once; common/dtype's conversion, exact): a table read
// per element instead of a function call with branches.
const float* f16_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t h = 0; h < 65536; ++h) t[h] = half_bits_to_float(static_cast<uint16_t>(h));
    return t;
  }();
  return table.data();
}

// n elements of the cache from element `index` on, as f32.
void load_row(const uint8_t* cache, DType dt, int64_t index, int n, float* dst) {
  switch (dt) {
    case DType::kF32:
      std::memcpy(dst, cache + index * 4, sizeof(float) * static_cast<size_t>(n));
      return;
    case DType::kF16: {
      const uint8_t* src = cache + index * 2;
      if (have_f16c() && f16_to_f32_f16c(reinterpret_cast<const uint16_t*>(src), dst, n)) return;
      const float* table = f16_table();
      for (int i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = table[h];
      }
      return;
    }
    case DType::kBF16: {
      const uint8_t* src = cache + index * 2;
      for (int i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        const uint32_t bits = static_cast<uint32_t>(h) << 16;
        std::memcpy(&dst[i], &bits, 4);
      }
      return;
    }
    case DType::kI8:
      for (int i = 0; i < n; ++i) dst[i] = static_cast<float>(static_cast<int8_t>(cache[index + i]));
      return;
  }
}

// q . k over n elements: 16 lanes, then the lanes in order.
float dot(const float* q, const float* k, int n) {
  float lane[16] = {};
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int l = 0; l < 16; ++l) lane[l] += q[i + l] * k[i + l];
  }
  for (; i < n; ++i) lane[i % 16] += q[i] * k[i];
  float s = 0.0f;
  for (float v : lane) s += v;
  return s;
}

struct Scratch {
  std::vector<float> k, v, scores, acc, m, denom;
};

// The request of token t: query_start_loc[r] <= t < query_start_loc[r + 1].
int request_of(const attn::CommonAttentionMetadata& md, int t) {
  const auto it = std::upper_bound(md.query_start_loc.begin(), md.query_start_loc.begin() + md.num_reqs + 1, t);
  return static_cast<int>(it - md.query_start_loc.begin()) - 1;
}

}  // namespace

int64_t attention_items(const AttentionCall& c) {
  return int64_t{c.md->num_actual_tokens} * c.params->num_kv_heads;
}

void attention(const AttentionCall& c, int64_t i0, int64_t i1) {
  const attn::CommonAttentionMetadata& md = *c.md;
  const attn::AttentionLayerParams& p = *c.params;
  const kv::LayerKvView& view = *c.view;
  const bool mla = view.spec.kind == kv::KvSpecKind::kMla;
  const int hq = p.num_q_heads, hkv = p.num_kv_heads, d = p.head_size, dv = p.head_size_v;
  const int group = hq / hkv, bs = view.spec.block_size;
  const DType dt = view.spec.dtype;
  thread_local Scratch s;
  s.k.resize(static_cast<size_t>(d));
  s.v.resize(static_cast<size_t>(dv));
  s.acc.resize(static_cast<size_t>(group) * dv);
  s.m.resize(static_cast<size_t>(group));
  s.denom.resize(static_cast<size_t>(group));
  for (int64_t item = i0; item < i1; ++item) {
    const int t = static_cast<int>(item / hkv), g = static_cast<int>(item % hkv);
    float* out = c.out + (int64_t{t} * hq + int64_t{g} * group) * dv;
    std::fill(out, out + int64_t{group} * dv, 0.0f);
    const int r = request_of(md, t);
    const int pos = md.num_computed_tokens[r] + (t - md.query_start_loc[r]);
    const int hi = md.causal ? pos : md.seq_lens[r] - 1;
    int lo = 0;
    if (p.sliding_window > 0) lo = std::max(lo, pos - p.sliding_window + 1);
    if (p.attention_chunk_size > 0) lo = std::max(lo, pos / p.attention_chunk_size * p.attention_chunk_size);
    if (hi < lo) continue;
    const int n = hi - lo + 1;
    s.scores.resize(static_cast<size_t>(group) * n);
    const float* q = c.query + (int64_t{t} * hq + int64_t{g} * group) * d;
    const int32_t* blocks = md.block_table.data() + static_cast<size_t>(r) * md.max_blocks_per_req;
    for (int h = 0; h < group; ++h)
      s.m[h] = c.sinks ? c.sinks[g * group + h] : -std::numeric_limits<float>::infinity();
    for (int j = lo; j <= hi; ++j) {  // scores, each key row read once for the group
      const int64_t block = blocks[j / bs];
      load_row(c.cache, dt, mla ? view.k.index(block, j % bs, 0, 0) : view.k.index(block, j % bs, g, 0), d,
               s.k.data());
      for (int h = 0; h < group; ++h) {
        float v = dot(q + int64_t{h} * d, s.k.data(), d) * p.scale;
        if (p.logit_softcap > 0) v = p.logit_softcap * std::tanh(v / p.logit_softcap);
        s.scores[static_cast<size_t>(h) * n + (j - lo)] = v;
        s.m[h] = std::max(s.m[h], v);
      }
    }
    std::fill(s.acc.begin(), s.acc.end(), 0.0f);
    for (int h = 0; h < group; ++h) s.denom[h] = c.sinks ? std::exp(c.sinks[g * group + h] - s.m[h]) : 0.0f;
    for (int j = lo; j <= hi; ++j) {  // values, each row read once for the group
      const int64_t block = blocks[j / bs];
      load_row(c.cache, dt, mla ? view.k.index(block, j % bs, 0, 0) : view.v.index(block, j % bs, g, 0), dv,
               s.v.data());
      for (int h = 0; h < group; ++h) {
        const float w = std::exp(s.scores[static_cast<size_t>(h) * n + (j - lo)] - s.m[h]);
        s.denom[h] += w;
        float* acc = s.acc.data() + static_cast<size_t>(h) * dv;
        for (int i = 0; i < dv; ++i) acc[i] += w * s.v[i];
      }
    }
    for (int h = 0; h < group; ++h) {
      const float* acc = s.acc.data() + static_cast<size_t>(h) * dv;
      for (int i = 0; i < dv; ++i) out[int64_t{h} * dv + i] = acc[i] / s.denom[h];
    }
  }
}

}  // namespace specdec::cpu
