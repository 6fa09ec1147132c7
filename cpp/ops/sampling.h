// Per-row reductions over logits on the device, for sampling and logprobs
// (kernels/ops_sampling.cl, kernels/ops_topk.cl). Host references: ops/reference.h.
//
// Value order (argmax, top_k): larger first; equal values go to the lower index; -0 == +0;
// NaN ranks below every number (-inf included), so it is chosen only when nothing else is left.
// Every result of a row is bitwise the same whatever the number of rows and the row's place.
#pragma once

#include <cstdint>

#include "device/device.h"
#include "ops/slice.h"

namespace specdec::ops {

constexpr int kMaxTopK = 128;

// ids[r] = index of the largest logit of row r (a row of NaN gives 0).
void argmax(device::Device& dev,
            Slice logits,  // [rows, vocab]
            Slice ids,     // int32 [rows]
            int64_t rows, int vocab);

// The k largest logits of each row, sorted descending (ties: lower index first), and their
// indices; 1 <= k <= min(kMaxTopK, vocab).
void top_k(device::Device& dev,
           Slice logits,  // [rows, vocab]
           Slice values,  // [rows, k]
           Slice ids,     // int32 [rows, k]
           int64_t rows, int vocab, int k);

// lse[r] = log(sum_i exp(logits[r, i])) (max-shifted; exp in f32, sum in double on fp64
// devices). NaN anywhere in a row gives NaN; a row of -inf gives -inf.
void logsumexp_rows(device::Device& dev,
                    Slice logits,  // [rows, vocab]
                    Slice lse,     // [rows]
                    int64_t rows, int vocab);

// out = logits - lse per row (log-probabilities), writing lse too; out may be logits (in place).
void log_softmax_rows(device::Device& dev,
                      Slice logits,  // [rows, vocab]
                      Slice out,     // [rows, vocab]
                      Slice lse,     // [rows]
                      int64_t rows, int vocab);

// top_k_uses_heap, top_k_local_size: the OpenCL kernel's choice, ops/ocl_common.h.

}  // namespace specdec::ops
