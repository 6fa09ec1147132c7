// Matrix multiplication with device weights in block format: y = x . W^T, and embedding lookup.
//
// One kernel family serves decode (n = 1), verification (n = 2..16) and prefill (larger n): a
// work-item computes 16 output rows for up to NB activation rows, decoding each weight block once
// for all of them. Batch invariance: row i of y is bitwise the same for every n and every
// position of the row in the batch (each output element is computed by the same operations in
// the same order; docs/quant.md, "Numerics").
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "device/device.h"
#include "quant/device_weight.h"

namespace specdec::quant {

// Activation rows quantised to int8 with one scale per `scale_block` values (the input of the
// block-format kernels). Reusing one for several matmuls of the same x (q/k/v, gate/up) saves the
// quantisation.
struct QuantizedActivations {
  int64_t n = 0;
  int64_t cols = 0;
  int scale_block = 32;  // 32 or 256 (activation_scale_block)
  device::Buffer q8;   // [n, cols] int8
  device::Buffer q16;  // [n, cols] int16 (the same values; OpenCL's Q8_0 kernels multiply 16-bit
                      // pairs; the native CPU device neither writes nor reads it)
  device::Buffer rec;  // [n, cols / 32] {d, d * sum, sum(0..15), sum(16..31)}
  // The buffer whose rows these are (set by quantize_activations and by a norm that quantised its
  // output, ops::QuantizedOut); empty when unknown. quantize_activations_of uses it to skip
  // quantising the same x twice.
  device::BufferId source;
};

// Records that `xq` holds the quantisation of `x`'s rows (xq's shape and scale block as set by
// prepare_activations): for an op that wrote both in one launch (a norm or activation with an
// ops::QuantizedOut into xq's buffers). The caller states why it holds where it calls it.
inline void set_source(QuantizedActivations& xq, const device::Buffer& x) { xq.source = x.id(); }
// Records that `xq` holds no known buffer's quantisation (its buffers were written otherwise, or
// the buffer they came from changed since).
inline void clear_source(QuantizedActivations& xq) { xq.source = {}; }

// Grows `out` to hold [n, cols] and records the shape and scale_block (32 or 256; source reset);
// false when cols % scale_block != 0 (nothing to quantise: no block-format weight with that scale
// block has such rows).
bool prepare_activations(device::Device& dev, int64_t n, int64_t cols, QuantizedActivations& out,
                         int scale_block = 32);
// quantize_activations unless `out` already holds x's [n, cols] quantisation with that scale block
// (out.source == x, e.g. written by the norm that produced x).
void quantize_activations_of(device::Device& dev, const device::Buffer& x, int64_t n, int64_t cols,
                             QuantizedActivations& out, int scale_block = 32);
// The same for the matmul with `w` (its cols and activation_scale_block; nothing for F32 / F16 /
// BF16 weights).
void quantize_activations_for(device::Device& dev, const device::Buffer& x, int64_t n,
                              const DeviceWeight& w, QuantizedActivations& out);

// Quantises x [n, cols] (f32) into `out` with one scale per scale_block (32 or 256) values,
// growing its buffers when needed. With cols % scale_block != 0 it records the shape and quantises
// nothing.
void quantize_activations(device::Device& dev, const device::Buffer& x, int64_t n, int64_t cols,
                          QuantizedActivations& out, int scale_block = 32);

// Where a matmul writes its [n, rows] result: row i at y + offset + i * stride (floats; stride 0:
// rows, i.e. contiguous). Lets matmuls of different weight types fill column ranges of one wider
// row buffer (q | k stacked and v apart, written into one q | k | v row for the fused epilogue).
struct OutputColumns {
  int64_t offset = 0;
  int64_t stride = 0;
};

// y [n, rows] = x [n, cols] . W^T, all f32. n == 0 does nothing.
void matmul(device::Device& dev, const DeviceWeight& w, const device::Buffer& x, int64_t n,
            device::Buffer& y);
// The same with x already quantised by quantize_activations with w's activation_scale_block
// (ignored for F32/F16/BF16 weights, which read x itself), writing where `out` says.
void matmul(device::Device& dev, const DeviceWeight& w, const device::Buffer& x,
            const QuantizedActivations& xq, int64_t n, device::Buffer& y, OutputColumns out = {});

// The same, quantising x into xq first unless xq already holds x's quantisation for w
// (quantize_activations_for): matmuls of one x with weights of different scale blocks each get
// theirs, the others reuse it.
void matmul_reusing(device::Device& dev, const DeviceWeight& w, const device::Buffer& x,
                    QuantizedActivations& xq, int64_t n, device::Buffer& y, OutputColumns out = {});

// out [n, cols] = scale * W[ids[i], :] (f32), dequantised on the device; ids int32 [n]. Ids are
// clamped to [0, rows) on the device; the host overload checks them first (ConfigError).
void embedding_lookup(device::Device& dev, const DeviceWeight& w, const device::Buffer& ids, int64_t n,
                      device::Buffer& out, float scale = 1.0f);
void embedding_lookup(device::Device& dev, const DeviceWeight& w, std::span<const int32_t> ids,
                      device::Buffer& out, float scale = 1.0f);

}  // namespace specdec::quant
