// A hardened reader of GGUF model files (versions 2 and 3), memory-mapped and read-only.
//
// Model files are untrusted input: every count, length, dimension, offset and size is checked
// before use, and anything malformed throws FormatError naming the key or tensor, the offending
// value and the byte offset. Nothing is allocated in proportion to a count before that count is
// checked against the bytes that remain. Layout: shared/reference/llamacpp.md §1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "common/ggml_type.h"
#include "model/mapped_file.h"

namespace specdec::model {

// Metadata value types; the ids are the on-disk `gguf_type` values.
enum class GgufType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6,
  kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};
// "uint8", ..., "float64"; "unknown" for ids outside the enum.
const char* gguf_type_name(GgufType type);

class GgufValue;

// An array value: the element type (also for empty arrays) and the elements.
struct GgufArray {
  GgufType type = GgufType::kUint8;
  std::vector<GgufValue> values;
};

// One metadata value. The variant's alternative index equals the GgufType id.
class GgufValue {
 public:
  using Variant = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                               std::string, GgufArray, uint64_t, int64_t, double>;

  GgufValue() = default;
  template <typename T>
  explicit GgufValue(T value) : value_(std::move(value)) {}

  GgufType type() const { return static_cast<GgufType>(value_.index()); }
  const Variant& variant() const { return value_; }
  // The value as T, or nullptr when it holds another type.
  template <typename T>
  const T* get_if() const { return std::get_if<T>(&value_); }

 private:
  Variant value_;
};

// ggml tensor types and their block layouts (common/ggml_type.h), here under their model names.
using specdec::GgmlType;
using specdec::GgmlTypeInfo;
using specdec::ggml_type_info;

// Maximum tensor rank (GGML_MAX_DIMS) and name length (GGML_MAX_NAME, including the NUL).
inline constexpr uint32_t kGgufMaxDims = 4;
inline constexpr size_t kGgufMaxNameBytes = 64;
inline constexpr uint32_t kGgufDefaultAlignment = 32;

struct GgufTensor {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> dims;  // ne[0] first (innermost, contiguous)
  uint64_t offset = 0;        // relative to data_offset()
  uint64_t size_bytes = 0;
  int64_t num_elements = 0;
  const uint8_t* data = nullptr;  // into the file's bytes; valid while the GgufFile lives
};

class GgufFile {
 public:
  // Maps and parses `path`. Throws ConfigError when it cannot be opened, FormatError when it is
  // not a valid GGUF file.
  static GgufFile open(const std::string& path);
  // Parses an in-memory file (tests); the object owns the bytes.
  static GgufFile from_bytes(std::vector<uint8_t> bytes);
  // `metadata`'s keys with `tensors` whose data point into memory that `owner` keeps alive (a
  // checkpoint directory's mapped safetensors files): no tensor bytes are copied. `source` names
  // the file in messages. FormatError for a duplicate tensor name.
  static GgufFile from_views(GgufFile metadata, std::vector<GgufTensor> tensors,
                             std::shared_ptr<const void> owner, std::string source);

  GgufFile(GgufFile&&) noexcept = default;
  GgufFile& operator=(GgufFile&&) noexcept = default;

  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return file_.size(); }
  const std::string& source() const { return source_.empty() ? file_.source() : source_; }
  // MappedFile::release_pages: the file's pages leave this process's resident memory (a later
  // read faults them back in).
  bool release_pages() const noexcept { return file_.release_pages(); }
  // Of one tensor's bytes (a tensor of this file).
  bool release_pages(const GgufTensor& t) const noexcept { return file_.release_pages(t.data, t.size_bytes); }

  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  // nullptr when absent.
  const GgufValue* find(const std::string& key) const;
  // Typed getters: throw FormatError naming the key when it is absent or has another type.
  uint32_t get_u32(const std::string& key) const;
  int32_t get_i32(const std::string& key) const;
  uint64_t get_u64(const std::string& key) const;
  int64_t get_i64(const std::string& key) const;
  float get_f32(const std::string& key) const;
  double get_f64(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  const std::string& get_string(const std::string& key) const;
  const GgufArray& get_array(const std::string& key) const;
  // Any integer type whose value fits in int64 (writers disagree on u32 vs i32 vs u64).
  int64_t get_int(const std::string& key) const;
  // An array of strings, copied.
  std::vector<std::string> get_string_array(const std::string& key) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  // nullptr when absent.
  const GgufTensor* find_tensor(const std::string& name) const;
  // Throws FormatError naming the tensor when absent.
  const GgufTensor& tensor(const std::string& name) const;

 private:
  friend class GgufParser;
  explicit GgufFile(MappedFile file) : file_(std::move(file)) {}
  template <typename T>
  const T& typed(const std::string& key, GgufType type) const;

  MappedFile file_;
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t> tensor_index_;
  std::shared_ptr<const void> owner_;  // from_views: what the tensors point into
  std::string source_;                 // from_views: the checkpoint's path
};

}  // namespace specdec::model
