// Norms, element-wise ops, gated activations and RoPE of the native CPU device (cpu/ops.h).
#include "cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "common/errors.h"
#include "cpu/activations.h"
#include "cpu/vmath.h"
#include "cpu/strict_fp.h"

namespace specdec::cpu {
namespace {

// ops::ref::rms_norm of one row (squares in f32 summed in double, in order).
void norm_row_portable(const float* x, const float* weight, float* y, int dim, float eps, float weight_offset, int c0,
                       int c1) {
  double sum = 0.0;
  for (int i = 0; i < dim; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / dim);
  const float scale = 1.0f / std::sqrt(mean + eps);
  if (weight == nullptr) {
    for (int i = c0; i < c1; ++i) y[i] = x[i] * scale;
  } else {
    for (int i = c0; i < c1; ++i) y[i] = (x[i] * scale) * (weight[i] + weight_offset);
  }
}

inline void cpu_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

void quantize_row(const float* y, int64_t r, int dim, const QuantOut* q, Isa isa) {
  if (q != nullptr) quantize_activations(y, r, r + 1, dim, q->scale_block, q->q, q->rec, isa);
}

float silu(float g) { return g / (1.0f + std::exp(-g)); }

float gelu_tanh(float g) {
  constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
  constexpr float kCoef = 0.044715f;
  const float z = kSqrt2OverPi * (g + kCoef * g * g * g);
  return g / (1.0f + std::exp(-2.0f * z));
}

void silu_mul_portable(const float* g, const float* u, float* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = silu(g[i]) * u[i];
}

void gelu_mul_portable(const float* g, const float* u, float* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = gelu_tanh(g[i]) * u[i];
}

double exp_sum_portable(const float* x, float m, int n) {
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += static_cast<double>(std::exp(x[i] - m));
  return sum;
}

void exp_shift_portable(const float* x, float m, float* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = std::exp(x[i] - m);
}

float max_nan_portable(const float* x, int n, bool* nan) {
  float m = -std::numeric_limits<float>::infinity();
  bool any = false;
  for (int i = 0; i < n; ++i) {
    any = any || std::isnan(x[i]);
    m = x[i] > m ? x[i] : m;
  }
  *nan = any;
  return m == 0.0f ? 0.0f : m;
}

uint32_t argmax_key_portable(const float* x, int n, int32_t* index) {
  uint32_t best = vmath::order_key(x[0]);
  int32_t at = 0;
  for (int i = 1; i < n; ++i) {
    const uint32_t k = vmath::order_key(x[i]);
    if (k > best) {
      best = k;
      at = i;
    }
  }
  *index = at;
  return best;
}

// Each path's table is built on first use by a caller of that path, never before: building the
// AVX-512 table runs code compiled for AVX-512 (it may copy the table with zmm stores), which
// faults on a CPU without it.
const vmath::Kernels& vmath_portable() {
  static const vmath::Kernels k{silu_mul_portable,     gelu_mul_portable,  exp_sum_portable,
                                exp_shift_portable,    quantize_row_portable, norm_row_portable,
                                max_nan_portable,      argmax_key_portable};
  return k;
}
const vmath::Kernels& vmath_avx2() {
  static const vmath::Kernels k = [] {
    vmath::Kernels t = vmath_portable();
    vmath::avx2_kernels(t);
    return t;
  }();
  return k;
}
const vmath::Kernels& vmath_avx512() {
  static const vmath::Kernels k = [] {
    vmath::Kernels t = vmath_avx2();
    vmath::avx512_kernels(t);
    return t;
  }();
  return k;
}

}  // namespace

const vmath::Kernels& vmath_for(Isa isa) {
  if (isa >= Isa::kAvx512bw) return vmath_avx512();
  if (isa >= Isa::kAvx2) return vmath_avx2();
  return vmath_portable();
}

void rms_norm(const float* x, const float* weight, float* y, int64_t r0, int64_t r1, int dim, float eps,
              float weight_offset, const QuantOut* q, Isa isa) {
  const vmath::Kernels& k = vmath_for(isa);
  for (int64_t r = r0; r < r1; ++r) {
    k.norm_row(x + r * dim, weight, y + r * dim, dim, eps, weight_offset, 0, dim);
    quantize_row(y, r, dim, q, isa);
  }
}

void add_rms_norm(float* x, const float* residual, const float* weight, float* y, int64_t r0, int64_t r1,
                  int dim, float eps, float weight_offset, const QuantOut* q, Isa isa) {
  const vmath::Kernels& k = vmath_for(isa);
  for (int64_t r = r0; r < r1; ++r) {
    float* xr = x + r * dim;
    const float* rr = residual + r * dim;
    for (int i = 0; i < dim; ++i) xr[i] = xr[i] + rr[i];
    k.norm_row(xr, weight, y + r * dim, dim, eps, weight_offset, 0, dim);
    quantize_row(y, r, dim, q, isa);
  }
}

void add_rms_norm_chunks(float* x, const float* residual, const float* weight, float* y, int64_t i0, int64_t i1,
                         int dim, int64_t chunk, float eps, float weight_offset, const QuantOut* q,
                         std::atomic<int32_t>* ready, Isa isa) {
  const vmath::Kernels& k = vmath_for(isa);
  const int64_t chunks = (dim + chunk - 1) / chunk;
  thread_local std::vector<float> sum_row;
  sum_row.resize(static_cast<size_t>(dim));
  for (int64_t i = i0; i < i1;) {
    const int64_t r = i / chunks, end = std::min(i1, (r + 1) * chunks);  // this call's items of row r
    float* xr = x + r * dim;
    const float* rr = residual + r * dim;
    for (int c = 0; c < dim; ++c) sum_row[static_cast<size_t>(c)] = xr[c] + rr[c];
    // x read: the row's other items may write their columns once every item has read it
    ready[r].fetch_add(static_cast<int32_t>(end - i), std::memory_order_acq_rel);
    const int c0 = static_cast<int>((i % chunks) * chunk);
    const int c1 = static_cast<int>(std::min<int64_t>(dim, ((end - 1) % chunks + 1) * chunk));
    k.norm_row(sum_row.data(), weight, y + r * dim, dim, eps, weight_offset, c0, c1);  // its columns
    if (q != nullptr) {
      const int64_t at = r * dim + c0;
      k.quantize_row(y + at, c1 - c0, q->scale_block, q->q + at, q->rec + at / 32);
    }
    // (the others are mid-way through the same few µs of work; yielding now and then lets one
    // that shares this CPU run: a loaded or oversubscribed machine)
    for (int spins = 1; ready[r].load(std::memory_order_acquire) < chunks; ++spins) {
      cpu_pause();
      if (spins % 64 == 0) std::this_thread::yield();
    }
    std::copy(sum_row.data() + c0, sum_row.data() + c1, xr + c0);
    i = end;
  }
}

void add(float* x, const float* y, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i) x[i] = x[i] + y[i];
}

void scale(float* x, float s, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i) x[i] = x[i] * s;
}

void softcap(float* x, float cap, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

void add_bias(float* x, const float* bias, int64_t r0, int64_t r1, int dim) {
  for (int64_t r = r0; r < r1; ++r) {
    float* xr = x + r * dim;
    for (int i = 0; i < dim; ++i) xr[i] = xr[i] + bias[i];
  }
}

void gated_activation(const float* gate, const float* up, float* out, int64_t r0, int64_t r1, int ff,
                      Activation act, int64_t in_row_stride, const QuantOut* q, Isa isa) {
  const vmath::Kernels& k = vmath_for(isa);
  const auto row = act == Activation::kSilu ? k.silu_mul : k.gelu_mul;
  for (int64_t r = r0; r < r1; ++r) {
    row(gate + r * in_row_stride, up + r * in_row_stride, out + r * ff, ff);
    quantize_row(out, r, ff, q, isa);
  }
}

void gated_activation_chunks(const float* gate, const float* up, float* out, int64_t i0, int64_t i1, int ff,
                             Activation act, int64_t in_row_stride, const QuantOut* q, Isa isa) {
  SPECDEC_CHECK(q == nullptr || (ff > 0 && ff % q->scale_block == 0), "ff", ff,
                str_cat("a positive multiple of the quantised output's scale block ",
                        q == nullptr ? 0 : q->scale_block));
  const vmath::Kernels& k = vmath_for(isa);
  const auto row = act == Activation::kSilu ? k.silu_mul : k.gelu_mul;
  const int64_t chunks = column_chunks(ff);
  for (int64_t item = i0; item < i1; ++item) {
    const int64_t r = item / chunks, c0 = (item % chunks) * kColumnChunk;
    const int len = static_cast<int>(std::min<int64_t>(kColumnChunk, ff - c0));
    float* o = out + r * ff + c0;
    row(gate + r * in_row_stride + c0, up + r * in_row_stride + c0, o, len);
    if (q != nullptr) {
      k.quantize_row(o, len, q->scale_block, q->q + r * ff + c0, q->rec + (r * ff + c0) / 32);
    }
  }
}

void rope_angles(const int32_t* positions, int64_t t0, int64_t t1, const float* inv_freq, int half, float* cs) {
  for (int64_t t = t0; t < t1; ++t) {
    const float pos = static_cast<float>(positions[t]);
    float* a = cs + t * half * 2;
    for (int i = 0; i < half; ++i) {
      const float theta = pos * inv_freq[i];
      a[2 * i] = static_cast<float>(std::cos(static_cast<double>(theta)));
      a[2 * i + 1] = static_cast<float>(std::sin(static_cast<double>(theta)));
    }
  }
}

void rope_rotate(float* x, const float* cs, int64_t t0, int64_t t1, int num_heads, int head_size, int rope_dim,
                 RopeType type, int64_t token_stride) {
  const int half = rope_dim / 2;
  for (int64_t t = t0; t < t1; ++t) {
    float* row = x + t * token_stride;
    const float* a = cs + t * half * 2;
    for (int i = 0; i < half; ++i) {
      const float c = a[2 * i], s = a[2 * i + 1];
      const int d0 = type == RopeType::kNeox ? i : 2 * i;
      const int d1 = type == RopeType::kNeox ? i + half : 2 * i + 1;
      for (int h = 0; h < num_heads; ++h) {
        float* head = row + int64_t{h} * head_size;
        const float x0 = head[d0], x1 = head[d1];
        head[d0] = x0 * c - x1 * s;
        head[d1] = x0 * s + x1 * c;
      }
    }
  }
}

void rope(float* x, const int32_t* positions, int64_t t0, int64_t t1, int num_heads, int head_size,
          const float* inv_freq, int rope_dim, RopeType type, int64_t token_stride) {
  const int half = rope_dim / 2;
  thread_local std::vector<float> cs;
  cs.resize(static_cast<size_t>(half) * 2);
  for (int64_t t = t0; t < t1; ++t) {  // one token's angles at a time, as its own table
    rope_angles(positions + t, 0, 1, inv_freq, half, cs.data());
    rope_rotate(x + t * token_stride, cs.data(), 0, 1, num_heads, head_size, rope_dim, type, token_stride);
  }
}

}  // namespace specdec::cpu
