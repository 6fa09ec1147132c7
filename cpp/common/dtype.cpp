#include "common/dtype.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "common/errors.h"

namespace specdec {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI8: return 1;
  }
  throw ConfigError("dtype", std::to_string(static_cast<int>(dtype)), "not a DType value");
}

std::string dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kI8: return "int8";
  }
  throw ConfigError("dtype", std::to_string(static_cast<int>(dtype)), "not a DType value");
}

std::vector<DType> all_dtypes() { return {DType::kF32, DType::kF16, DType::kBF16, DType::kI8}; }

DType parse_dtype(std::string_view name, const std::string& field) {
  std::string s(name);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (s == "f32" || s == "float32" || s == "float" || s == "fp32") return DType::kF32;
  if (s == "f16" || s == "float16" || s == "half" || s == "fp16") return DType::kF16;
  if (s == "bf16" || s == "bfloat16") return DType::kBF16;
  if (s == "int8" || s == "i8") return DType::kI8;
  throw ConfigError(field, str_cat("'", name, "'"), "allowed dtypes are f32, f16, bf16, int8");
}

uint16_t float_to_half_bits(float value) {
  uint32_t x;
  std::memcpy(&x, &value, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return static_cast<uint16_t>(sign | (abs > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs < 0x38800000u) {  // subnormal or zero in half
    const float f = std::fabs(value) * 16777216.0f;  // 2^24: half subnormal unit
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(f)));
  }
  const uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);  // round to nearest even
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

float half_bits_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exp = (bits >> 10) & 0x1fu;
  const uint32_t mant = bits & 0x3ffu;
  float out;
  if (exp == 0) {
    out = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -out : out;
  }
  uint32_t x = exp == 31 ? (sign | 0x7f800000u | (mant << 13)) : (sign | ((exp + 112) << 23) | (mant << 13));
  std::memcpy(&out, &x, 4);
  return out;
}

uint16_t float_to_bf16_bits(float value) {
  uint32_t x;
  std::memcpy(&x, &value, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

float bf16_bits_to_float(uint16_t bits) {
  const uint32_t x = static_cast<uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &x, 4);
  return out;
}

}  // namespace specdec
