// The native CPU device's paged attention (cpu/attention.h) against attn::attention_ref on random
// ragged batches with shuffled block tables: every layout (kv_major, block_major, mla_latent),
// cache dtype (f32, f16, bf16), GQA ratio, causal and non-causal (DFlash), sliding windows,
// attention chunks, softcap and sinks, head sizes off the vector widths, up to 12 q heads a kv
// head. Tolerance: 1e-5 of max(1, |reference|), as the OpenCL
// backends (f32 arithmetic against the reference's double). Also: items split between calls (as
// a thread pool does) give bitwise the result of one call; the fused parts + combine op on two
// threads gives bitwise the two-op result, with its quantised output that of the whole rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "attention/reference.h"
#include "cpu/activations.h"
#include "cpu/attention.h"
#include "kv/cache_ops.h"
#include "kv/layout.h"

namespace specdec::cpu {
namespace {

struct Req {
  int num_computed = 0;
  int num_new = 1;
};

attn::CommonAttentionMetadata random_metadata(const std::vector<Req>& reqs, int block_size, int64_t num_blocks,
                                              bool causal, std::mt19937& rng) {
  std::vector<int32_t> free_blocks(static_cast<size_t>(num_blocks - 1));
  std::iota(free_blocks.begin(), free_blocks.end(), 1);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
  attn::CommonAttentionMetadata md;
  md.num_reqs = static_cast<int>(reqs.size());
  md.block_size = block_size;
  md.causal = causal;
  md.query_start_loc.push_back(0);
  for (const Req& r : reqs)
    md.max_blocks_per_req = std::max(md.max_blocks_per_req, (r.num_computed + r.num_new + block_size - 1) / block_size);
  md.block_table.assign(static_cast<size_t>(md.num_reqs) * md.max_blocks_per_req, 0);
  size_t next = 0;
  for (int i = 0; i < md.num_reqs; ++i) {
    const int seq = reqs[i].num_computed + reqs[i].num_new;
    int32_t* row = md.block_table.data() + static_cast<size_t>(i) * md.max_blocks_per_req;
    for (int b = 0; b < (seq + block_size - 1) / block_size; ++b) row[b] = free_blocks.at(next++);
    for (int pos = reqs[i].num_computed; pos < seq; ++pos)
      md.slot_mapping.push_back(row[pos / block_size] * block_size + pos % block_size);
    md.query_start_loc.push_back(static_cast<int32_t>(md.slot_mapping.size()));
    md.seq_lens.push_back(seq);
    md.num_computed_tokens.push_back(reqs[i].num_computed);
    md.max_query_len = std::max(md.max_query_len, reqs[i].num_new);
    md.max_seq_len = std::max(md.max_seq_len, seq);
  }
  md.num_actual_tokens = static_cast<int>(md.slot_mapping.size());
  return md;
}

std::vector<float> randn(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

struct Case {
  std::string name;
  kv::KvCacheSpec spec;
  kv::KvLayout layout;
  int num_q_heads;
  bool causal = true;
  float softcap = 0.0f;
  bool sinks = false;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

void run_case(const Case& c, uint32_t seed, Isa isa) {
  std::mt19937 rng(seed);
  const int64_t num_blocks = 64;
  const kv::LayerKvView view =
      kv::make_layer_view("layer", 0, c.spec, c.layout, num_blocks * c.spec.page_size_bytes());
  std::vector<uint8_t> raw(static_cast<size_t>(view.size_bytes()));
  const int64_t elems = view.size_bytes() / static_cast<int64_t>(dtype_size(c.spec.dtype));
  std::normal_distribution<float> dist(0.0f, 1.0f);
  for (int64_t i = 0; i < elems; ++i) kv::store_element(raw, c.spec.dtype, i, dist(rng));
  // decode rows, a verify of 5, a prefill chunk after a cached prefix, a fresh prompt
  const std::vector<Req> reqs = {{37, 1}, {0, 1}, {50, 5}, {16, 23}, {0, 40}};
  const attn::CommonAttentionMetadata md = random_metadata(reqs, c.spec.block_size, num_blocks, c.causal, rng);
  attn::AttentionLayerParams p = attn::AttentionLayerParams::from_spec(c.spec, c.num_q_heads, 0.125f);
  p.logit_softcap = c.softcap;
  const std::vector<float> sinks = c.sinks ? randn(static_cast<size_t>(c.num_q_heads), rng) : std::vector<float>{};
  const std::vector<float> query =
      randn(static_cast<size_t>(md.num_actual_tokens) * p.num_q_heads * p.head_size, rng);
  const std::vector<float> want = attn::attention_ref(md, p, sinks, view, raw, query);
  std::vector<float> got(want.size(), -1.0f), split(want.size(), -1.0f);
  AttentionCall call{&md, &p, &view, raw.data(), sinks.empty() ? nullptr : sinks.data(), query.data(), got.data(), isa};
  attention(call, 0, attention_items(call));
  float err = 0.0f;
  for (size_t i = 0; i < want.size(); ++i)
    err = std::max(err, std::fabs(got[i] - want[i]) / std::max(1.0f, std::fabs(want[i])));
  EXPECT_LE(err, 1e-5f) << c.name << " " << isa_name(isa);
  call.out = split.data();
  const int64_t items = attention_items(call);
  for (int64_t i0 = 0; i0 < items; i0 += 3) attention(call, i0, std::min(items, i0 + 3));
  EXPECT_EQ(std::memcmp(split.data(), got.data(), got.size() * 4), 0) << c.name << ": split items";
  // batch invariance: the verify request's 5 tokens alone (their own metadata) give the same bits
  attn::CommonAttentionMetadata one = md;
  one.num_reqs = 1;
  const int r = 2, t0 = md.query_start_loc[r], nt = md.query_len(r);
  one.query_start_loc = {0, nt};
  one.seq_lens = {md.seq_lens[r]};
  one.num_computed_tokens = {md.num_computed_tokens[r]};
  one.block_table.assign(md.block_table.begin() + r * md.max_blocks_per_req,
                         md.block_table.begin() + (r + 1) * md.max_blocks_per_req);
  one.slot_mapping.assign(md.slot_mapping.begin() + t0, md.slot_mapping.begin() + t0 + nt);
  one.num_actual_tokens = nt;
  const size_t qrow = static_cast<size_t>(p.num_q_heads) * p.head_size, orow = static_cast<size_t>(p.num_q_heads) * p.head_size_v;
  const std::vector<float> q1(query.begin() + t0 * qrow, query.begin() + (t0 + nt) * qrow);
  std::vector<float> alone(nt * orow);
  AttentionCall c1{&one, &p, &view, raw.data(), call.sinks, q1.data(), alone.data(), isa};
  attention(c1, 0, attention_items(c1));
  EXPECT_EQ(std::memcmp(alone.data(), got.data() + t0 * orow, alone.size() * 4), 0) << c.name << ": alone";
  // split over keys too (flash-decoding): within the tolerance, items in pieces, and a request
  // alone gives the same bits as in the batch
  for (int chunk : {16, 48, 128}) {
    const AttentionPlan plan = plan_attention(call, chunk);
    std::vector<float> parts(static_cast<size_t>(plan.partial_floats)), sp(want.size(), -1.0f);
    AttentionCall cs = call;
    cs.out = sp.data();
    const auto n_items = static_cast<int64_t>(plan.items.size()), n_outs = static_cast<int64_t>(plan.outs.size());
    for (int64_t i0 = 0; i0 < n_items; i0 += 5) attention_partial(cs, plan, parts.data(), i0, std::min(n_items, i0 + 5));
    attention_combine(cs, plan, parts.data(), 0, n_outs);
    float e = 0.0f;
    for (size_t i = 0; i < want.size(); ++i) e = std::max(e, std::fabs(sp[i] - want[i]) / std::max(1.0f, std::fabs(want[i])));
    EXPECT_LE(e, 1e-5f) << c.name << " split " << chunk;
    // parts and combine in one op, items taken by two threads from a shared counter (as the
    // pool's dynamic schedule), with the output quantised: bitwise the two-op result, and the
    // quantisation that of the whole rows
    {
      std::vector<float> fused(want.size(), -1.0f);
      const int64_t width = int64_t{p.num_q_heads} * p.head_size_v;
      const int sb = (width / p.num_kv_heads) % 32 == 0 ? 32 : 0;  // every Out whole 32-blocks
      std::vector<int8_t> q8(sb ? want.size() : 0);
      std::vector<ActRec> rec(sb ? want.size() / 32 : 0);
      QuantOut qo{q8.data(), rec.data(), 32};
      std::vector<float> parts2(parts.size());
      std::vector<std::atomic<int32_t>> pending(plan.outs.size());
      reset_pending(plan, pending.data());
      AttentionCall cf = cs;
      cf.out = fused.data();
      std::atomic<int64_t> next{0};
      auto worker = [&]() {
        for (int64_t b = next.fetch_add(2); b < n_items; b = next.fetch_add(2))
          attention_fused(cf, plan, parts2.data(), pending.data(), sb ? &qo : nullptr, b, std::min(n_items, b + 2));
      };
      std::thread other(worker);
      worker();
      other.join();
      EXPECT_EQ(std::memcmp(fused.data(), sp.data(), sp.size() * 4), 0) << c.name << " fused " << chunk;
      for (const std::atomic<int32_t>& left : pending) EXPECT_EQ(left.load(), 0);
      if (sb) {
        const OwnedActivations whole = quantize_activations(sp.data(), md.num_actual_tokens, width, 32);
        EXPECT_EQ(whole.q, q8) << c.name << " fused quantised " << chunk;
        EXPECT_EQ(std::memcmp(whole.rec.data(), rec.data(), rec.size() * sizeof(ActRec)), 0)
            << c.name << " fused records " << chunk;
      }
      // the order runs every item once, the most work first
      std::vector<int64_t> sorted = plan.order;
      std::sort(sorted.begin(), sorted.end());
      for (size_t i = 0; i < sorted.size(); ++i) ASSERT_EQ(sorted[i], static_cast<int64_t>(i));
    }
    const AttentionPlan plan1 = plan_attention(c1, chunk);
    std::vector<float> parts1(static_cast<size_t>(plan1.partial_floats)), sp1(alone.size());
    AttentionCall cs1 = c1;
    cs1.out = sp1.data();
    attention_partial(cs1, plan1, parts1.data(), 0, static_cast<int64_t>(plan1.items.size()));
    attention_combine(cs1, plan1, parts1.data(), 0, static_cast<int64_t>(plan1.outs.size()));
    EXPECT_EQ(std::memcmp(sp1.data(), sp.data() + t0 * orow, sp1.size() * 4), 0) << c.name << " split " << chunk
                                                                                  << ": alone";
  }
}

std::vector<Case> cases() {
  using kv::KvCacheSpec;
  using kv::KvLayout;
  std::vector<Case> out;
  for (KvLayout layout : {KvLayout::kKvMajor, KvLayout::kBlockMajor}) {
    const std::string l = kv::layout_name(layout);
    for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
      const std::string d = dtype_name(dt);
      out.push_back({"full_gqa3_" + l + "_" + d, KvCacheSpec::full_attention(16, 2, 64, dt), layout, 6});
    }
    out.push_back({"mha_" + l, KvCacheSpec::full_attention(16, 4, 32, DType::kF32), layout, 4});
    out.push_back({"head_v_" + l, KvCacheSpec::full_attention(16, 2, 64, DType::kF32, 32), layout, 4});
    out.push_back({"noncausal_" + l, KvCacheSpec::full_attention(16, 2, 64, DType::kF32), layout, 4, false});
    out.push_back({"sliding_" + l, KvCacheSpec::sliding(16, 2, 64, DType::kF16, 12), layout, 8});
    out.push_back({"chunked_" + l, KvCacheSpec::chunked_local(16, 1, 64, DType::kF32, 32), layout, 4});
    out.push_back({"softcap_sinks_" + l, KvCacheSpec::full_attention(16, 2, 64, DType::kF32), layout, 4, true, 20.0f,
                   true});
  }
  // head sizes off the vector widths (tails of the key transpose and the value rows), and more q
  // heads per kv head than one register block of rows
  out.push_back({"head20_gqa3", KvCacheSpec::full_attention(16, 2, 20, DType::kF32), KvLayout::kKvMajor, 6});
  out.push_back({"head24_gqa12_f16", KvCacheSpec::full_attention(16, 1, 24, DType::kF16), KvLayout::kKvMajor, 12});
  out.push_back({"mla", KvCacheSpec::mla(16, 64, 16, DType::kF32), KvLayout::kMlaLatent, 4});
  out.push_back({"mla_f16", KvCacheSpec::mla(16, 64, 16, DType::kF16), KvLayout::kMlaLatent, 8});
  return out;
}

class CpuAttention : public ::testing::TestWithParam<std::tuple<Case, Isa>> {};

TEST_P(CpuAttention, MatchesTheReference) {
  const auto& [c, isa] = GetParam();
  const std::vector<Isa>& runnable = cpu_isas();
  if (std::find(runnable.begin(), runnable.end(), isa) == runnable.end()) GTEST_SKIP() << "this CPU cannot run it";
  run_case(c, 3, isa);
}

INSTANTIATE_TEST_SUITE_P(Specs, CpuAttention,
                         ::testing::Combine(::testing::ValuesIn(cases()),
                                            ::testing::Values(Isa::kPortable, Isa::kAvx2, Isa::kAvx512bw)),
                         [](const auto& info) {
                           return std::get<0>(info.param).name + "_" + isa_name(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace specdec::cpu
