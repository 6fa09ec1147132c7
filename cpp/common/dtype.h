// Element types of KV caches and activations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace specdec {

enum class DType { kF32, kF16, kBF16, kI8 };

// Bytes per element.
size_t dtype_size(DType dtype);
// Canonical lower-case name: "f32", "f16", "bf16", "int8".
std::string dtype_name(DType dtype);
// Accepts canonical names and the usual aliases (float32, float, half, float16, bfloat16, i8).
// Throws ConfigError naming `field` for anything else.
DType parse_dtype(std::string_view name, const std::string& field = "dtype");
std::vector<DType> all_dtypes();

// Host-side conversions used by references and tests (round to nearest even).
uint16_t float_to_half_bits(float value);
float half_bits_to_float(uint16_t bits);
uint16_t float_to_bf16_bits(float value);
float bf16_bits_to_float(uint16_t bits);

}  // namespace specdec
