#include "cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/dtype.h"
#include "cpu/attention_kernels.h"
#include "cpu/vmath.h"

namespace specdec::cpu {
namespace {

using attn_kernels::Kernels;

// ---- the portable inner loops (explicit mul and add: no FMA on a plain x86-64) ----
void transpose_keys_portable(const float* k, int nk, int d, float* kt) {
  for (int c = 0; c < d; ++c)
    for (int j = 0; j < attn_kernels::kKeyTile; ++j) kt[int64_t{c} * attn_kernels::kKeyTile + j] = j < nk ? k[int64_t{j} * d + c] : 0.0f;
}

void qk_tile_portable(const float* q, int rows, int64_t q_stride, const float* kt, int d, float scale, int a, int b,
                      int nk, float* out, int64_t out_stride, float* mx) {
  constexpr int kT = attn_kernels::kKeyTile;
  for (int r = 0; r < rows; ++r) {
    const float* qr = q + r * q_stride;
    float s[kT] = {};
    for (int c = 0; c < d; ++c)
      for (int j = 0; j < kT; ++j) s[j] = s[j] + qr[c] * kt[int64_t{c} * kT + j];
    float* o = out + r * out_stride;
    for (int j = 0; j < nk; ++j) {
      o[j] = j < a || j > b ? -std::numeric_limits<float>::infinity() : s[j] * scale;
      if (mx != nullptr && j >= a && j <= b && o[j] > mx[r]) mx[r] = o[j];
    }
  }
}

void pv_tile_portable(float* acc, int rows, int64_t acc_stride, const float* w, int64_t w_stride, const float* v, int a,
                      int b, int dv) {
  for (int r = 0; r < rows; ++r) {
    float* ar = acc + r * acc_stride;
    for (int j = a; j <= b; ++j) {
      const float wj = w[r * w_stride + j];
      for (int e = 0; e < dv; ++e) ar[e] = ar[e] + wj * v[int64_t{j} * dv + e];
    }
  }
}

// Every f16 value as f32 (256 KiB, built once; common/dtype's exact conversion).
const float* f16_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t h = 0; h < 65536; ++h) t[h] = half_bits_to_float(static_cast<uint16_t>(h));
    return t;
  }();
  return table.data();
}

void f16_row_portable(const uint8_t* src, float* dst, int n) {
  const float* table = f16_table();
  for (int i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    dst[i] = table[h];
  }
}

// Each path's table is built on first use by a caller of that path, never before: building the
// AVX-512 table runs code compiled for AVX-512, which faults on a CPU without it.
const Kernels& portable_table() {
  static const Kernels k{transpose_keys_portable, qk_tile_portable, pv_tile_portable, f16_row_portable};
  return k;
}
const Kernels& avx2_table() {
  static const Kernels k = [] {
    Kernels t = portable_table();
    attn_kernels::avx2_kernels(t);
    return t;
  }();
  return k;
}
const Kernels& avx512_table() {
  static const Kernels k = [] {
    Kernels t = avx2_table();
    attn_kernels::avx512_kernels(t);
    return t;
  }();
  return k;
}

const Kernels& kernels_for(Isa isa) {
  if (isa >= Isa::kAvx512bw) return avx512_table();
  if (isa >= Isa::kAvx2) return avx2_table();
  return portable_table();
}

// n elements of the cache from element `index` on, as f32.
void load_row(const Kernels& kern, const uint8_t* cache, DType dt, int64_t index, int n, float* dst) {
  switch (dt) {
    case DType::kF32:
      std::memcpy(dst, cache + index * 4, sizeof(float) * static_cast<size_t>(n));
      return;
    case DType::kF16:  // the kernels read the bytes by vector loads (and memcpy in their tails)
      kern.f16_row(cache + index * 2, dst, n);
      return;
    case DType::kBF16:
      for (int i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, cache + (index + i) * 2, 2);
        const uint32_t bits = static_cast<uint32_t>(h) << 16;
        std::memcpy(&dst[i], &bits, 4);
      }
      return;
    case DType::kI8:
      for (int i = 0; i < n; ++i) dst[i] = static_cast<float>(static_cast<int8_t>(cache[index + i]));
      return;
  }
}

struct Scratch {
  std::vector<float> k, kt, v, scores, acc, m, denom, part;
  std::vector<int> lo, hi;
};

// The query tokens of one item: request r's tokens [t0, t1) (at most kTokens), kv head g.
constexpr int kTokens = 8;
struct Item {
  int r = 0, t0 = 0, t1 = 0, g = 0;
};

int64_t blocks_of(const attn::CommonAttentionMetadata& md, int r) {
  return (md.query_len(r) + kTokens - 1) / kTokens;
}

// Each token's visible keys [lo, hi] (the reference's rule) into s.lo / s.hi.
void visible_range(const AttentionCall& c, const Item& it, Scratch& s) {
  const attn::CommonAttentionMetadata& md = *c.md;
  const attn::AttentionLayerParams& p = *c.params;
  const int nt = it.t1 - it.t0;
  s.lo.assign(static_cast<size_t>(nt), 0);
  s.hi.assign(static_cast<size_t>(nt), -1);
  for (int t = 0; t < nt; ++t) {
    const int pos = md.num_computed_tokens[it.r] + (it.t0 + t - md.query_start_loc[it.r]);
    int lo = 0;
    if (p.sliding_window > 0) lo = std::max(lo, pos - p.sliding_window + 1);
    if (p.attention_chunk_size > 0) lo = std::max(lo, pos / p.attention_chunk_size * p.attention_chunk_size);
    s.lo[t] = lo;
    s.hi[t] = md.causal ? pos : md.seq_lens[it.r] - 1;
  }
}

}  // namespace

int64_t attention_items(const AttentionCall& c) {
  int64_t blocks = 0;
  for (int r = 0; r < c.md->num_reqs; ++r) blocks += blocks_of(*c.md, r);
  return blocks * c.params->num_kv_heads;
}

namespace {

constexpr int kT = attn_kernels::kKeyTile;

// What the passes of one item share: the item's rows are (t, h), row i = t * group + h, and its
// keys [lo_all, lo_all + n); scores and weights are rows of n floats.
struct ItemPass {
  const AttentionCall& c;
  const Kernels& kern;
  const Item& it;
  Scratch& s;
  int group, d, dv, nt, lo_all, n;
  const int32_t* blocks;

  // token t's visible keys of the tile [j0, j0 + nk) as tile lanes [a, b] (false: none)
  bool lanes(int t, int j0, int nk, int& a, int& b) const {
    a = std::max(s.lo[t], j0) - j0;
    b = std::min(s.hi[t], j0 + nk - 1) - j0;
    return a <= b;
  }
  // the cache element index of key (or value) j's row
  int64_t row_index(int j, bool values) const {
    const kv::LayerKvView& view = *c.view;
    const int bs = view.spec.block_size;
    const int64_t block = blocks[j / bs], slot = j % bs;
    if (view.spec.kind == kv::KvSpecKind::kMla) return view.k.index(block, slot, 0, 0);
    return values ? view.v.index(block, slot, it.g, 0) : view.k.index(block, slot, it.g, 0);
  }
  // keys (or values) j0 .. j0 + nk - 1 as f32 rows of `width` into dst
  void load_tile(int j0, int nk, bool values, int width, float* dst) const {
    for (int j = 0; j < nk; ++j)
      load_row(kern, c.cache, c.view->spec.dtype, row_index(j0 + j, values), width, dst + int64_t{j} * width);
  }
  // Asks for the rows of keys (or values) [j0, j1) ahead of their loads: the cache is read
  // from memory (the weights streamed through the caches since the last step), a block's rows
  // are apart in most layouts, and the loads alone keep too few misses in flight.
  void prefetch(int j0, int j1, bool values, int width) const {
    const int64_t bytes = int64_t{width} * static_cast<int64_t>(dtype_size(c.view->spec.dtype));
    for (int j = j0; j < j1; ++j) {
      const uint8_t* row = c.cache + row_index(j, values) * static_cast<int64_t>(dtype_size(c.view->spec.dtype));
      for (int64_t l = 0; l < bytes; l += 64) __builtin_prefetch(row + l);
    }
  }
  float* scores(int t, int j0) const { return s.scores.data() + static_cast<size_t>(t) * group * n + (j0 - lo_all); }

  void score_tile(int j0, int nk) const {
    const attn::AttentionLayerParams& p = *c.params;
    const float* q = c.query + int64_t{it.g} * group * d;  // row (t, h): q + ((t0 + t) * hq + h) * d
    prefetch(j0 + kT, std::min(j0 + 2 * kT, lo_all + n), false, d);  // the next tile's keys
    prefetch(j0, j0 + nk, true, dv);  // this tile's values: read after the item's scores (a
                                      // key chunk, a few KiB a tile: still in L2 by then)
    load_tile(j0, nk, false, d, s.k.data());
    kern.transpose_keys(s.k.data(), nk, d, s.kt.data());
    const bool cap = p.logit_softcap > 0;
    for (int t = 0; t < nt; ++t) {
      float* sc = scores(t, j0);
      int a = 0, b = 0;
      if (!lanes(t, j0, nk, a, b)) {
        for (int h = 0; h < group; ++h)
          std::fill_n(sc + static_cast<size_t>(h) * n, nk, -std::numeric_limits<float>::infinity());
        continue;
      }
      kern.qk_tile(q + int64_t{it.t0 + t} * p.num_q_heads * d, group, d, s.kt.data(), d, p.scale, a, b, nk, sc, n,
                   cap ? nullptr : s.m.data() + t * group);
      for (int h = 0; cap && h < group; ++h) {
        for (int j = a; j <= b; ++j) {
          float& v = sc[static_cast<size_t>(h) * n + j];
          v = p.logit_softcap * std::tanh(v / p.logit_softcap);
          s.m[t * group + h] = std::max(s.m[t * group + h], v);
        }
      }
    }
  }

  // each row's weights exp(s - m) in place (masked keys: exp(-inf) = 0), summed in key order
  void weights(const vmath::Kernels& vm) const {
    for (int i = 0; i < nt * group; ++i) {
      float* row = s.scores.data() + static_cast<size_t>(i) * n;
      if (s.m[i] == -std::numeric_limits<float>::infinity()) {  // no visible key: weights 0
        std::fill(row, row + n, 0.0f);
        continue;
      }
      vm.exp_shift(row, s.m[i], row, n);
      float den = 0.0f;
      for (int j = 0; j < n; ++j) den += row[j];
      s.denom[i] = den;
    }
  }

  void value_tile(int j0, int nk) const {
    load_tile(j0, nk, true, dv, s.v.data());
    for (int t = 0; t < nt; ++t) {
      int a = 0, b = 0;
      if (lanes(t, j0, nk, a, b))
        kern.pv_tile(s.acc.data() + static_cast<size_t>(t) * group * dv, group, dv, scores(t, j0), n, s.v.data(), a,
                     b, dv);
    }
  }
};

// Every q head of kv head g for tokens [t0, t1) of request r over the keys [klo, khi] (each key
// and value row read once for all of them, a tile at a time): per row i, m = its largest visible
// score, den = the sum of exp(s - m), acc = the sum of exp(s - m) v (sinks not included; a row
// with no visible key in the range gets m = -inf, den = 0, acc = 0). A q row's numbers are its own
// (the others only share the loads): a token's result never depends on the tokens beside it.
void compute(const AttentionCall& c, const Kernels& kern, const vmath::Kernels& vm, const Item& it, int klo,
             int khi, Scratch& s) {
  const attn::CommonAttentionMetadata& md = *c.md;
  const attn::AttentionLayerParams& p = *c.params;
  const int group = p.num_q_heads / p.num_kv_heads, nt = it.t1 - it.t0, m = nt * group;
  visible_range(c, it, s);
  int lo_all = std::numeric_limits<int>::max(), hi_all = -1;
  for (int t = 0; t < nt; ++t) {
    const int lo = std::max(s.lo[t], klo), hi = std::min(s.hi[t], khi);
    if (hi >= lo) {
      lo_all = std::min(lo_all, lo);
      hi_all = std::max(hi_all, hi);
    }
  }
  s.m.assign(static_cast<size_t>(m), -std::numeric_limits<float>::infinity());
  s.denom.assign(static_cast<size_t>(m), 0.0f);
  s.acc.assign(static_cast<size_t>(m) * p.head_size_v, 0.0f);
  if (hi_all < 0) return;
  const ItemPass pass{c, kern, it, s, group, p.head_size, p.head_size_v, nt, lo_all, hi_all - lo_all + 1,
                      md.block_table.data() + static_cast<size_t>(it.r) * md.max_blocks_per_req};
  s.scores.resize(static_cast<size_t>(m) * pass.n);
  pass.prefetch(lo_all, std::min(lo_all + kT, hi_all + 1), false, pass.d);
  for (int j0 = lo_all; j0 <= hi_all; j0 += kT) pass.score_tile(j0, std::min(kT, hi_all - j0 + 1));
  pass.weights(vm);
  for (int j0 = lo_all; j0 <= hi_all; j0 += kT) pass.value_tile(j0, std::min(kT, hi_all - j0 + 1));
}

// out for the item's rows from parts partial results (m, den, acc of each row, `stride` floats
// apart per part: [row][2 + dv]), with the sinks: M = the largest of the parts' m and the sink,
// out = sum acc exp(m - M) / (sum den exp(m - M) + exp(sink - M)). Rows without a visible key
// (hi < lo) get zeros, as the reference.
void finish(const AttentionCall& c, const Item& it, const float* parts, int nparts, int64_t part_stride,
            const Scratch& s) {
  const attn::AttentionLayerParams& p = *c.params;
  const int hq = p.num_q_heads, group = hq / p.num_kv_heads, dv = p.head_size_v;
  const int nt = it.t1 - it.t0;
  const int64_t row = 2 + dv;
  for (int t = 0; t < nt; ++t) {
    float* out = c.out + (int64_t{it.t0 + t} * hq + int64_t{it.g} * group) * dv;
    std::fill(out, out + int64_t{group} * dv, 0.0f);
    if (s.hi[t] < s.lo[t]) continue;
    for (int h = 0; h < group; ++h) {
      const int i = t * group + h;
      float big = c.sinks ? c.sinks[it.g * group + h] : -std::numeric_limits<float>::infinity();
      for (int k = 0; k < nparts; ++k) big = std::max(big, parts[k * part_stride + i * row]);
      float den = c.sinks ? std::exp(c.sinks[it.g * group + h] - big) : 0.0f;
      float* o = out + int64_t{h} * dv;
      for (int k = 0; k < nparts; ++k) {
        const float* part = parts + k * part_stride + i * row;
        if (part[1] == 0.0f) continue;  // no visible key in this part
        const float f = std::exp(part[0] - big);
        den += part[1] * f;
        for (int e = 0; e < dv; ++e) o[e] += part[2 + e] * f;
      }
      for (int e = 0; e < dv; ++e) o[e] = o[e] / den;
    }
  }
}

// The scratch's (m, den, acc) as one part at dst ([row][2 + dv]).
void store_part(const Scratch& s, int m, int dv, float* dst) {
  for (int i = 0; i < m; ++i) {
    float* r = dst + static_cast<int64_t>(i) * (2 + dv);
    r[0] = s.m[i];
    r[1] = s.denom[i];
    std::memcpy(r + 2, s.acc.data() + static_cast<size_t>(i) * dv, sizeof(float) * static_cast<size_t>(dv));
  }
}

void prepare(const AttentionCall& c, Scratch& s) {
  s.k.resize(static_cast<size_t>(attn_kernels::kKeyTile) * c.params->head_size);
  s.kt.resize(static_cast<size_t>(attn_kernels::kKeyTile) * c.params->head_size);
  s.v.resize(static_cast<size_t>(attn_kernels::kKeyTile) * c.params->head_size_v);
}

}  // namespace

void attention(const AttentionCall& c, int64_t i0, int64_t i1) {
  const attn::CommonAttentionMetadata& md = *c.md;
  const int hkv = c.params->num_kv_heads, group = c.params->num_q_heads / hkv, dv = c.params->head_size_v;
  const Kernels& kern = kernels_for(c.isa);
  const vmath::Kernels& vm = vmath_for(c.isa);
  thread_local Scratch s;
  prepare(c, s);
  // item = (token block b over all requests, kv head g): b = item / hkv
  int64_t first = 0;  // the first token block of request r
  int r = 0;
  for (int64_t item = i0; item < i1; ++item) {
    const int64_t b = item / hkv;
    while (r < md.num_reqs && b >= first + blocks_of(md, r)) first += blocks_of(md, r++);
    if (r >= md.num_reqs) break;
    Item it;
    it.r = r;
    it.g = static_cast<int>(item % hkv);
    it.t0 = md.query_start_loc[r] + static_cast<int>(b - first) * kTokens;
    it.t1 = std::min(md.query_start_loc[r + 1], it.t0 + kTokens);
    compute(c, kern, vm, it, 0, std::numeric_limits<int>::max(), s);
    const int m = (it.t1 - it.t0) * group;
    s.part.resize(static_cast<size_t>(m) * (2 + dv));
    store_part(s, m, dv, s.part.data());
    finish(c, it, s.part.data(), 1, 0, s);
  }
}

AttentionPlan plan_attention(const AttentionCall& c, int key_chunk) {
  const attn::CommonAttentionMetadata& md = *c.md;
  const int hkv = c.params->num_kv_heads, group = c.params->num_q_heads / hkv, dv = c.params->head_size_v;
  AttentionPlan plan;
  plan.key_chunk = key_chunk;
  Scratch s;
  for (int r = 0; r < md.num_reqs; ++r) {
    for (int t0 = md.query_start_loc[r]; t0 < md.query_start_loc[r + 1]; t0 += kTokens) {
      for (int g = 0; g < hkv; ++g) {
        AttentionPlan::Out o{r, t0, std::min(md.query_start_loc[r + 1], t0 + kTokens), g,
                             static_cast<int64_t>(plan.items.size()), 0};
        visible_range(c, Item{o.r, o.t0, o.t1, o.g}, s);
        int lo = std::numeric_limits<int>::max(), hi = -1;
        for (size_t t = 0; t < s.lo.size(); ++t) {
          if (s.hi[t] >= s.lo[t]) {
            lo = std::min(lo, s.lo[t]);
            hi = std::max(hi, s.hi[t]);
          }
        }
        const int64_t rows = int64_t{o.t1 - o.t0} * group;
        const auto out = static_cast<int64_t>(plan.outs.size());
        // key chunks at absolute positions (a token's parts never depend on the batch)
        for (int k0 = hi < 0 ? 0 : lo / key_chunk * key_chunk; k0 <= hi; k0 += key_chunk) {
          plan.items.push_back({o.r, o.t0, o.t1, o.g, std::max(k0, lo), std::min(k0 + key_chunk - 1, hi),
                                plan.partial_floats, out});
          plan.partial_floats += rows * (2 + dv);
          ++o.num_items;
        }
        if (o.num_items == 0) {  // no visible key: one empty part (m = -inf, den = 0)
          plan.items.push_back({o.r, o.t0, o.t1, o.g, 0, -1, plan.partial_floats, out});
          plan.partial_floats += rows * (2 + dv);
          ++o.num_items;
        }
        plan.outs.push_back(o);
      }
    }
  }
  plan.order.resize(plan.items.size());
  for (size_t i = 0; i < plan.order.size(); ++i) plan.order[i] = static_cast<int64_t>(i);
  auto work = [&plan](int64_t i) {
    const AttentionPlan::Item& it = plan.items[static_cast<size_t>(i)];
    return int64_t{it.t1 - it.t0} * std::max(0, it.k1 - it.k0 + 1);
  };
  std::stable_sort(plan.order.begin(), plan.order.end(),
                   [&](int64_t a, int64_t b) { return work(a) > work(b); });
  return plan;
}

namespace {
// Item pi's part: (m, den, acc) of its rows into partials + pi.partial.
void compute_part(const AttentionCall& c, const Kernels& kern, const vmath::Kernels& vm,
                  const AttentionPlan::Item& pi, float* partials, Scratch& s) {
  const int group = c.params->num_q_heads / c.params->num_kv_heads;
  compute(c, kern, vm, Item{pi.r, pi.t0, pi.t1, pi.g}, pi.k0, pi.k1, s);
  store_part(s, (pi.t1 - pi.t0) * group, c.params->head_size_v, partials + pi.partial);
}

// Out o from its parts (in item order) into c.out.
void combine_out(const AttentionCall& c, const AttentionPlan& plan, const AttentionPlan::Out& o,
                 const float* partials, Scratch& s) {
  const int group = c.params->num_q_heads / c.params->num_kv_heads, dv = c.params->head_size_v;
  const Item it{o.r, o.t0, o.t1, o.g};
  visible_range(c, it, s);
  const int64_t stride = int64_t{o.t1 - o.t0} * group * (2 + dv);
  const float* first = o.num_items ? partials + plan.items[static_cast<size_t>(o.first_item)].partial : partials;
  finish(c, it, first, static_cast<int>(o.num_items), stride, s);
}
}  // namespace

void attention_partial(const AttentionCall& c, const AttentionPlan& plan, float* partials, int64_t i0,
                       int64_t i1) {
  const Kernels& kern = kernels_for(c.isa);
  const vmath::Kernels& vm = vmath_for(c.isa);
  thread_local Scratch s;
  prepare(c, s);
  for (int64_t i = i0; i < i1; ++i) compute_part(c, kern, vm, plan.items[static_cast<size_t>(i)], partials, s);
}

void reset_pending(const AttentionPlan& plan, std::atomic<int32_t>* pending) {
  for (size_t i = 0; i < plan.outs.size(); ++i)
    pending[i].store(static_cast<int32_t>(plan.outs[i].num_items), std::memory_order_relaxed);
}

namespace {
// Out o's rows quantised: its columns of each token's row (whole scale blocks).
void quantize_out(const AttentionCall& c, const AttentionPlan::Out& o, const QuantOut& q) {
  const attn::AttentionLayerParams& p = *c.params;
  const int group = p.num_q_heads / p.num_kv_heads;
  const int64_t width = int64_t{p.num_q_heads} * p.head_size_v, cols = int64_t{group} * p.head_size_v;
  const auto row = vmath_for(c.isa).quantize_row;
  for (int t = o.t0; t < o.t1; ++t) {
    const int64_t at = t * width + int64_t{o.g} * cols;
    row(c.out + at, cols, q.scale_block, q.q + at, q.rec + at / 32);
  }
}
}  // namespace

void attention_fused(const AttentionCall& c, const AttentionPlan& plan, float* partials,
                     std::atomic<int32_t>* pending, const QuantOut* q, int64_t i0, int64_t i1) {
  const Kernels& kern = kernels_for(c.isa);
  const vmath::Kernels& vm = vmath_for(c.isa);
  thread_local Scratch s;
  prepare(c, s);
  for (int64_t i = i0; i < i1; ++i) {
    const AttentionPlan::Item& pi = plan.items[static_cast<size_t>(plan.order[static_cast<size_t>(i)])];
    compute_part(c, kern, vm, pi, partials, s);
    // acq_rel: the last one sees every other part's stores (the counter's release sequence)
    if (pending[pi.out].fetch_sub(1, std::memory_order_acq_rel) != 1) continue;
    const AttentionPlan::Out& o = plan.outs[static_cast<size_t>(pi.out)];
    combine_out(c, plan, o, partials, s);
    if (q != nullptr) quantize_out(c, o, *q);
  }
}

void attention_combine(const AttentionCall& c, const AttentionPlan& plan, const float* partials, int64_t o0,
                       int64_t o1) {
  thread_local Scratch s;
  for (int64_t i = o0; i < o1; ++i) combine_out(c, plan, plan.outs[static_cast<size_t>(i)], partials, s);
}

}  // namespace specdec::cpu
