// ggml tensor types (the `ggml_type` ids of GGUF files) and their block layouts. They live below
// both model/ (the GGUF reader and writer) and quant/ (the weight formats the kernels read), so
// that quant never includes the model layer; model/gguf.h aliases them into specdec::model.
#pragma once

#include <cstdint>

namespace specdec {

// ggml tensor types; the ids are the on-disk `ggml_type` values (4, 5, 31-33, 36-38 are removed).
enum class GgmlType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ8_1 = 9,
  kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kQ8_K = 15, kIQ2_XXS = 16,
  kIQ2_XS = 17, kIQ3_XXS = 18, kIQ1_S = 19, kIQ4_NL = 20, kIQ3_S = 21, kIQ2_S = 22, kIQ4_XS = 23,
  kI8 = 24, kI16 = 25, kI32 = 26, kI64 = 27, kF64 = 28, kIQ1_M = 29, kBF16 = 30, kTQ1_0 = 34,
  kTQ2_0 = 35, kMXFP4 = 39,
};

// Elements per block and bytes per block of a ggml type.
struct GgmlTypeInfo {
  const char* name;
  int64_t block_size;
  int64_t type_size;
};
// The layout of type id `id`, or nullptr when the id is unknown (or its layout is not known here).
const GgmlTypeInfo* ggml_type_info(uint32_t id);

}  // namespace specdec
