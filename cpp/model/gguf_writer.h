// Writes GGUF v3 files: metadata of every value type and tensors given as raw bytes in their
// ggml type's block layout. Used by tests and by the generator of small test models.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/gguf.h"

namespace specdec::model {

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t alignment = kGgufDefaultAlignment);

  // Adds or replaces a metadata value (kept in insertion order).
  GgufWriter& set(const std::string& key, GgufValue value);
  GgufWriter& set_string(const std::string& key, const std::string& value);
  GgufWriter& set_u32(const std::string& key, uint32_t value);
  GgufWriter& set_f32(const std::string& key, float value);
  GgufWriter& set_bool(const std::string& key, bool value);
  GgufWriter& set_strings(const std::string& key, const std::vector<std::string>& values);
  GgufWriter& set_f32s(const std::string& key, const std::vector<float>& values);
  GgufWriter& set_i32s(const std::string& key, const std::vector<int32_t>& values);
  GgufWriter& erase(const std::string& key);

  // Adds a tensor; `data` must hold exactly the bytes of `dims` in `type` (ConfigError if not).
  // dims: ne[0] first (innermost).
  GgufWriter& add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> dims,
                         std::vector<uint8_t> data);
  // An F32 tensor from floats.
  GgufWriter& add_f32(const std::string& name, std::vector<int64_t> dims,
                      const std::vector<float>& values);

  std::vector<uint8_t> to_bytes() const;
  void write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> dims;
    std::vector<uint8_t> data;
  };
  uint32_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<Tensor> tensors_;
};

}  // namespace specdec::model
