// A whole decode / verify step on the native CPU device, before the runner uses it: every layer of
// a Llama-style model with the catalog models' shapes and weight formats (random weights, one
// layer quantised and copied into every layer, so each layer reads its own memory), run as the
// CPU device will run it: the native ops (cpp/cpu/ops.h, matmul.h, attention.h, kv_write.h)
// recorded into one cpu::Program per step and run in one ThreadPool region with a barrier
// between ops. For n = 1, 2, 4, 8, 16 rows (one request at --context tokens, its n new tokens):
// ms per step (median), t(n) / t(1), the time per op name, and the share of the threads' time
// spent waiting at barriers (the pool's RegionStats). JSON on stdout, a table on stderr.
//
// Usage: cpu_step_bench [--model smollm2|qwen1.5b] [--threads N] [--steps N] [--context L]
//                       [--rows 1,2,4,8,16] [--key-chunk 128] [--quick]
// Not the runner: no embedding lookup, sampling or Python; a measurement of the device's step.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <atomic>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "attention/backend.h"
#include "attention/metadata.h"
#include "common/dtype.h"
#include "cpu/activations.h"
#include "cpu/attention.h"
#include "cpu/isa.h"
#include "cpu/kv_write.h"
#include "cpu/matmul.h"
#include "cpu/ops.h"
#include "cpu/program.h"
#include "cpu/thread_pool.h"
#include "kv/layout.h"
#include "ops/rope.h"
#include "quant/dequantize.h"
#include "quant/formats.h"
#include "quant/layout.h"
#include "quant/reference.h"

using namespace specdec;
using namespace specdec::cpu;
using quant::GgmlType;

namespace {

struct Shape {
  std::string name;
  int hidden, heads, kv_heads, head, ff, layers, vocab;
  GgmlType qkv, o, up, down, lm_head;
};

const Shape kSmol{"smollm2-135m (q4_1)", 576, 9, 3, 64, 1536, 30, 49152,
                  GgmlType::kQ4_1, GgmlType::kQ4_1, GgmlType::kQ4_1, GgmlType::kQ4_1, GgmlType::kQ8_0};
const Shape kQwen{"qwen2.5-1.5b (q4_K / q6_K)", 1536, 12, 2, 128, 8960, 28, 151936,
                  GgmlType::kQ4_K, GgmlType::kQ4_K, GgmlType::kQ4_K, GgmlType::kQ6_K, GgmlType::kQ6_K};

struct Matrix {
  quant::DeviceLayout layout;
  std::vector<uint8_t> bytes;
  PackedWeight w() const { return {&layout, bytes.data()}; }
};

Matrix random_matrix(GgmlType type, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(rows * cols));
  for (float& v : w) v = dist(rng);
  Matrix m;
  m.layout = quant::device_layout(type, rows, cols);
  m.bytes = quant::repack(m.layout, quant::quantize(type, w.data(), rows, cols).data());
  return m;
}

struct Layer {
  Matrix qkv, o, up, down;  // up: gate | up rows
  std::vector<float> attn_norm, ffn_norm;
  std::vector<uint8_t> cache;
};

// A quantised activation buffer for rows of `cols` with one weight's scale block.
struct Quant {
  std::vector<int8_t> q;
  std::vector<ActRec> rec;
  Activations view;
  QuantOut out;
  void reset(int64_t n, int64_t cols, GgmlType consumer) {
    q.assign(static_cast<size_t>(n * cols), 0);
    rec.assign(static_cast<size_t>(n * cols / 32), ActRec{});
    view = Activations{n, cols, q.data(), rec.data()};
    out = QuantOut{q.data(), rec.data(), quant::activation_scale_block(consumer)};
  }
};

struct Options {
  const Shape* shape = &kSmol;
  int threads = 0;
  int steps = 20;
  int context = 256;
  std::vector<int> rows = {1, 2, 4, 8, 16};
  int key_chunk = 128;  // attention split over keys in chunks of this many, as the runner (0: never)
};

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

void add_matmul(Program& p, const char* name, const Matrix& m, const MatmulInput& in, float* y, Isa isa) {
  // as the CPU device: weight groups from a shared counter
  p.add(
      name, m.layout.groups, 1, [&m, in, y, isa](int64_t lo, int64_t hi) { matmul(m.w(), in, lo, hi, y, isa); },
      Program::Schedule::kDynamic);
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--quick") {  // the test suite's smoke run: a few short steps
      opt.steps = 2;
      opt.context = 32;
      opt.rows = {1, 2};
    } else if (a == "--model") {
      const std::string m = next();
      opt.shape = m == "qwen1.5b" ? &kQwen : &kSmol;
    } else if (a == "--threads") {
      opt.threads = std::stoi(next());
    } else if (a == "--steps") {
      opt.steps = std::stoi(next());
    } else if (a == "--key-chunk") {
      opt.key_chunk = std::stoi(next());
    } else if (a == "--context") {
      opt.context = std::stoi(next());
    } else if (a == "--rows") {
      opt.rows.clear();
      std::stringstream ss(next());
      for (std::string t; std::getline(ss, t, ',');) opt.rows.push_back(std::stoi(t));
    } else {
      std::fprintf(stderr, "usage: cpu_step_bench [--model smollm2|qwen1.5b] [--threads N] [--steps N] "
                           "[--context L] [--rows 1,2,4] [--key-chunk K] [--quick]\n");
      return 2;
    }
  }
  const Shape& s = *opt.shape;
  const Isa isa = cpu_isa();
  ThreadPool pool(ThreadPoolOptions{.num_threads = opt.threads});
  const int hq = s.heads * s.head, hkv = s.kv_heads * s.head, qkv_rows = hq + 2 * hkv;
  const int max_rows = *std::max_element(opt.rows.begin(), opt.rows.end());
  const int block = 16, tokens = opt.context + max_rows;
  const int nblocks = (tokens + block - 1) / block + 1;

  // one layer quantised, copied into every layer (each layer its own memory)
  std::fprintf(stderr, "%s: building %d layers...\n", s.name.c_str(), s.layers);
  Layer proto;
  proto.qkv = random_matrix(s.qkv, qkv_rows, s.hidden, 1);
  proto.o = random_matrix(s.o, s.hidden, hq, 2);
  proto.up = random_matrix(s.up, 2 * int64_t{s.ff}, s.hidden, 3);
  proto.down = random_matrix(s.down, s.hidden, s.ff, 4);
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  proto.attn_norm.resize(s.hidden);
  proto.ffn_norm.resize(s.hidden);
  for (float& v : proto.attn_norm) v = 1.0f + 0.1f * dist(rng);
  for (float& v : proto.ffn_norm) v = 1.0f + 0.1f * dist(rng);
  const kv::KvCacheSpec spec = kv::KvCacheSpec::full_attention(block, s.kv_heads, s.head, DType::kF16);
  const kv::LayerKvView view = kv::make_layer_view("layer", 0, spec, kv::KvLayout::kKvMajor,
                                                   nblocks * spec.page_size_bytes());
  proto.cache.resize(static_cast<size_t>(view.size_bytes()));
  for (size_t i = 0; i + 1 < proto.cache.size(); i += 2) {
    const uint16_t h = float_to_half_bits(dist(rng));
    std::memcpy(&proto.cache[i], &h, 2);
  }
  std::vector<Layer> layers(static_cast<size_t>(s.layers), proto);
  const Matrix lm_head = random_matrix(s.lm_head, s.vocab, s.hidden, 6);
  std::vector<float> final_norm(proto.attn_norm);
  const std::vector<float> inv_freq = ops::rope_inv_freq(s.head, 10000.0);
  double weight_bytes = static_cast<double>(lm_head.layout.total_bytes);
  for (const Layer& l : layers)
    weight_bytes += static_cast<double>(l.qkv.layout.total_bytes + l.o.layout.total_bytes +
                                        l.up.layout.total_bytes + l.down.layout.total_bytes);

  nlohmann::json results = nlohmann::json::array();
  double t1 = 0.0;
  std::fprintf(stderr, "%s, %s path, %d threads, context %d, %.0f MB of weights\n", cpu_model().c_str(),
               isa_name(isa), pool.num_threads(), opt.context, weight_bytes / 1e6);
  for (const int n : opt.rows) {
    // the step's buffers
    std::vector<float> x(static_cast<size_t>(n) * s.hidden), y(x.size()), tmp(x.size());
    std::vector<float> qkv(static_cast<size_t>(n) * qkv_rows), q(static_cast<size_t>(n) * hq), att(q.size());
    std::vector<float> gu(static_cast<size_t>(n) * 2 * s.ff), act(static_cast<size_t>(n) * s.ff);
    std::vector<float> logits(static_cast<size_t>(n) * s.vocab), lse(n);
    std::vector<ArgmaxPart> amax_parts(static_cast<size_t>(n * vocab_chunks(s.vocab)));
    std::vector<LsePart> lse_parts(amax_parts.size());
    std::vector<int32_t> ids(n), positions(n), slots(n);
    std::vector<float> x0(x.size());
    for (float& v : x0) v = dist(rng);
    Quant yq_qkv, yq_up, attq, actq, yq_head;
    yq_qkv.reset(n, s.hidden, s.qkv);
    yq_up.reset(n, s.hidden, s.up);
    attq.reset(n, hq, s.o);
    actq.reset(n, s.ff, s.down);
    yq_head.reset(n, s.hidden, s.lm_head);
    // one request: positions context .. context + n - 1, blocks 1.. in order
    attn::CommonAttentionMetadata md;
    md.num_reqs = 1;
    md.num_actual_tokens = n;
    md.max_query_len = n;
    md.block_size = block;
    md.max_blocks_per_req = nblocks - 1;
    md.query_start_loc = {0, n};
    md.seq_lens = {opt.context + n};
    md.num_computed_tokens = {opt.context};
    md.max_seq_len = opt.context + n;
    for (int b = 0; b < nblocks - 1; ++b) md.block_table.push_back(b + 1);
    for (int t = 0; t < n; ++t) {
      positions[t] = opt.context + t;
      slots[t] = md.block_table[(opt.context + t) / block] * block + (opt.context + t) % block;
    }
    md.slot_mapping = slots;
    attn::AttentionLayerParams ap = attn::AttentionLayerParams::from_spec(spec, s.heads, 0.125f);

    // one attention plan per step (the metadata is every layer's), split over keys as the runner
    const AttentionCall plan_call{&md, &ap, &view, layers[0].cache.data(), nullptr, q.data(), att.data()};
    const AttentionPlan plan = plan_attention(plan_call, opt.key_chunk > 0 ? opt.key_chunk : 128);
    const bool split = opt.key_chunk > 0;  // as the runner: always (0: the unsplit kernel)
    std::vector<float> partials(static_cast<size_t>(plan.partial_floats));
    std::vector<std::unique_ptr<std::atomic<int32_t>[]>> pending(layers.size());  // per layer
    for (auto& pl : pending) pl = std::make_unique<std::atomic<int32_t>[]>(plan.outs.size());
    // the runner's rule: the attention writes the o projection's activations when the head size
    // is a multiple of their scale block
    const bool fuse_quant = s.head % quant::activation_scale_block(s.o) == 0;
    Program prog;
    prog.set_profiling(true);
    std::vector<float> angles(static_cast<size_t>(n) * s.head);
    // as the CPU device: the residual add and norm of a row over the threads in column chunks
    // when the rows are fewer than the threads (cpp/ops/cpu_norm.cpp), else by rows
    const int nthreads = pool.num_threads();
    std::vector<std::unique_ptr<std::vector<std::atomic<int32_t>>>> readies;
    auto add_norm = [&](const float* weight, const QuantOut& qo) {
      const int64_t chunk = ((s.hidden + nthreads - 1) / nthreads + qo.scale_block - 1) / qo.scale_block * qo.scale_block;
      if (n < nthreads && chunk < s.hidden) {
        const int64_t items = n * ((s.hidden + chunk - 1) / chunk);
        readies.push_back(std::make_unique<std::vector<std::atomic<int32_t>>>(static_cast<size_t>(n)));
        std::atomic<int32_t>* ready = readies.back()->data();
        prog.add("add_rms_norm", items, 1, [&, weight, chunk, ready, qp = &qo](int64_t lo, int64_t hi) {
          add_rms_norm_chunks(x.data(), tmp.data(), weight, y.data(), lo, hi, s.hidden, chunk, 1e-6f, 0.0f, qp, ready,
                              isa);
        });
      } else {
        prog.add("add_rms_norm", n, 1, [&, weight, qp = &qo](int64_t lo, int64_t hi) {
          add_rms_norm(x.data(), tmp.data(), weight, y.data(), lo, hi, s.hidden, 1e-6f, 0.0f, qp);
        });
      }
    };
    auto record = [&]() {
      readies.clear();
      const float eps = 1e-6f;
      // as the CPU device: the step's RoPE angles once, when recorded
      rope_angles(positions.data(), 0, n, inv_freq.data(), s.head / 2, angles.data());
      prog.add("embed", n, 1, [&](int64_t lo, int64_t hi) {  // the step's input rows (as an embedding gives them)
        copy_2d(x0.data(), x.data(), lo, hi, s.hidden, s.hidden, s.hidden);
      });
      for (size_t il = 0; il < layers.size(); ++il) {
        Layer& l = layers[il];
        if (il == 0) {
          prog.add("rms_norm", n, 1, [&, n, eps](int64_t lo, int64_t hi) {  // eps ends with record()
            rms_norm(x.data(), l.attn_norm.data(), y.data(), lo, hi, s.hidden, eps, 0.0f, &yq_qkv.out);
          });
        } else {  // the residual of the layer before, fused with this layer's norm
          add_norm(l.attn_norm.data(), yq_qkv.out);
        }
        add_matmul(prog, "matmul_qkv", l.qkv, MatmulInput{n, y.data(), &yq_qkv.view}, qkv.data(), isa);
        prog.add("qkv_epilogue", 2 * n, 1, [&](int64_t lo, int64_t hi) {  // as the runner: by q | kv parts
          const QkvArgs a{qkv.data(), qkv_rows, nullptr, positions.data(), inv_freq.data(), angles.data(), true,
                          q.data(), hq, s.heads, s.kv_heads, s.head};
          qkv_epilogue(l.cache.data(), view, a, slots.data(), lo, hi);
        });
        if (split) {  // as the runner (CPU_PAGED): parts and combine in one dynamic op
          std::atomic<int32_t>* pl = pending[il].get();
          reset_pending(plan, pl);
          prog.add(
              "attention", static_cast<int64_t>(plan.items.size()), 1,
              [&, pl](int64_t lo, int64_t hi) {
                const AttentionCall c{&md, &ap, &view, l.cache.data(), nullptr, q.data(), att.data()};
                attention_fused(c, plan, partials.data(), pl, fuse_quant ? &attq.out : nullptr, lo, hi);
              },
              Program::Schedule::kDynamic);
        } else {
          const AttentionCall c0{&md, &ap, &view, l.cache.data(), nullptr, q.data(), att.data()};
          prog.add("attention", attention_items(c0), 1, [&](int64_t lo, int64_t hi) {
            const AttentionCall c{&md, &ap, &view, l.cache.data(), nullptr, q.data(), att.data()};
            attention(c, lo, hi);
          });
        }
        if (!(split && fuse_quant)) {
          prog.add("quantize", n * column_chunks(hq), 1, [&](int64_t lo, int64_t hi) {  // as the runner
            quantize_activation_chunks(att.data(), lo, hi, hq, attq.out.scale_block, attq.q.data(), attq.rec.data(),
                                       isa);
          });
        }
        add_matmul(prog, "matmul_o", l.o, MatmulInput{n, att.data(), &attq.view}, tmp.data(), isa);
        add_norm(l.ffn_norm.data(), yq_up.out);
        add_matmul(prog, "matmul_gate_up", l.up, MatmulInput{n, y.data(), &yq_up.view}, gu.data(), isa);
        prog.add("gated_activation", n * column_chunks(s.ff), 1, [&](int64_t lo, int64_t hi) {
          gated_activation_chunks(gu.data(), gu.data() + s.ff, act.data(), lo, hi, s.ff, Activation::kSilu,
                                  2 * s.ff, &actq.out, isa);
        });
        add_matmul(prog, "matmul_down", l.down, MatmulInput{n, act.data(), &actq.view}, tmp.data(), isa);
      }
      add_norm(final_norm.data(), yq_head.out);
      add_matmul(prog, "matmul_lm_head", lm_head, MatmulInput{n, y.data(), &yq_head.view}, logits.data(), isa);
      // as the runner: in vocabulary chunks over the threads, then combined
      const int64_t chunks = vocab_chunks(s.vocab);
      prog.add("argmax", n * chunks, 1, [&](int64_t lo, int64_t hi) {
        argmax_parts(logits.data(), amax_parts.data(), lo, hi, s.vocab, isa);
      });
      prog.add("argmax_combine", n, 1, [&](int64_t lo, int64_t hi) {
        argmax_combine(amax_parts.data(), ids.data(), lo, hi, s.vocab);
      });
      prog.add("logsumexp", n * chunks, 1, [&](int64_t lo, int64_t hi) {
        logsumexp_parts(logits.data(), lse_parts.data(), lo, hi, s.vocab, isa);
      });
      prog.add("logsumexp_combine", n, 1, [&](int64_t lo, int64_t hi) {
        logsumexp_combine(lse_parts.data(), lse.data(), lo, hi, s.vocab);
      });
    };
    // warm-up, then timed steps
    size_t ops_per_step = 0;
    for (int w = 0; w < 2; ++w) {
      record();
      ops_per_step = prog.size();
      prog.run(pool);
    }
    prog.take_profile();
    pool.set_collect_stats(true);
    pool.reset_stats();
    std::vector<double> ms;
    for (int st = 0; st < opt.steps; ++st) {
      const auto t0 = std::chrono::steady_clock::now();
      pool.prewake();  // as the CPU device when a step's first op is recorded
      record();
      prog.run(pool);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    pool.set_collect_stats(false);
    const RegionStats stats = pool.total_stats();
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    if (n == opt.rows.front()) t1 = med;
    nlohmann::json ops = nlohmann::json::object();
    std::string table;
    for (const auto& t : prog.take_profile()) {
      ops[t.name] = {{"launches_per_step", t.launches / opt.steps}, {"ms_per_step", t.us / 1e3 / opt.steps},
                     {"wait_ms_per_step", t.wait_us / 1e3 / opt.steps}};
      char buf[96];
      std::snprintf(buf, sizeof buf, " %s %.2f", t.name.c_str(), t.us / 1e3 / opt.steps);
      table += buf;
    }
    std::fprintf(stderr, "n=%2d  %8.2f ms/step  x%.2f vs n=%d  wait %.1f %%  barrier %.2f us |%s\n", n, med,
                 med / t1, opt.rows.front(), 100 * stats.wait_share(), stats.barrier_us_per_op(), table.c_str());
    results.push_back({{"rows", n}, {"ms_per_step_median", med}, {"ms_min", ms.front()}, {"ms_max", ms.back()},
                       {"vs_first", med / t1}, {"wait_share", stats.wait_share()},
                       {"barrier_us_per_op", stats.barrier_us_per_op()}, {"ops_per_step", ops_per_step},
                       {"weights_GBps", weight_bytes / (med / 1e3) / 1e9}, {"ops", ops}});
  }
  const nlohmann::json doc = {{"cpu", cpu_model()},    {"isa", isa_name(isa)},   {"threads", pool.num_threads()},
                              {"key_chunk", opt.key_chunk},
                              {"model", s.name},       {"context", opt.context}, {"steps", opt.steps},
                              {"weight_bytes", weight_bytes}, {"results", results}};
  std::printf("%s\n", doc.dump(1).c_str());
  return 0;
}
