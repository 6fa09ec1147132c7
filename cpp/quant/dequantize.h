// Reference (host) dequantizers and quantizers of the supported weight formats.
//
// dequantize_row follows ggml's dequantize_row_* exactly (same float operations in the same
// order), so its output is the value each stored weight stands for. quantize_row is a simple
// round-to-nearest quantizer (max-abs or min/max scales, no search): it writes valid blocks for
// test models, not llama.cpp's optimised choices.
#pragma once

#include <cstdint>
#include <vector>

#include "quant/formats.h"

namespace specdec::quant {

// dst[0, n) = the values of the n elements stored at src in `type`'s block layout.
// n must be a multiple of the block size (ConfigError); UnsupportedError for other types.
void dequantize_row(GgmlType type, const uint8_t* src, float* dst, int64_t n);
// Writes row_bytes(type, n) bytes at dst encoding src[0, n).
void quantize_row(GgmlType type, const float* src, uint8_t* dst, int64_t n);

// Whole-tensor helpers: `rows` rows of `cols` elements each.
std::vector<float> dequantize(GgmlType type, const uint8_t* src, int64_t rows, int64_t cols);
std::vector<uint8_t> quantize(GgmlType type, const float* src, int64_t rows, int64_t cols);

// IQ4_NL / IQ4_XS: the value each 4-bit index stands for (ggml's kvalues_iq4nl).
inline constexpr int8_t kIq4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};

// IQ4_XS: the 6-bit scale of sub-block ib (0..7), from scales_h (bits 2ib, 2ib + 1 = scale bits
// 4, 5) and scales_l (nibble ib % 2 of byte ib / 2 = bits 0..3); the sub-block's factor is
// d * (ls - 32).
inline int iq4_xs_scale(int ib, uint16_t scales_h, const uint8_t* scales_l) {
  return ((scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((scales_h >> (2 * ib)) & 3) << 4);
}

// Q3_K: the sixteen 6-bit sub-block scales (0..63; the factor is d * (ls - 32)) from the 12
// packed bytes: low 4 bits = nibble i / 8 of byte i % 8, high 2 bits = bits 2 (i / 4) of byte
// 8 + i % 4 (ggml's kmask1 / kmask2 shuffle in dequantize_row_q3_K).
void q3_k_scales(const uint8_t* packed, uint8_t* ls);
// The inverse: 16 six-bit scales -> the 12 packed bytes.
void pack_q3_k_scales(const uint8_t* ls, uint8_t* packed);

// Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes
// (ggml's get_scale_min_k4).
void k4_scale_min(int j, const uint8_t* scales, uint8_t* sc, uint8_t* m);

}  // namespace specdec::quant
