#include "quant/formats.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>

#include "common/errors.h"

namespace specdec::quant {
namespace {

const WeightFormat kFormats[] = {
    {GgmlType::kF32, "f32", 1, 4},       {GgmlType::kF16, "f16", 1, 2},
    {GgmlType::kBF16, "bf16", 1, 2},     {GgmlType::kQ8_0, "q8_0", 32, 34},
    {GgmlType::kQ4_0, "q4_0", 32, 18},   {GgmlType::kQ4_1, "q4_1", 32, 20},
    {GgmlType::kQ5_0, "q5_0", 32, 22},   {GgmlType::kQ5_1, "q5_1", 32, 24},
    {GgmlType::kQ2_K, "q2_K", 256, 84},  {GgmlType::kQ3_K, "q3_K", 256, 110},
    {GgmlType::kQ4_K, "q4_K", 256, 144}, {GgmlType::kQ5_K, "q5_K", 256, 176},
    {GgmlType::kQ6_K, "q6_K", 256, 210}, {GgmlType::kIQ4_NL, "iq4_nl", 32, 18},
    {GgmlType::kIQ4_XS, "iq4_xs", 256, 136},
};

const WeightFormat* find_format(GgmlType type) {
  for (const WeightFormat& f : kFormats) {
    if (f.type == type) return &f;
  }
  return nullptr;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

}  // namespace

const std::vector<GgmlType>& supported_weight_types() {
  static const std::vector<GgmlType> types = [] {
    std::vector<GgmlType> t;
    for (const WeightFormat& f : kFormats) t.push_back(f.type);
    return t;
  }();
  return types;
}

bool is_weight_type_supported(GgmlType type) { return find_format(type) != nullptr; }

std::string supported_weight_type_list() {
  std::string list;
  for (const WeightFormat& f : kFormats) list += (list.empty() ? "" : ", ") + std::string(f.name);
  return list;
}

std::string weight_type_name(GgmlType type) {
  if (const WeightFormat* f = find_format(type)) return f->name;
  const auto id = static_cast<uint32_t>(type);
  const GgmlTypeInfo* info = ggml_type_info(id);
  return str_cat("type ", id, " (",
                 info != nullptr && info->name != nullptr ? info->name : "unknown", ")");
}

const WeightFormat& weight_format(GgmlType type) {
  if (const WeightFormat* f = find_format(type)) return *f;
  throw UnsupportedError(str_cat("weight format ", weight_type_name(type),
                                 " is not supported; supported: ", supported_weight_type_list()));
}

GgmlType parse_weight_type(const std::string& name) {
  for (const WeightFormat& f : kFormats) {
    if (lower(f.name) == lower(name)) return f.type;
  }
  throw UnsupportedError(str_cat("weight format '", name,
                                 "' is not supported; supported: ", supported_weight_type_list()));
}

void check_row_length(GgmlType type, int64_t cols, const std::string& field) {
  const WeightFormat& f = weight_format(type);
  SPECDEC_CHECK(cols > 0 && cols % f.block_size == 0, field, cols,
               str_cat("must be a positive multiple of ", f.block_size, " for ", f.name));
}

int64_t row_bytes(GgmlType type, int64_t cols) {
  check_row_length(type, cols);
  const WeightFormat& f = weight_format(type);
  return cols / f.block_size * f.block_bytes;
}

int activation_scale_block(GgmlType type) {
  // SPECDEC_Q8K_ACTIVATIONS=1: one scale per 256 values in front of K-quants and IQ4_XS, as
  // llama.cpp's Q8_K (for comparing logits with llama.cpp: bench/agreement_llamacpp.py); by
  // default 32, the finer rule (docs/quant.md, "Activation quantisation")
  static const bool q8k = [] {
    const char* env = std::getenv("SPECDEC_Q8K_ACTIVATIONS");
    return env != nullptr && std::string(env) == "1";
  }();
  switch (type) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return 0;
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
    case GgmlType::kIQ4_XS:
      return q8k ? 256 : 32;
    default:
      return 32;
  }
}

}  // namespace specdec::quant
