// The forward ops of the native CPU device on host memory: the math of ops/reference.h (the same
// formulas, orders and roundings the OpenCL kernels implement, docs/ops.md "Numerics"), for a
// range of rows so that a thread pool can split an op without changing any row's result. Every
// row is computed on its own, in a shape fixed by its length: batch invariant. Arguments are
// checked by the device-neutral dispatch (ops/<family>.cpp); these functions trust them.
// Tested against the references in tests/cpp/cpu_ops_test.cpp.
#pragma once

#include <atomic>
#include <cstdint>

#include "common/model_types.h"
#include "cpu/act_rec.h"
#include "cpu/isa.h"

namespace specdec::cpu {

// Where an op also writes its output rows quantised for the matmuls (cpu/activations.h's rules):
// q [rows, dim] int8, rec [rows, dim / 32]; scale_block 32 or 256 (dim a multiple of it).
struct QuantOut {
  int8_t* q = nullptr;
  ActRec* rec = nullptr;
  int scale_block = 32;
};

// ---- norms (ops/norm.h) ----
// Rows [r0, r1): y = x / sqrt(mean(x^2) + eps) * (weight + weight_offset) (weight may be null).
// y may be x. With q, y's rows are also written quantised. Portable path: bitwise the reference;
// AVX-512: the double sum in lanes, within 1e-6 relative (the OpenCL kernels' tolerance).
void rms_norm(const float* x, const float* weight, float* y, int64_t r0, int64_t r1, int dim, float eps,
              float weight_offset, const QuantOut* q, Isa isa = cpu_isa());
// x += residual (written back), then y = rms_norm(x) as above; y may be x or residual.
void add_rms_norm(float* x, const float* residual, const float* weight, float* y, int64_t r0, int64_t r1,
                  int dim, float eps, float weight_offset, const QuantOut* q, Isa isa = cpu_isa());

// add_rms_norm of rows split in column chunks, so that a decode's one row keeps every thread
// busy: items [i0, i1) of rows x ceil(dim / chunk) (item = row * chunks + c). Every item of a row
// computes the whole row's sum and norm (bitwise the row path) and writes its columns of y (and,
// with q, their quantisation: chunk a multiple of q->scale_block), then its columns of x = x +
// residual only once every item of the row has read x: ready[row] counts the row's items that
// have (set every entry to 0 before the op; an item waits, spinning, for the others of its row,
// so the items of a row must run at once, as a region's static shares do). y must not overlap x
// or residual.
void add_rms_norm_chunks(float* x, const float* residual, const float* weight, float* y, int64_t i0, int64_t i1,
                         int dim, int64_t chunk, float eps, float weight_offset, const QuantOut* q,
                         std::atomic<int32_t>* ready, Isa isa = cpu_isa());

// ---- element-wise (ops/elementwise.h), on the flat range [i0, i1) ----
void add(float* x, const float* y, int64_t i0, int64_t i1);
void scale(float* x, float s, int64_t i0, int64_t i1);
void softcap(float* x, float cap, int64_t i0, int64_t i1);
// rows [r0, r1) of x [rows, dim] += bias [dim]
void add_bias(float* x, const float* bias, int64_t r0, int64_t r1, int dim);
// rows [r0, r1): out [r, ff] = act(gate) * up, gate / up rows in_row_stride apart; with q, out's
// rows are also written quantised. The portable path is bitwise the reference (glibc's expf); the
// AVX2 / AVX-512 paths use a vector exp (cpu/vmath_kernels.h): within 5e-7 relative, the OpenCL
// kernels' tolerance.
void gated_activation(const float* gate, const float* up, float* out, int64_t r0, int64_t r1, int ff,
                      Activation act, int64_t in_row_stride, const QuantOut* q, Isa isa = cpu_isa());
// The same over items [i0, i1) of rows x column_chunks(ff) (cpu/activations.h): one row keeps every
// thread busy; bitwise the rows' (the chunks start at multiples of every vector width).
void gated_activation_chunks(const float* gate, const float* up, float* out, int64_t i0, int64_t i1, int ff,
                             Activation act, int64_t in_row_stride, const QuantOut* q, Isa isa = cpu_isa());

// ---- RoPE (ops/rope.h), tokens [t0, t1), in place ----
void rope(float* x, const int32_t* positions, int64_t t0, int64_t t1, int num_heads, int head_size,
          const float* inv_freq, int rope_dim, RopeType type, int64_t token_stride);
// The rotation angles rope() uses, once for every head and layer that shares the positions and
// inv_freq: cs[(t * half + i) * 2] = cos, + 1 = sin of positions[t] * inv_freq[i], tokens [t0, t1).
void rope_angles(const int32_t* positions, int64_t t0, int64_t t1, const float* inv_freq, int half, float* cs);
// rope() with the angles of rope_angles (cs indexed by the same token t): bitwise rope().
void rope_rotate(float* x, const float* cs, int64_t t0, int64_t t1, int num_heads, int head_size, int rope_dim,
                 RopeType type, int64_t token_stride);

// ---- row moves (ops/rows.h) ----
// dst rows [j0, j1) = src[idx[j]] (NaN rows for an index outside [0, num_src_rows))
void gather_rows(const float* src, const int32_t* idx, float* dst, int64_t j0, int64_t j1, int64_t num_src_rows,
                 int dim);
void copy_2d(const float* src, float* dst, int64_t r0, int64_t r1, int64_t cols, int64_t src_row_stride,
             int64_t dst_row_stride);
void split_columns(const float* src, float* dst_a, float* dst_b, float* dst_c, int64_t r0, int64_t r1, int a,
                   int b, int c);
// dst[r] = src[r, cols[r]] (NaN outside [0, dim)), rows [r0, r1)
void gather_columns(const float* src, const int32_t* cols, float* dst, int64_t r0, int64_t r1, int dim);

// ---- per-head matmul (ops/heads.h): (token, head) pairs [p0, p1) of num_tokens * heads ----
void head_matmul(const float* w, const float* x, float* y, int64_t p0, int64_t p1, int heads, int rows, int cols,
                 int64_t x_head_stride, int64_t y_head_stride);

// ---- sampling reductions (ops/sampling.h), rows [r0, r1) ----
void argmax(const float* logits, int32_t* ids, int64_t r0, int64_t r1, int vocab, Isa isa = cpu_isa());
void top_k(const float* logits, float* values, int32_t* ids, int64_t r0, int64_t r1, int vocab, int k);
// lse[r] = log sum exp(row); with out, also out = row - lse (log_softmax). Portable: bitwise the
// reference; AVX2 / AVX-512: vector exp summed in double lanes, within 2e-7 * max(1, |lse|).
void logsumexp(const float* logits, float* lse, float* out, int64_t r0, int64_t r1, int vocab,
               Isa isa = cpu_isa());

// The same two reductions split over a row's vocabulary in chunks of kVocabChunk (so that a decode's
// one row keeps every thread busy), then combined in chunk order: items [i0, i1) of rows x chunks
// (item = row * chunks + chunk), parts [rows, chunks]. The chunks depend on the vocabulary only, so
// a row's result never depends on its batch or on the threads. argmax: exactly argmax's (the first
// largest in order_key's order). logsumexp: the max and NaN rule as logsumexp; the sum as
// sum_c exp_sum(chunk c, m_c) * exp(m_c - m), within logsumexp's tolerance of the reference.
inline constexpr int64_t kVocabChunk = 8192;
inline int64_t vocab_chunks(int vocab) { return (vocab + kVocabChunk - 1) / kVocabChunk; }
struct ArgmaxPart {
  uint32_t key = 0;
  int32_t index = 0;
};
void argmax_parts(const float* logits, ArgmaxPart* parts, int64_t i0, int64_t i1, int vocab,
                  Isa isa = cpu_isa());
void argmax_combine(const ArgmaxPart* parts, int32_t* ids, int64_t r0, int64_t r1, int vocab);
struct LsePart {
  float max = 0;
  bool nan = false;
  double sum = 0;  // exp_sum of the chunk around its own max (0 for an all -inf chunk)
};
void logsumexp_parts(const float* logits, LsePart* parts, int64_t i0, int64_t i1, int vocab,
                     Isa isa = cpu_isa());
void logsumexp_combine(const LsePart* parts, float* lse, int64_t r0, int64_t r1, int vocab);

}  // namespace specdec::cpu
