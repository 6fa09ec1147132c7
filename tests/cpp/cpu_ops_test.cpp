// The native CPU device's forward ops (cpu/ops.h) and activation quantiser (cpu/activations.h)
// against the plain C++ references (ops/reference.h, quant::quantize_activations_reference).
// They use the references' formulas, orders and the same libm, so every result is required
// bitwise equal (NaN = NaN). Also: splitting an op's rows between calls (as the thread pool
// does) changes nothing, a row's result is the same alone and inside a batch, and the norm /
// activation with a quantised output equals the op followed by quantize_activations.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <string>
#include <limits>
#include <random>
#include <tuple>
#include <atomic>
#include <thread>
#include <vector>

#include "common/errors.h"
#include "cpu/activations.h"
#include "cpu/isa.h"
#include "cpu/ops.h"
#include "ops/reference.h"
#include "ops/rope.h"
#include "quant/reference.h"

namespace specdec::cpu {
namespace {

std::vector<float> randn(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(b[i])) continue;
    if (std::memcmp(&a[i], &b[i], 4) != 0) return false;
  }
  return true;
}

bool same_records(const OwnedActivations& a, const OwnedActivations& b) {
  if (a.q != b.q || a.rec.size() != b.rec.size()) return false;
  for (size_t i = 0; i < a.rec.size(); ++i) {
    if (std::memcmp(&a.rec[i], &b.rec[i], sizeof(ActRec)) != 0) return false;
  }
  return true;
}

// ---- activation quantisation ----
class CpuQuantize : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(CpuQuantize, BitwiseTheReference) {
  const auto [block, cols] = GetParam();
  const int64_t n = 5;
  std::vector<float> x = randn(static_cast<size_t>(n * cols), 7, 3.0f);
  for (int i = 0; i < 32; ++i) x[static_cast<size_t>(cols + i)] = 0.0f;  // a zero block in row 1
  x[static_cast<size_t>(2 * cols)] = 1e-38f;                              // tiny values in row 2
  for (int i = 1; i < block; ++i) x[static_cast<size_t>(2 * cols + i)] = 0.0f;
  for (int i = 0; i < cols; i += 7) x[static_cast<size_t>(3 * cols + i)] = 0.5f * (i % 3 - 1);  // halves
  // exact ties: amax 127 makes the scale 1, so q = round(x) of values k + 0.5 (half away from zero
  // for 32-blocks, half to even for 256-groups)
  for (int g = 0; g < cols; g += block) {
    for (int j = 0; j < block; ++j)
      x[static_cast<size_t>(4 * cols + g + j)] = j == 0 ? 127.0f : (j % 2 ? 1.0f : -1.0f) * ((j % 60) + 0.5f);
  }
  const OwnedActivations want = records_of(quant::quantize_activations_reference(x.data(), n, cols, block));
  EXPECT_TRUE(same_records(quantize_activations(x.data(), n, cols, block), want));
  // rows quantised one call each, as a pool splits them, on every path
  for (Isa isa : cpu_isas()) {
    OwnedActivations split = want;
    std::fill(split.q.begin(), split.q.end(), int8_t{0});
    for (int64_t r = 0; r < n; ++r)
      quantize_activations(x.data(), r, r + 1, cols, block, split.q.data(), split.rec.data(), isa);
    EXPECT_TRUE(same_records(split, want)) << isa_name(isa);
  }
}

INSTANTIATE_TEST_SUITE_P(Blocks, CpuQuantize,
                         ::testing::Values(std::make_tuple(32, 32), std::make_tuple(32, 576), std::make_tuple(32, 1536),
                                           std::make_tuple(256, 256), std::make_tuple(256, 1536),
                                           std::make_tuple(256, 8960 - 8960 % 256)));

TEST(CpuQuantizeChecks, BadShapesAreConfigErrors) {
  const std::vector<float> x(64);
  EXPECT_THROW(quantize_activations(x.data(), 1, 64, 64), ConfigError);
  EXPECT_THROW(quantize_activations(x.data(), 1, 48, 32), ConfigError);
  EXPECT_THROW(quantize_activations(x.data(), 1, 32, 256), ConfigError);
}

// ---- norms ----
class CpuNorm : public ::testing::TestWithParam<std::tuple<int, int>> {};

// Portable: bitwise; the vector paths (the double sum in lanes): within 1e-6 relative, the OpenCL
// kernels' tolerance (and almost always bitwise: the float mean hides the sum's last bits).
void expect_norm(const std::vector<float>& got, const std::vector<float>& want, Isa isa, const std::string& what) {
  if (isa == Isa::kPortable) {
    EXPECT_TRUE(same_bits(got, want)) << what;
    return;
  }
  double worst = 0.0;
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, std::fabs(double{got[i]} - want[i]) / std::max(1e-30, std::fabs(double{want[i]})));
  EXPECT_LE(worst, 1e-6) << what << " " << isa_name(isa);
}

TEST_P(CpuNorm, RmsNormAndFusedResidualOnEveryPath) {
  const auto [dim, rows] = GetParam();
  const size_t n = static_cast<size_t>(dim) * rows;
  const std::vector<float> x = randn(n, 1, 4.0f), res = randn(n, 2), w = randn(static_cast<size_t>(dim), 3);
  for (Isa isa : cpu_isas()) {
    for (float offset : {0.0f, 1.0f}) {
      std::vector<float> want(n), got(n);
      ops::ref::rms_norm(x, w, want, rows, dim, 1e-6f, offset);
      rms_norm(x.data(), w.data(), got.data(), 0, rows, dim, 1e-6f, offset, nullptr, isa);
      expect_norm(got, want, isa, "offset " + std::to_string(offset));
    }
    std::vector<float> want(n), got(n);
    ops::ref::rms_norm(x, {}, want, rows, dim, 1e-5f);
    rms_norm(x.data(), nullptr, got.data(), 0, rows, dim, 1e-5f, 0.0f, nullptr, isa);
    expect_norm(got, want, isa, "no weight");
    // add_rms_norm = add then rms_norm, with y in place over the residual; rows in two calls
    std::vector<float> sum = x, want_y(n);
    ops::ref::add(sum, res);
    ops::ref::rms_norm(sum, w, want_y, rows, dim, 1e-6f);
    std::vector<float> xs = x, ys = res;
    const int64_t half = rows / 2;
    add_rms_norm(xs.data(), ys.data(), w.data(), ys.data(), 0, half, dim, 1e-6f, 0.0f, nullptr, isa);
    add_rms_norm(xs.data(), ys.data(), w.data(), ys.data(), half, rows, dim, 1e-6f, 0.0f, nullptr, isa);
    EXPECT_TRUE(same_bits(xs, sum)) << "the residual stream";
    expect_norm(ys, want_y, isa, "add_rms_norm");
    // a row alone = the same row among the others (batch invariance on the path)
    std::vector<float> one(static_cast<size_t>(dim));
    rms_norm(x.data() + (rows - 1) * static_cast<size_t>(dim), w.data(), one.data(), 0, 1, dim, 1e-6f, 0.0f, nullptr, isa);
    std::vector<float> all(n);
    rms_norm(x.data(), w.data(), all.data(), 0, rows, dim, 1e-6f, 0.0f, nullptr, isa);
    EXPECT_TRUE(same_bits(one, std::vector<float>(all.end() - dim, all.end()))) << isa_name(isa) << " alone";
  }
}

TEST_P(CpuNorm, QuantisedOutputIsTheNormQuantised) {
  const auto [dim, rows] = GetParam();
  const size_t n = static_cast<size_t>(dim) * rows;
  const std::vector<float> x = randn(n, 4, 2.0f), w = randn(static_cast<size_t>(dim), 5);
  for (int block : {32, 256}) {
    if (dim % block != 0) continue;
    std::vector<float> y(n);
    OwnedActivations got;
    got.n = rows;
    got.cols = dim;
    got.q.resize(n);
    got.rec.resize(n / 32);
    const QuantOut q{got.q.data(), got.rec.data(), block};
    for (Isa isa : cpu_isas()) {
      rms_norm(x.data(), w.data(), y.data(), 0, rows, dim, 1e-6f, 0.0f, &q, isa);
      EXPECT_TRUE(same_records(got, quantize_activations(y.data(), rows, dim, block))) << block << isa_name(isa);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CpuNorm,
                         ::testing::Values(std::make_tuple(64, 1), std::make_tuple(576, 3), std::make_tuple(768, 5),
                                           std::make_tuple(1536, 9), std::make_tuple(96, 16)));

// ---- element-wise and activations ----
TEST(CpuElementwise, BitwiseTheReference) {
  const int64_t n = 1000;
  const std::vector<float> x = randn(n, 11, 8.0f), y = randn(n, 12);
  std::vector<float> want = x, got = x;
  ops::ref::add(want, y);
  add(got.data(), y.data(), 0, 400);
  add(got.data(), y.data(), 400, n);
  EXPECT_TRUE(same_bits(got, want));
  want = x, got = x;
  ops::ref::scale(want, 0.125f);
  scale(got.data(), 0.125f, 0, n);
  EXPECT_TRUE(same_bits(got, want));
  want = x, got = x;
  ops::ref::softcap(want, 30.0f);
  softcap(got.data(), 30.0f, 0, n);
  EXPECT_TRUE(same_bits(got, want));
  want = x, got = x;
  ops::ref::add_bias(want, std::span<const float>(y.data(), 100), 10, 100);
  add_bias(got.data(), y.data(), 0, 10, 100);
  EXPECT_TRUE(same_bits(got, want));
}

// Every path this CPU runs: the portable one bitwise the reference, the vector-exp ones within the
// OpenCL kernels' tolerance (5e-7 relative); the quantised output is the output quantised.
std::vector<Isa> paths() { return cpu_isas(); }

TEST(CpuElementwise, GatedActivationsOnEveryPathWithQuantisedOutput) {
  const int rows = 6, ff = 512;
  std::vector<float> gu = randn(static_cast<size_t>(rows) * 2 * ff, 21, 3.0f);
  const float inf = std::numeric_limits<float>::infinity();
  const float edges[] = {0.0f, -0.0f, 88.0f, -88.0f, 88.5f, -88.5f, 90.0f, -90.0f, 120.0f, -120.0f,
                         1e-30f, -1e-30f, 1e-45f, 20.0f, -20.0f, 5.0f, -5.0f, inf, -inf};
  for (size_t i = 0; i < std::size(edges); ++i) gu[3 * 2 * ff + i] = edges[i];  // row 3's gate
  for (Isa isa : paths()) {
    for (Activation act : {Activation::kSilu, Activation::kGeluTanh}) {
      const std::span<const float> gate(gu.data(), gu.size()), up(gu.data() + ff, gu.size() - ff);
      std::vector<float> want(static_cast<size_t>(rows) * ff), got(want.size());
      ops::ref::gated_activation(gate, up, want, rows, ff, act, 2 * ff);
      OwnedActivations q;
      q.n = rows;
      q.cols = ff;
      q.q.resize(want.size());
      q.rec.resize(want.size() / 32);
      const QuantOut qo{q.q.data(), q.rec.data(), 256};
      gated_activation(gu.data(), gu.data() + ff, got.data(), 0, 2, ff, act, 2 * ff, &qo, isa);
      gated_activation(gu.data(), gu.data() + ff, got.data(), 2, rows, ff, act, 2 * ff, &qo, isa);
      const std::string what = std::string(isa_name(isa)) + (act == Activation::kSilu ? " silu" : " gelu");
      if (isa == Isa::kPortable) {
        EXPECT_TRUE(same_bits(got, want)) << what;
      } else {
        double worst = 0.0;
        for (size_t i = 0; i < want.size(); ++i) {
          if (std::isnan(want[i]) || std::isinf(want[i])) {
            EXPECT_TRUE(same_bits({got[i]}, {want[i]}) || (std::isnan(got[i]) && std::isnan(want[i])))
                << what << " at " << i << ": " << got[i] << " vs " << want[i];
            continue;
          }
          const double err = std::fabs(double{got[i]} - want[i]) / std::max(1e-30, std::fabs(double{want[i]}));
          if (std::fabs(want[i]) > 1e-30f) worst = std::max(worst, err);
          else EXPECT_LE(std::fabs(got[i]), 1e-30f) << what << " at " << i;
        }
        EXPECT_LE(worst, 5e-7) << what;
      }
      OwnedActivations want_q = q;  // the path's own quantiser (non-finite values quantise to garbage)
      quantize_activations(got.data(), 0, rows, ff, 256, want_q.q.data(), want_q.rec.data(), isa);
      EXPECT_TRUE(same_records(q, want_q)) << what;
    }
  }
}

// ---- RoPE ----
TEST(CpuRope, BitwiseTheReferenceBothTypesPartialDimsAndStrides) {
  const int64_t tokens = 7;
  const std::vector<int32_t> pos = {0, 1, 5, 100, 4095, 65536, 131071};
  for (RopeType type : {RopeType::kNorm, RopeType::kNeox}) {
    for (auto [heads, head_size, rope_dim] : {std::tuple{4, 64, 64}, std::tuple{2, 128, 64}, std::tuple{3, 256, 256}}) {
      const std::vector<float> inv = ops::rope_inv_freq(rope_dim, 10000.0);
      const int64_t stride = int64_t{heads} * head_size + 32;  // q inside a wider fused row
      const std::vector<float> x = randn(static_cast<size_t>(tokens * stride), 31);
      std::vector<float> want = x, got = x;
      ops::ref::rope(want, pos, tokens, heads, head_size, inv, type, stride);
      rope(got.data(), pos.data(), 0, 3, heads, head_size, inv.data(), rope_dim, type, stride);
      rope(got.data(), pos.data(), 3, tokens, heads, head_size, inv.data(), rope_dim, type, stride);
      EXPECT_TRUE(same_bits(got, want)) << static_cast<int>(type) << " " << head_size << " " << rope_dim;
    }
  }
}

// ---- row moves and heads ----
TEST(CpuRows, BitwiseTheReference) {
  const int dim = 40;
  const std::vector<float> src = randn(10 * dim, 41);
  const std::vector<int32_t> idx = {3, 0, 9, -1, 10, 3};
  std::vector<float> want(idx.size() * dim), got(want.size());
  ops::ref::gather_rows(src, idx, want, 10, dim);
  gather_rows(src.data(), idx.data(), got.data(), 0, static_cast<int64_t>(idx.size()), 10, dim);
  EXPECT_TRUE(same_bits(got, want));
  std::vector<float> a(10 * 16), b(10 * 20), c(10 * 4), ra(a.size()), rb(b.size()), rc(c.size());
  ops::ref::split_columns(src, ra, rb, rc, 10, 16, 20, 4);
  split_columns(src.data(), a.data(), b.data(), c.data(), 0, 10, 16, 20, 4);
  EXPECT_TRUE(same_bits(a, ra) && same_bits(b, rb) && same_bits(c, rc));
  const std::vector<int32_t> cols = {0, 39, 40, -2, 5, 6, 7, 8, 9, 1};
  std::vector<float> gw(10), gg(10);
  ops::ref::gather_columns(src, cols, gw, 10, dim);
  gather_columns(src.data(), cols.data(), gg.data(), 0, 10, dim);
  EXPECT_TRUE(same_bits(gg, gw));
}

TEST(CpuHeads, HeadMatmulBitwiseTheReference) {
  const int64_t tokens = 3;
  const int heads = 4, rows = 24, cols = 40;
  const int64_t xs = cols + 8, ys = rows + 5;
  const std::vector<float> w = randn(static_cast<size_t>(heads * rows * cols), 51);
  const std::vector<float> x = randn(static_cast<size_t>(tokens * heads * xs), 52);
  std::vector<float> want(static_cast<size_t>(tokens * heads * ys), -7.0f), got = want;
  ops::ref::head_matmul(w, x, want, tokens, heads, rows, cols, xs, ys);
  head_matmul(w.data(), x.data(), got.data(), 0, 5, heads, rows, cols, xs, ys);
  head_matmul(w.data(), x.data(), got.data(), 5, tokens * heads, heads, rows, cols, xs, ys);
  EXPECT_TRUE(same_bits(got, want)) << "padding between heads untouched too";
}

// ---- sampling reductions ----
TEST(CpuSampling, ArgmaxTopKLogsumexpExactOnHardRows) {
  const int vocab = 1000 + 7;
  std::vector<float> rows = randn(static_cast<size_t>(vocab) * 6, 61, 5.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int i = 0; i < vocab; ++i) {
    rows[static_cast<size_t>(vocab + i)] = static_cast<float>(i % 4);   // ties
    rows[static_cast<size_t>(2 * vocab + i)] = i % 3 == 0 ? nan : 1.0f;  // NaN every third
    rows[static_cast<size_t>(3 * vocab + i)] = nan;                      // all NaN
    rows[static_cast<size_t>(4 * vocab + i)] = i == 500 ? inf : -inf;    // +inf
    rows[static_cast<size_t>(5 * vocab + i)] = i % 2 ? -0.0f : 0.0f;     // -0 / +0 ties
  }
  const int64_t n = 6;
  std::vector<int32_t> want_ids(n), got_ids(n);
  ops::ref::argmax(rows, want_ids, n, vocab);
  for (Isa isa : paths()) {
    std::fill(got_ids.begin(), got_ids.end(), -1);
    argmax(rows.data(), got_ids.data(), 0, n, vocab, isa);
    EXPECT_EQ(got_ids, want_ids) << isa_name(isa);
  }
  const int k = 9;
  std::vector<float> wv(n * k), gv(n * k);
  std::vector<int32_t> wi(n * k), gi(n * k);
  ops::ref::top_k(rows, wv, wi, n, vocab, k);
  top_k(rows.data(), gv.data(), gi.data(), 0, n, vocab, k);
  EXPECT_EQ(gi, wi);
  EXPECT_TRUE(same_bits(gv, wv));
  std::vector<float> wl(n), wo(rows.size());
  ops::ref::log_softmax_rows(rows, wo, wl, n, vocab);
  for (Isa isa : paths()) {
    std::vector<float> gl(n), go(rows.size()), only(n);
    logsumexp(rows.data(), gl.data(), go.data(), 0, n, vocab, isa);
    logsumexp(rows.data(), only.data(), nullptr, 0, n, vocab, isa);
    EXPECT_TRUE(same_bits(only, gl)) << isa_name(isa);
    if (isa == Isa::kPortable) {
      EXPECT_TRUE(same_bits(gl, wl));
      EXPECT_TRUE(same_bits(go, wo));
      continue;
    }
    for (int64_t r = 0; r < n; ++r) {
      if (std::isnan(wl[r]) || std::isinf(wl[r])) {
        EXPECT_TRUE(same_bits({gl[r]}, {wl[r]})) << isa_name(isa) << " row " << r;
      } else {
        EXPECT_LE(std::fabs(gl[r] - wl[r]), 2e-7 * std::max(1.0f, std::fabs(wl[r]))) << isa_name(isa) << " row " << r;
      }
    }
  }
}

// Every length from 1 to 70 (whole vectors and every tail), the maximum (and its ties) at each
// position, with NaN, +-inf and +-0 around it: every path's argmax the reference's index.
TEST(CpuSampling, ArgmaxEveryLengthAndPositionOnEveryPath) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> fill_kinds = {-1.0f, -inf, nan, -0.0f};
  for (int len = 1; len <= 70; ++len) {
    for (int at = 0; at < len; ++at) {
      for (float fill : fill_kinds) {
        for (float top : {2.0f, inf, 0.0f}) {
          std::vector<float> row(static_cast<size_t>(len), fill);
          if (len > 2) row[static_cast<size_t>((at + len / 2) % len)] = std::isnan(fill) ? 1.0f : fill;
          row[static_cast<size_t>(at)] = top;
          if (at + 9 < len) row[static_cast<size_t>(at + 9)] = top;  // a later tie loses
          std::vector<int32_t> want(1), got(1);
          ops::ref::argmax(row, want, 1, len);
          for (Isa isa : paths()) {
            got[0] = -1;
            argmax(row.data(), got.data(), 0, 1, len, isa);
            ASSERT_EQ(got, want) << isa_name(isa) << " len " << len << " at " << at << " fill " << fill
                                 << " top " << top;
          }
        }
      }
    }
  }
}

// ---- the column- and vocabulary-chunked forms (one row on every thread) ----
TEST(CpuChunks, GatedActivationAndQuantiserChunksAreTheRowsBitwise) {
  for (int ff : {1536, 800, 96}) {  // whole chunks, a partial last chunk, one short chunk
    const int rows = 3;
    std::vector<float> gu = randn(static_cast<size_t>(rows) * 2 * ff, 71, 3.0f);
    for (Isa isa : paths()) {
      for (Activation act : {Activation::kSilu, Activation::kGeluTanh}) {
        for (int block : {32, 256}) {
          if (ff % block != 0) continue;
          std::vector<float> want(static_cast<size_t>(rows) * ff), got(want.size());
          std::vector<int8_t> wq(want.size()), gq(want.size());
          std::vector<ActRec> wr(want.size() / 32), gr(want.size() / 32);
          const QuantOut wo{wq.data(), wr.data(), block}, go{gq.data(), gr.data(), block};
          gated_activation(gu.data(), gu.data() + ff, want.data(), 0, rows, ff, act, 2 * ff, &wo, isa);
          const int64_t items = rows * column_chunks(ff);
          // any split of the items between threads: here two uneven ones
          gated_activation_chunks(gu.data(), gu.data() + ff, got.data(), 0, items / 3, ff, act, 2 * ff, &go, isa);
          gated_activation_chunks(gu.data(), gu.data() + ff, got.data(), items / 3, items, ff, act, 2 * ff, &go,
                                  isa);
          const std::string what = str_cat(isa_name(isa), " ff ", ff, " block ", block);
          EXPECT_TRUE(same_bits(got, want)) << what;
          EXPECT_EQ(gq, wq) << what;
          EXPECT_EQ(std::memcmp(gr.data(), wr.data(), wr.size() * sizeof(ActRec)), 0) << what;
          std::vector<int8_t> cq(want.size());
          std::vector<ActRec> cr(want.size() / 32);
          quantize_activation_chunks(want.data(), 0, items, ff, block, cq.data(), cr.data(), isa);
          EXPECT_EQ(cq, wq) << what;
          EXPECT_EQ(std::memcmp(cr.data(), wr.data(), wr.size() * sizeof(ActRec)), 0) << what;
        }
      }
    }
  }
}

// add_rms_norm in column chunks (a decode's row over the threads): x, y and the quantisation
// bitwise the row path's, the items of a row split between 1, 2 or 3 threads running at once (an
// item writes its columns of x only after the row's other items read x).
TEST(CpuChunks, AddRmsNormChunksAreTheRowsBitwise) {
  for (int dim : {576, 1536, 96}) {
    for (int rows : {1, 2}) {
      const size_t n = static_cast<size_t>(dim) * rows;
      const std::vector<float> x = randn(n, 81, 3.0f), res = randn(n, 82), w = randn(static_cast<size_t>(dim), 83);
      for (Isa isa : paths()) {
        for (int block : {32, 256}) {
          if (dim % block != 0) continue;
          std::vector<float> want_x = x, want_y(n);
          std::vector<int8_t> wq(n);
          std::vector<ActRec> wr(n / 32);
          const QuantOut wo{wq.data(), wr.data(), block};
          add_rms_norm(want_x.data(), res.data(), w.data(), want_y.data(), 0, rows, dim, 1e-6f, 0.0f, &wo, isa);
          for (int threads : {1, 2, 3}) {
            const int64_t chunk = ((dim + threads - 1) / threads + block - 1) / block * block;
            const int64_t items = rows * ((dim + chunk - 1) / chunk);
            std::vector<float> got_x = x, got_y(n, -1.0f);
            std::vector<int8_t> gq(n);
            std::vector<ActRec> gr(n / 32);
            const QuantOut go{gq.data(), gr.data(), block};
            std::vector<std::atomic<int32_t>> ready(static_cast<size_t>(rows));
            auto share = [&](int t) {  // a region's static share of the items
              const int64_t i0 = items * t / threads, i1 = items * (t + 1) / threads;
              if (i0 < i1)
                add_rms_norm_chunks(got_x.data(), res.data(), w.data(), got_y.data(), i0, i1, dim, chunk, 1e-6f,
                                    0.0f, &go, ready.data(), isa);
            };
            std::vector<std::thread> others;
            for (int t = 1; t < threads; ++t) others.emplace_back(share, t);
            share(0);
            for (std::thread& t : others) t.join();
            const std::string what = str_cat(isa_name(isa), " dim ", dim, " rows ", rows, " block ", block, " threads ",
                                             threads);
            EXPECT_TRUE(same_bits(got_x, want_x)) << what;
            EXPECT_TRUE(same_bits(got_y, want_y)) << what;
            EXPECT_EQ(gq, wq) << what;
            EXPECT_EQ(std::memcmp(gr.data(), wr.data(), wr.size() * sizeof(ActRec)), 0) << what;
          }
        }
      }
    }
  }
}

TEST(CpuChunks, VocabularyChunksGiveArgmaxExactlyAndLogsumexpWithinTolerance) {
  const int vocab = 3 * static_cast<int>(kVocabChunk) + 123;
  const int64_t n = 7, chunks = vocab_chunks(vocab);
  ASSERT_EQ(chunks, 4);
  std::vector<float> rows = randn(static_cast<size_t>(vocab) * n, 83, 5.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int i = 0; i < vocab; ++i) {
    rows[static_cast<size_t>(vocab + i)] = static_cast<float>(i % 4);                  // ties across chunks
    rows[static_cast<size_t>(2 * vocab + i)] = i == 20000 ? nan : 1.0f;                 // one NaN
    rows[static_cast<size_t>(3 * vocab + i)] = i == 30000 ? inf : -inf;                 // +inf
    rows[static_cast<size_t>(4 * vocab + i)] = -inf;                                    // all -inf
    rows[static_cast<size_t>(5 * vocab + i)] = i < kVocabChunk ? -inf : rows[static_cast<size_t>(5 * vocab + i)];
  }
  rows[static_cast<size_t>(6 * vocab + vocab - 1)] = 40.0f;  // the max in the short last chunk
  std::vector<int32_t> want(n), got(n);
  ops::ref::argmax(rows, want, n, vocab);
  for (Isa isa : paths()) {
    std::vector<ArgmaxPart> ap(static_cast<size_t>(n * chunks));
    argmax_parts(rows.data(), ap.data(), 0, 5, vocab, isa);
    argmax_parts(rows.data(), ap.data(), 5, n * chunks, vocab, isa);
    argmax_combine(ap.data(), got.data(), 0, n, vocab);
    EXPECT_EQ(got, want) << isa_name(isa);
  }
  for (Isa isa : paths()) {
    std::vector<float> wl(n), gl(n);
    logsumexp(rows.data(), wl.data(), nullptr, 0, n, vocab, isa);
    std::vector<LsePart> lp(static_cast<size_t>(n * chunks));
    logsumexp_parts(rows.data(), lp.data(), 0, n * chunks, vocab, isa);
    logsumexp_combine(lp.data(), gl.data(), 0, n, vocab);
    for (int64_t r = 0; r < n; ++r) {
      if (!std::isfinite(wl[r])) {
        EXPECT_TRUE(same_bits({gl[r]}, {wl[r]})) << isa_name(isa) << " row " << r << ": " << gl[r];
      } else {
        EXPECT_LE(std::fabs(gl[r] - wl[r]), 2e-7 * std::max(1.0f, std::fabs(wl[r]))) << isa_name(isa) << " row " << r;
      }
    }
  }
}

}  // namespace
}  // namespace specdec::cpu
