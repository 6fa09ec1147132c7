#include "common/ggml_type.h"

#include <iterator>

namespace specdec {
namespace {

constexpr GgmlTypeInfo kUnknownType = {nullptr, 0, 0};
constexpr GgmlTypeInfo kGgmlTypes[] = {
    {"f32", 1, 4},         {"f16", 1, 2},       {"q4_0", 32, 18},     {"q4_1", 32, 20},
    kUnknownType,          kUnknownType,        {"q5_0", 32, 22},     {"q5_1", 32, 24},
    {"q8_0", 32, 34},      {"q8_1", 32, 36},    {"q2_K", 256, 84},    {"q3_K", 256, 110},
    {"q4_K", 256, 144},    {"q5_K", 256, 176},  {"q6_K", 256, 210},   {"q8_K", 256, 292},
    {"iq2_xxs", 256, 66},  {"iq2_xs", 256, 74}, {"iq3_xxs", 256, 98}, {"iq1_s", 256, 50},
    {"iq4_nl", 32, 18},    {"iq3_s", 256, 110}, {"iq2_s", 256, 82},   {"iq4_xs", 256, 136},
    {"i8", 1, 1},          {"i16", 1, 2},       {"i32", 1, 4},        {"i64", 1, 8},
    {"f64", 1, 8},         {"iq1_m", 256, 56},  {"bf16", 1, 2},       kUnknownType,
    kUnknownType,          kUnknownType,        {"tq1_0", 256, 54},   {"tq2_0", 256, 66},
    kUnknownType,          kUnknownType,        kUnknownType,         {"mxfp4", 32, 17},
};

}  // namespace

const GgmlTypeInfo* ggml_type_info(uint32_t id) {
  if (id >= std::size(kGgmlTypes) || kGgmlTypes[id].name == nullptr) return nullptr;
  return &kGgmlTypes[id];
}

}  // namespace specdec
