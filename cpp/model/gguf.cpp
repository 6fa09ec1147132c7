#include "model/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <string_view>
#include <type_traits>

#include "common/errors.h"
#include "common/utf8.h"

namespace specdec::model {

static_assert(std::endian::native == std::endian::little, "GGUF is little-endian");

namespace {

// Minimum encoded sizes, used to reject counts that cannot fit in the remaining bytes.
constexpr uint64_t kMinKvBytes = 8 + 1 + 4 + 1;           // key length, 1-byte key, type, u8
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 4 + 8;  // name, n_dims, type, offset
// Nested arrays deeper than this are rejected (bounds the recursion).
constexpr int kMaxArrayDepth = 8;
// All array elements of one file together; bounds memory (a value is ~40 bytes).
constexpr uint64_t kMaxArrayElements = uint64_t{1} << 23;

uint64_t min_value_bytes(GgufType type) {
  switch (type) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kBool: return 1;
    case GgufType::kUint16: case GgufType::kInt16: return 2;
    case GgufType::kUint32: case GgufType::kInt32: case GgufType::kFloat32: return 4;
    case GgufType::kUint64: case GgufType::kInt64: case GgufType::kFloat64: return 8;
    case GgufType::kString: return 8;      // length
    case GgufType::kArray: return 4 + 8;   // element type, count
  }
  return 1;
}

bool is_gguf_type(uint32_t id) { return id <= static_cast<uint32_t>(GgufType::kFloat64); }

std::string hex_byte(uint8_t b) {
  const char* digits = "0123456789abcdef";
  return {digits[b >> 4], digits[b & 15]};
}

std::string quoted(std::string_view text) {
  std::string out = "'";
  for (char c : text.substr(0, 80)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return out + (text.size() > 80 ? "...'" : "'");
}

}  // namespace

const char* gguf_type_name(GgufType type) {
  static constexpr const char* kNames[] = {"uint8", "int8",   "uint16", "int16", "uint32",
                                           "int32", "float32", "bool",  "string", "array",
                                           "uint64", "int64", "float64"};
  const auto id = static_cast<uint32_t>(type);
  return is_gguf_type(id) ? kNames[id] : "unknown";
}

// Reads one file front to back into a GgufFile; every read is bounds-checked.
class GgufParser {
 public:
  explicit GgufParser(GgufFile& file)
      : out_(file), data_(file.file_.data()), size_(file.file_.size()) {}

  void parse() {
    parse_header();
    for (uint64_t i = 0; i < num_kvs_; ++i) parse_kv(i);
    parse_alignment();
    const uint64_t num_tensors = checked_count(num_tensors_, kMinTensorInfoBytes, "tensor count",
                                               tensor_count_pos_);
    out_.tensors_.reserve(num_tensors);
    for (uint64_t i = 0; i < num_tensors; ++i) parse_tensor_info(i);
    place_tensors();
  }

 private:
  [[noreturn]] void fail(const std::string& message) const {
    throw FormatError(valid_utf8(str_cat("GGUF ", message, " (file ", out_.source(), ")")));
  }

  uint64_t left() const { return size_ - pos_; }

  void need(uint64_t num_bytes, std::string_view what) const {
    if (num_bytes > left()) {
      fail(str_cat(context_, ": unexpected end of file reading ", what, " at byte ", pos_,
                   " (needs ", num_bytes, " bytes, ", left(), " left)"));
    }
  }

  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T value;
    std::memcpy(&value, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  std::string read_string(std::string_view what) {
    const uint64_t at = pos_;
    const auto length = read<uint64_t>(str_cat(what, " length"));
    if (length > left()) {
      fail(str_cat(context_, ": ", what, " length ", length, " at byte ", at, " exceeds the ",
                   left(), " bytes left in the file"));
    }
    std::string text(reinterpret_cast<const char*>(data_ + pos_), length);
    // GGUF strings are UTF-8 (the format says so, and a Python str cannot hold anything else).
    if (const size_t bad = invalid_utf8_offset(text); bad != std::string_view::npos) {
      fail(str_cat(context_, ": ", what, " at byte ", at, " is not valid UTF-8 (byte 0x",
                   hex_byte(static_cast<uint8_t>(text[bad])), " at byte ", pos_ + bad, ")"));
    }
    pos_ += length;
    return text;
  }

  // A count of elements that each take at least `min_bytes`; rejects counts that cannot fit.
  uint64_t checked_count(uint64_t count, uint64_t min_bytes, std::string_view what,
                         uint64_t at) const {
    if (count > left() / min_bytes) {
      fail(str_cat(context_, ": ", what, " ", count, " at byte ", at, " cannot fit in the ",
                   left(), " bytes left (each needs at least ", min_bytes, ")"));
    }
    return count;
  }

  void parse_header() {
    context_ = "header";
    need(4, "magic");
    if (std::memcmp(data_, "GGUF", 4) != 0) {
      fail(str_cat("header: bad magic ", quoted({reinterpret_cast<const char*>(data_), 4}),
                   " at byte 0 (expected 'GGUF'; is this a GGUF file?)"));
    }
    pos_ = 4;
    const uint32_t version = read<uint32_t>("version");
    if (version != 2 && version != 3) {
      const bool swapped = (version & 0xffffu) == 0;
      fail(str_cat("header: version ", version, " at byte 4 is not supported (expected 2 or 3",
                   swapped ? "; the file is probably big-endian" : "", ")"));
    }
    out_.version_ = version;
    tensor_count_pos_ = pos_;
    num_tensors_ = read<uint64_t>("tensor count");
    checked_count(num_tensors_, kMinTensorInfoBytes, "tensor count", tensor_count_pos_);
    const uint64_t kv_count_pos = pos_;
    num_kvs_ = checked_count(read<uint64_t>("metadata count"), kMinKvBytes, "metadata count",
                             kv_count_pos);
  }

  void parse_kv(uint64_t index) {
    const uint64_t at = pos_;
    context_ = str_cat("metadata #", index);
    std::string key = read_string("key");
    if (key.empty()) fail(str_cat(context_, ": empty key at byte ", at));
    context_ = str_cat("metadata key ", quoted(key));
    if (out_.metadata_.count(key) != 0) fail(str_cat(context_, ": duplicate key at byte ", at));
    const uint64_t type_pos = pos_;
    const auto type = read<uint32_t>("value type");
    GgufValue value = read_value(type, type_pos, 0);
    out_.metadata_.emplace(std::move(key), std::move(value));
  }

  GgufValue read_value(uint32_t type, uint64_t type_pos, int depth) {
    if (!is_gguf_type(type)) {
      fail(str_cat(context_, ": value type id ", type, " at byte ", type_pos,
                   " is not a GGUF type (0..12)"));
    }
    switch (static_cast<GgufType>(type)) {
      case GgufType::kUint8: return GgufValue(read<uint8_t>("uint8"));
      case GgufType::kInt8: return GgufValue(read<int8_t>("int8"));
      case GgufType::kUint16: return GgufValue(read<uint16_t>("uint16"));
      case GgufType::kInt16: return GgufValue(read<int16_t>("int16"));
      case GgufType::kUint32: return GgufValue(read<uint32_t>("uint32"));
      case GgufType::kInt32: return GgufValue(read<int32_t>("int32"));
      case GgufType::kFloat32: return GgufValue(read<float>("float32"));
      case GgufType::kBool: return read_bool();
      case GgufType::kString: return GgufValue(read_string("string"));
      case GgufType::kArray: return GgufValue(read_array(depth));
      case GgufType::kUint64: return GgufValue(read<uint64_t>("uint64"));
      case GgufType::kInt64: return GgufValue(read<int64_t>("int64"));
      case GgufType::kFloat64: return GgufValue(read<double>("float64"));
    }
    return {};
  }

  GgufValue read_bool() {
    const uint64_t at = pos_;
    const auto byte = read<uint8_t>("bool");
    if (byte > 1) fail(str_cat(context_, ": bool value ", int{byte}, " at byte ", at));
    return GgufValue(byte == 1);
  }

  GgufArray read_array(int depth) {
    if (depth >= kMaxArrayDepth) {
      fail(str_cat(context_, ": arrays nested deeper than ", kMaxArrayDepth, " at byte ", pos_));
    }
    const uint64_t type_pos = pos_;
    const auto type = read<uint32_t>("array element type");
    if (!is_gguf_type(type)) {
      fail(str_cat(context_, ": array element type id ", type, " at byte ", type_pos,
                   " is not a GGUF type (0..12)"));
    }
    const uint64_t count_pos = pos_;
    const uint64_t count = checked_count(read<uint64_t>("array length"),
                                         min_value_bytes(static_cast<GgufType>(type)),
                                         "array length", count_pos);
    num_array_elements_ += count;
    if (num_array_elements_ > kMaxArrayElements) {
      fail(str_cat(context_, ": array length ", count, " at byte ", count_pos,
                   " takes the file's array elements past the limit of ", kMaxArrayElements));
    }
    GgufArray array;
    array.type = static_cast<GgufType>(type);
    array.values.reserve(count);
    for (uint64_t i = 0; i < count; ++i) array.values.push_back(read_value(type, type_pos, depth + 1));
    return array;
  }

  void parse_alignment() {
    context_ = "metadata key 'general.alignment'";
    const GgufValue* value = out_.find("general.alignment");
    if (value == nullptr) return;
    const uint32_t* alignment = value->get_if<uint32_t>();
    if (alignment == nullptr) {
      fail(str_cat(context_, ": expected uint32, found ", gguf_type_name(value->type())));
    }
    if (!std::has_single_bit(*alignment)) {
      fail(str_cat(context_, ": alignment ", *alignment, " is not a power of two"));
    }
    out_.alignment_ = *alignment;
  }

  void parse_tensor_info(uint64_t index) {
    const uint64_t at = pos_;
    context_ = str_cat("tensor #", index);
    GgufTensor tensor;
    tensor.name = read_string("name");
    if (tensor.name.empty() || tensor.name.size() >= kGgufMaxNameBytes) {
      fail(str_cat(context_, ": name length ", tensor.name.size(), " at byte ", at,
                   " is not in 1..", kGgufMaxNameBytes - 1));
    }
    context_ = str_cat("tensor ", quoted(tensor.name));
    if (out_.tensor_index_.count(tensor.name) != 0) {
      fail(str_cat(context_, ": duplicate tensor name at byte ", at));
    }
    read_dims(tensor);
    const uint64_t type_pos = pos_;
    const auto type = read<uint32_t>("type");
    const GgmlTypeInfo* info = ggml_type_info(type);
    if (info == nullptr) fail(str_cat(context_, ": unknown ggml type id ", type, " at byte ", type_pos));
    tensor.type = static_cast<GgmlType>(type);
    tensor.offset = read<uint64_t>("offset");
    tensor.size_bytes = tensor_bytes(tensor, *info, at);
    out_.tensor_index_.emplace(tensor.name, out_.tensors_.size());
    out_.tensors_.push_back(std::move(tensor));
  }

  void read_dims(GgufTensor& tensor) {
    const uint64_t dims_pos = pos_;
    const auto num_dims = read<uint32_t>("n_dims");
    if (num_dims > kGgufMaxDims) {
      fail(str_cat(context_, ": n_dims ", num_dims, " at byte ", dims_pos, " exceeds ", kGgufMaxDims));
    }
    int64_t num_elements = 1;
    for (uint32_t d = 0; d < num_dims; ++d) {
      const uint64_t at = pos_;
      const auto dim = read<int64_t>("dimension");
      if (dim <= 0) fail(str_cat(context_, ": dimension ", d, " is ", dim, " at byte ", at));
      if (__builtin_mul_overflow(num_elements, dim, &num_elements)) {
        fail(str_cat(context_, ": element count overflows int64 at dimension ", d, " (", dim,
                     ") at byte ", at));
      }
      tensor.dims.push_back(dim);
    }
    tensor.num_elements = num_elements;
  }

  uint64_t tensor_bytes(const GgufTensor& tensor, const GgmlTypeInfo& info, uint64_t at) const {
    const int64_t row = tensor.dims.empty() ? 1 : tensor.dims[0];
    if (row % info.block_size != 0) {
      fail(str_cat(context_, ": dimension 0 (", row, ") at byte ", at,
                   " is not a multiple of the block size ", info.block_size, " of ", info.name));
    }
    uint64_t bytes = static_cast<uint64_t>(tensor.num_elements / info.block_size);
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(info.type_size), &bytes)) {
      fail(str_cat(context_, ": byte size of ", tensor.num_elements, " ", info.name,
                   " elements overflows (info at byte ", at, ")"));
    }
    return bytes;
  }

  void place_tensors() {
    context_ = "data section";
    const uint64_t alignment = out_.alignment_;
    out_.data_offset_ = pos_;
    if (out_.tensors_.empty()) return;
    const uint64_t data_offset = (pos_ + alignment - 1) / alignment * alignment;
    if (data_offset > size_) {
      fail(str_cat(context_, ": starts at byte ", data_offset, " (tensor infos end at byte ", pos_,
                   "), past the end of the file (", size_, " bytes)"));
    }
    out_.data_offset_ = data_offset;
    const uint64_t data_bytes = size_ - data_offset;
    for (GgufTensor& tensor : out_.tensors_) {
      const std::string name = str_cat("tensor ", quoted(tensor.name));
      if (tensor.offset % alignment != 0) {
        fail(str_cat(name, ": offset ", tensor.offset, " is not a multiple of the alignment ",
                     alignment));
      }
      if (tensor.offset > data_bytes || tensor.size_bytes > data_bytes - tensor.offset) {
        fail(str_cat(name, ": ", tensor.size_bytes, " bytes at offset ", tensor.offset,
                     " of the data section (which starts at byte ", data_offset,
                     ") extend past the end of the file (", size_, " bytes)"));
      }
      tensor.data = data_ + data_offset + tensor.offset;
    }
    check_overlaps();
  }

  void check_overlaps() const {
    const auto& tensors = out_.tensors_;
    std::vector<size_t> order(tensors.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return tensors[a].offset < tensors[b].offset; });
    for (size_t i = 1; i < order.size(); ++i) {
      const GgufTensor& prev = tensors[order[i - 1]];
      const GgufTensor& cur = tensors[order[i]];
      if (prev.offset + prev.size_bytes > cur.offset) {
        fail(str_cat("tensor ", quoted(cur.name), ": offset ", cur.offset, " overlaps tensor ",
                     quoted(prev.name), " (offsets ", prev.offset, " to ",
                     prev.offset + prev.size_bytes, ")"));
      }
    }
  }

  GgufFile& out_;
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  std::string context_;
  uint64_t num_tensors_ = 0;
  uint64_t tensor_count_pos_ = 0;
  uint64_t num_kvs_ = 0;
  uint64_t num_array_elements_ = 0;
};

GgufFile GgufFile::open(const std::string& path) {
  GgufFile file(MappedFile::open(path));
  GgufParser(file).parse();
  return file;
}

GgufFile GgufFile::from_bytes(std::vector<uint8_t> bytes) {
  GgufFile file(MappedFile::from_bytes(std::move(bytes)));
  GgufParser(file).parse();
  return file;
}

GgufFile GgufFile::from_views(GgufFile metadata, std::vector<GgufTensor> tensors,
                              std::shared_ptr<const void> owner, std::string source) {
  GgufFile file = std::move(metadata);
  file.source_ = std::move(source);
  file.owner_ = std::move(owner);
  for (auto& t : tensors) {
    if (!file.tensor_index_.emplace(t.name, file.tensors_.size()).second) {
      throw FormatError(str_cat("tensor ", quoted(t.name), " appears twice (file ", file.source(), ")"));
    }
    file.tensors_.push_back(std::move(t));
  }
  return file;
}

const GgufValue* GgufFile::find(const std::string& key) const {
  const auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

template <typename T>
const T& GgufFile::typed(const std::string& key, GgufType type) const {
  const GgufValue* value = find(key);
  if (value == nullptr) {
    throw FormatError(
        str_cat("GGUF metadata key ", quoted(key), " is missing (file ", source(), ")"));
  }
  const T* typed_value = value->get_if<T>();
  if (typed_value == nullptr) {
    throw FormatError(str_cat("GGUF metadata key ", quoted(key), ": expected ",
                              gguf_type_name(type), ", found ", gguf_type_name(value->type()),
                              " (file ", source(), ")"));
  }
  return *typed_value;
}

uint32_t GgufFile::get_u32(const std::string& key) const {
  return typed<uint32_t>(key, GgufType::kUint32);
}
int32_t GgufFile::get_i32(const std::string& key) const {
  return typed<int32_t>(key, GgufType::kInt32);
}
uint64_t GgufFile::get_u64(const std::string& key) const {
  return typed<uint64_t>(key, GgufType::kUint64);
}
int64_t GgufFile::get_i64(const std::string& key) const {
  return typed<int64_t>(key, GgufType::kInt64);
}
float GgufFile::get_f32(const std::string& key) const {
  return typed<float>(key, GgufType::kFloat32);
}
double GgufFile::get_f64(const std::string& key) const {
  return typed<double>(key, GgufType::kFloat64);
}
bool GgufFile::get_bool(const std::string& key) const { return typed<bool>(key, GgufType::kBool); }
const std::string& GgufFile::get_string(const std::string& key) const {
  return typed<std::string>(key, GgufType::kString);
}
const GgufArray& GgufFile::get_array(const std::string& key) const {
  return typed<GgufArray>(key, GgufType::kArray);
}

int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue* value = find(key);
  if (value != nullptr) {
    if (const auto* u64 = value->get_if<uint64_t>()) {
      if (*u64 <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return static_cast<int64_t>(*u64);
      }
    } else if (value->type() != GgufType::kBool) {
      const auto as_int = [](const auto& v) -> std::optional<int64_t> {
        if constexpr (std::is_integral_v<std::decay_t<decltype(v)>>) return int64_t(v);
        return std::nullopt;
      };
      if (auto result = std::visit(as_int, value->variant())) return *result;
    }
  }
  return typed<int64_t>(key, GgufType::kInt64);  // throws the missing / wrong-type error
}

std::vector<std::string> GgufFile::get_string_array(const std::string& key) const {
  const GgufArray& array = get_array(key);
  if (array.type != GgufType::kString) {
    throw FormatError(str_cat("GGUF metadata key ", quoted(key),
                              ": expected an array of string, found an array of ",
                              gguf_type_name(array.type), " (file ", source(), ")"));
  }
  std::vector<std::string> out;
  out.reserve(array.values.size());
  for (const GgufValue& value : array.values) out.push_back(*value.get_if<std::string>());
  return out;
}

const GgufTensor* GgufFile::find_tensor(const std::string& name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensor& GgufFile::tensor(const std::string& name) const {
  const GgufTensor* tensor = find_tensor(name);
  if (tensor == nullptr) {
    throw FormatError(str_cat("GGUF tensor ", quoted(name), " is missing (file ", source(), ")"));
  }
  return *tensor;
}

}  // namespace specdec::model
