// Shared by the tokenizer tests: GGUF metadata arrays built in memory.
#pragma once

#include <string>
#include <vector>

#include "model/gguf.h"

namespace specdec::model::testing {

inline GgufValue strings(const std::vector<std::string>& values) {
  GgufArray a;
  a.type = GgufType::kString;
  for (const std::string& v : values) a.values.emplace_back(v);
  return GgufValue(a);
}

template <typename T>
GgufValue numbers(GgufType type, const std::vector<T>& values) {
  GgufArray a;
  a.type = type;
  for (T v : values) a.values.emplace_back(v);
  return GgufValue(a);
}

}  // namespace specdec::model::testing
