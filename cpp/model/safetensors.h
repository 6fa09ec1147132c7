// Hardened reader for safetensors files (https://github.com/huggingface/safetensors).
//
// Layout: u64 little-endian header length N, N bytes of UTF-8 JSON, then the data section.
// The JSON object maps tensor name -> {"dtype", "shape", "data_offsets": [begin, end]}
// (offsets relative to the data section) plus an optional "__metadata__" string -> string map.
//
// Model files are untrusted: every check below runs before any tensor byte is touched, and
// every failure is a FormatError naming the file, the tensor and the offending value.
//   - file >= 8 bytes; N <= kMaxHeaderBytes and N <= file size - 8 (checked before parsing)
//   - header is valid UTF-8 JSON, an object, nested at most kMaxJsonDepth levels, and has no
//     duplicate keys at any level; it is read entry by entry (each entry's tree at most
//     kMaxJsonValues parse events, at most kMaxTensors tensors), in time linear in its size
//   - each entry is an object with exactly dtype (a known string), shape (at most
//     kMaxRank non-negative integers) and data_offsets (two non-negative integers)
//   - begin <= end <= data section size; element count x dtype size (overflow-checked)
//     equals end - begin; no two non-empty tensors overlap (gaps are allowed)
//   - "__metadata__", if present, is an object whose values are all strings
// All safetensors dtypes are parsed and reported (SafetensorsDType); the engine computes in
// F32/F16/BF16/I8 only, and SafetensorsTensor::engine_dtype() throws UnsupportedError, naming
// the tensor and dtype, for anything else. Unknown dtype strings are a FormatError.
// Tensor data pointers are not necessarily aligned (N need not be a multiple of 8).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/dtype.h"
#include "model/mapped_file.h"

namespace specdec::model {

enum class SafetensorsDType {
  kBool,
  kU8,
  kI8,
  kF8E4M3,
  kF8E5M2,
  kU16,
  kI16,
  kF16,
  kBF16,
  kU32,
  kI32,
  kF32,
  kU64,
  kI64,
  kF64,
};

// Bytes per element.
size_t safetensors_dtype_size(SafetensorsDType dtype);
// The file's spelling: "F32", "BF16", "F8_E4M3", "BOOL", ...
std::string_view safetensors_dtype_name(SafetensorsDType dtype);

struct SafetensorsTensor {
  std::string name;
  SafetensorsDType dtype;
  std::vector<uint64_t> shape;           // [] for a scalar
  std::array<uint64_t, 2> data_offsets;  // [begin, end) relative to the data section
  uint64_t num_elements;                 // product of shape (1 for a scalar)
  uint64_t size_bytes;                   // data_offsets[1] - data_offsets[0]
  const uint8_t* data;                   // [size_bytes], possibly unaligned

  // The engine dtype; throws UnsupportedError naming the tensor unless F32, F16, BF16 or I8.
  DType engine_dtype() const;
};

class SafetensorsFile {
 public:
  static constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // 100 MiB, as upstream
  static constexpr size_t kMaxRank = 8;
  static constexpr size_t kMaxJsonDepth = 8;
  // Parse events (values, keys, object/array starts and ends) of one header entry (a tensor
  // takes ~16, __metadata__ two per string): the header is streamed entry by entry, and this
  // bounds the tree of the one entry held at a time.
  static constexpr uint64_t kMaxJsonValues = 1u << 20;
  // Tensors in one file (each kept costs ~200 bytes): real checkpoints hold a few thousand.
  static constexpr size_t kMaxTensors = size_t{1} << 20;

  // Maps and validates `path`. Throws ConfigError if it cannot be opened, FormatError if
  // it is malformed.
  static SafetensorsFile open(const std::string& path);
  // Validates an in-memory file (tests). Throws FormatError if it is malformed.
  static SafetensorsFile from_bytes(std::vector<uint8_t> bytes);

  // Tensors sorted by name (as a JSON object orders its keys).
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  // Throws FormatError naming `name` if there is no such tensor.
  const SafetensorsTensor& tensor(const std::string& name) const;
  bool contains(const std::string& name) const { return find(name) != nullptr; }
  // The tensor called `name`, or nullptr (a binary search of tensors()).
  const SafetensorsTensor* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  uint64_t file_size() const { return file_.size(); }
  uint64_t header_size_bytes() const { return header_size_bytes_; }
  const std::string& source() const { return file_.source(); }

 private:
  explicit SafetensorsFile(MappedFile file);
  void parse();

  MappedFile file_;
  uint64_t header_size_bytes_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace specdec::model
