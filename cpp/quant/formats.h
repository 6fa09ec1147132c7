// Weight formats that specdec runs: ggml's F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K,
// Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS (block layouts: shared/reference/llamacpp.md §2,
// docs/quant.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/ggml_type.h"

namespace specdec::quant {

using specdec::GgmlType;

// Elements per block and bytes per block of a supported type.
struct WeightFormat {
  GgmlType type;
  const char* name;     // ggml's name: "f32", "q4_K", ...
  int64_t block_size;   // elements per block (1 for F32/F16/BF16)
  int64_t block_bytes;  // bytes per block
};

// The supported types, in the order above.
const std::vector<GgmlType>& supported_weight_types();
bool is_weight_type_supported(GgmlType type);
// The format of `type`; UnsupportedError naming the type and listing the supported ones otherwise.
const WeightFormat& weight_format(GgmlType type);
// How many activation values share one int8 scale in front of weights of `type`: 32 for every
// block format, 0 for F32 / F16 / BF16 (x is read as it is); with SPECDEC_Q8K_ACTIVATIONS=1, 256
// for the K-quants and IQ4_XS, as llama.cpp's CPU backend quantises them (its vec_dot_type Q8_K).
// The rounding of each rule: kernels/quant_rows.clh and docs/quant.md, "Activation quantisation".
int activation_scale_block(GgmlType type);

// "q4_K"; "type 17 (iq2_xs)" style text for types outside the supported list.
std::string weight_type_name(GgmlType type);
// "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_K, q3_K, q4_K, q5_K, q6_K, iq4_nl, iq4_xs".
std::string supported_weight_type_list();
// The supported type named `name` (ggml's names, case-insensitive); UnsupportedError otherwise.
GgmlType parse_weight_type(const std::string& name);

// Bytes of one row of `cols` elements; ConfigError when cols is not a multiple of the block size.
int64_t row_bytes(GgmlType type, int64_t cols);
// Throws ConfigError unless `cols` is a positive multiple of the block size of `type`.
void check_row_length(GgmlType type, int64_t cols, const std::string& field = "cols");

}  // namespace specdec::quant
