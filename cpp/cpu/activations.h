// Quantised activation rows for the native matmul (cpu/matmul.h), in the records OpenCL's
// quantize_activations writes (cpu/act_rec.h): int8 values [n, cols] and one ActRec per 32-value
// block. The rules are quant::quantize_activations_reference's (docs/quant.md, "Numerics"):
// scale_block 32 (d = amax / 127, q = round half away from zero) or 256 (id = 127 / amax,
// q = round half to even, d = 1 / id); each row on its own, so a row never depends on its batch.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/act_rec.h"
#include "cpu/isa.h"
#include "quant/reference.h"

namespace specdec::cpu {

// A view of quantised rows (memory owned elsewhere: a device buffer or an OwnedActivations).
struct Activations {
  int64_t n = 0, cols = 0;
  const int8_t* q = nullptr;    // [n, cols]
  const ActRec* rec = nullptr;  // [n, cols / 32]
};

struct OwnedActivations {
  int64_t n = 0, cols = 0;
  std::vector<int8_t> q;
  std::vector<ActRec> rec;
  Activations view() const { return {n, cols, q.data(), rec.data()}; }
};

// The reference's values as records.
OwnedActivations records_of(const quant::HostActivations& a);

// Quantises rows [row_begin, row_end) of x [.., cols] into q and rec (the whole arrays, indexed
// by row): bitwise quant::quantize_activations_reference on every path (AVX-512: vector max,
// multiply and rounding, exact operations). ConfigError for a scale_block other than 32 or 256
// or cols not a positive multiple of it.
void quantize_activations(const float* x, int64_t row_begin, int64_t row_end, int64_t cols, int scale_block,
                          int8_t* q, ActRec* rec, Isa isa = cpu_isa());
// The same split in column chunks of kColumnChunk (a multiple of both scale blocks, so a chunk
// holds whole blocks and its records are the row's): items [i0, i1) of rows x column_chunks(cols)
// (item = row * chunks + chunk), so that one row keeps every thread busy. Bitwise the row's.
inline constexpr int64_t kColumnChunk = 256;
inline int64_t column_chunks(int64_t cols) { return (cols + kColumnChunk - 1) / kColumnChunk; }
void quantize_activation_chunks(const float* x, int64_t i0, int64_t i1, int64_t cols, int scale_block,
                                int8_t* q, ActRec* rec, Isa isa = cpu_isa());
// The portable row (the vmath table's portable entry; cpu/ops.cpp).
void quantize_row_portable(const float* x, int64_t cols, int scale_block, int8_t* q, ActRec* rec);

// All n rows into a new OwnedActivations.
OwnedActivations quantize_activations(const float* x, int64_t n, int64_t cols, int scale_block);

}  // namespace specdec::cpu
