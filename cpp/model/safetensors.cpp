#include "model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "common/errors.h"
#include "common/json.h"
#include "common/utf8.h"

namespace specdec::model {
namespace {

using Json = nlohmann::json;

constexpr uint64_t kLengthPrefixBytes = 8;
constexpr size_t kMaxQuotedChars = 64;
constexpr const char* kMetadataKey = "__metadata__";

struct DTypeInfo {
  std::string_view name;
  SafetensorsDType dtype;
  size_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {"BOOL", SafetensorsDType::kBool, 1},      {"U8", SafetensorsDType::kU8, 1},
    {"I8", SafetensorsDType::kI8, 1},          {"F8_E4M3", SafetensorsDType::kF8E4M3, 1},
    {"F8_E5M2", SafetensorsDType::kF8E5M2, 1}, {"U16", SafetensorsDType::kU16, 2},
    {"I16", SafetensorsDType::kI16, 2},        {"F16", SafetensorsDType::kF16, 2},
    {"BF16", SafetensorsDType::kBF16, 2},      {"U32", SafetensorsDType::kU32, 4},
    {"I32", SafetensorsDType::kI32, 4},        {"F32", SafetensorsDType::kF32, 4},
    {"U64", SafetensorsDType::kU64, 8},        {"I64", SafetensorsDType::kI64, 8},
    {"F64", SafetensorsDType::kF64, 8},
};

const DTypeInfo& dtype_info(SafetensorsDType dtype) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.dtype == dtype) return info;
  }
  throw UnsupportedError("unknown SafetensorsDType value");  // unreachable for valid enums
}

// `text` in double quotes, cut to kMaxQuotedChars so hostile names cannot bloat messages.
std::string cut_quoted(std::string_view text) {
  if (text.size() <= kMaxQuotedChars) return valid_utf8(str_cat('"', text, '"'));
  return valid_utf8(
      str_cat('"', text.substr(0, kMaxQuotedChars), "\"... (", text.size(), " bytes)"));
}

// A JSON value as text, cut like cut_quoted().
std::string short_dump(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() <= kMaxQuotedChars) return text;
  return valid_utf8(str_cat(text.substr(0, kMaxQuotedChars), "... (", text.size(), " bytes)"));
}

// Prefixes messages with the file and, when given, the tensor.
class Reporter {
 public:
  explicit Reporter(std::string source) : source_(std::move(source)) {}
  Reporter for_tensor(const std::string& name) const {
    Reporter r(source_);
    r.context_ = str_cat("tensor ", cut_quoted(name), ": ");
    return r;
  }
  [[noreturn]] void fail(const std::string& message) const {
    throw FormatError(valid_utf8(str_cat("safetensors file ", source_, ": ", context_, message)));
  }
  [[noreturn]] void fail_field(const char* field, const Json& value,
                               const std::string& expected) const {
    fail(str_cat(field, " = ", short_dump(value), ": expected ", expected));
  }

 private:
  std::string source_;
  std::string context_;
};

uint64_t read_le_u64(const uint8_t* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

SafetensorsDType parse_dtype(const Json& value, const Reporter& reporter) {
  if (value.is_string()) {
    const std::string& name = value.get_ref<const std::string&>();
    for (const DTypeInfo& info : kDTypes) {
      if (info.name == name) return info.dtype;
    }
  }
  reporter.fail_field("dtype", value,
                      "one of BOOL, U8, I8, F8_E4M3, F8_E5M2, U16, I16, F16, BF16, U32, I32, "
                      "F32, U64, I64, F64");
}

std::vector<uint64_t> parse_shape(const Json& value, const Reporter& reporter) {
  if (!value.is_array() || value.size() > SafetensorsFile::kMaxRank) {
    reporter.fail_field(
        "shape", value,
        str_cat("a list of at most ", SafetensorsFile::kMaxRank, " non-negative integers"));
  }
  std::vector<uint64_t> shape;
  for (const Json& dim : value) {
    if (!dim.is_number_unsigned()) {
      reporter.fail_field("shape", value, "non-negative integer dimensions");
    }
    shape.push_back(dim.get<uint64_t>());
  }
  return shape;
}

std::array<uint64_t, 2> parse_offsets(const Json& value, uint64_t data_size_bytes,
                                      const Reporter& reporter) {
  if (!value.is_array() || value.size() != 2 || !value[0].is_number_unsigned() ||
      !value[1].is_number_unsigned()) {
    reporter.fail_field("data_offsets", value, "[begin, end] with non-negative integers");
  }
  const std::array<uint64_t, 2> offsets = {value[0].get<uint64_t>(), value[1].get<uint64_t>()};
  if (offsets[0] > offsets[1]) reporter.fail_field("data_offsets", value, "begin <= end");
  if (offsets[1] > data_size_bytes) {
    reporter.fail_field(
        "data_offsets", value,
        str_cat("end <= data section size ", data_size_bytes, " (file truncated?)"));
  }
  return offsets;
}

// Element count and byte size of a shape, or a FormatError on overflow.
std::pair<uint64_t, uint64_t> count_bytes(const std::vector<uint64_t>& shape, size_t elem_bytes,
                                          const Reporter& reporter) {
  uint64_t count = 1;
  for (uint64_t dim : shape) {
    if (__builtin_mul_overflow(count, dim, &count)) {
      reporter.fail("shape element count overflows 64 bits");
    }
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(count, static_cast<uint64_t>(elem_bytes), &bytes)) {
    reporter.fail(str_cat("shape byte size overflows 64 bits (", count, " elements)"));
  }
  return {count, bytes};
}

SafetensorsTensor parse_tensor(const std::string& name, const Json& entry, const uint8_t* data,
                               uint64_t data_size_bytes, const Reporter& file_reporter) {
  const Reporter reporter = file_reporter.for_tensor(name);
  static const std::set<std::string> kFields = {"dtype", "shape", "data_offsets"};
  if (!entry.is_object()) {
    reporter.fail_field("entry", entry, "an object with dtype, shape and data_offsets");
  }
  for (const auto& [key, unused] : entry.items()) {
    if (!kFields.count(key)) reporter.fail(str_cat("unexpected field ", cut_quoted(key)));
  }
  for (const std::string& field : kFields) {
    if (!entry.contains(field)) reporter.fail(str_cat("missing field ", cut_quoted(field)));
  }
  SafetensorsTensor tensor;
  tensor.name = name;
  tensor.dtype = parse_dtype(entry["dtype"], reporter);
  tensor.shape = parse_shape(entry["shape"], reporter);
  tensor.data_offsets = parse_offsets(entry["data_offsets"], data_size_bytes, reporter);
  const size_t elem_bytes = safetensors_dtype_size(tensor.dtype);
  const auto [count, bytes] = count_bytes(tensor.shape, elem_bytes, reporter);
  tensor.num_elements = count;
  tensor.size_bytes = tensor.data_offsets[1] - tensor.data_offsets[0];
  if (bytes != tensor.size_bytes) {
    reporter.fail_field("data_offsets", entry["data_offsets"],
                        str_cat(bytes, " bytes for shape ", short_dump(entry["shape"]), " of ",
                                safetensors_dtype_name(tensor.dtype), ", got ", tensor.size_bytes));
  }
  tensor.data = data + tensor.data_offsets[0];
  return tensor;
}

std::map<std::string, std::string> parse_metadata(const Json& value, const Reporter& reporter) {
  if (!value.is_object()) reporter.fail_field(kMetadataKey, value, "an object of strings");
  std::map<std::string, std::string> metadata;
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) {
      reporter.fail(str_cat(kMetadataKey, " entry ", cut_quoted(key), " = ", short_dump(item),
                            ": expected a string"));
    }
    metadata.emplace(key, item.get<std::string>());
  }
  return metadata;
}

// Non-empty tensors must not share bytes; gaps between tensors are allowed.
void check_no_overlap(const std::vector<SafetensorsTensor>& tensors, const Reporter& reporter) {
  std::vector<const SafetensorsTensor*> order;
  for (const SafetensorsTensor& t : tensors) {
    if (t.size_bytes > 0) order.push_back(&t);
  }
  std::sort(order.begin(), order.end(),
            [](const auto* a, const auto* b) { return a->data_offsets[0] < b->data_offsets[0]; });
  for (size_t i = 1; i < order.size(); ++i) {
    const SafetensorsTensor& prev = *order[i - 1];
    const SafetensorsTensor& next = *order[i];
    if (next.data_offsets[0] < prev.data_offsets[1]) {
      reporter.fail(str_cat("tensors ", cut_quoted(prev.name), " [", prev.data_offsets[0], ", ",
                            prev.data_offsets[1], ") and ", cut_quoted(next.name), " [",
                            next.data_offsets[0], ", ", next.data_offsets[1], ") overlap"));
    }
  }
}

// The header's members are streamed (JsonBuilder): each tensor entry is checked as soon as it
// ends and only the tensors are kept, in time linear in the header and memory linear in its
// tensors, never a tree of the whole header.
void read_header(const MappedFile& file, uint64_t header_size_bytes, const Reporter& reporter,
                 std::vector<SafetensorsTensor>& tensors,
                 std::map<std::string, std::string>& metadata) {
  const uint8_t* header_begin = file.data() + kLengthPrefixBytes;
  const uint8_t* data = header_begin + header_size_bytes;
  const uint64_t data_size_bytes = file.size() - kLengthPrefixBytes - header_size_bytes;
  bool in_member = false;  // a FormatError thrown while true is already a full message
  bool has_metadata = false;
  const auto on_member = [&](std::string& name, Json& entry) {
    in_member = true;
    if (name == kMetadataKey) {
      if (has_metadata)
        reporter.fail(str_cat("duplicate key ", cut_quoted(name), " in header JSON"));
      has_metadata = true;
      metadata = parse_metadata(entry, reporter);
    } else {
      if (tensors.size() >= SafetensorsFile::kMaxTensors) {
        reporter.fail(str_cat("header holds more than ", SafetensorsFile::kMaxTensors,
                              " tensors; split the checkpoint into several files"));
      }
      tensors.push_back(parse_tensor(name, entry, data, data_size_bytes, reporter));
    }
    in_member = false;
  };
  JsonLimits limits;
  limits.max_depth = static_cast<int>(SafetensorsFile::kMaxJsonDepth);
  limits.max_values = SafetensorsFile::kMaxJsonValues;
  limits.unique_keys = true;
  JsonBuilder builder(limits, on_member);
  try {
    Json::sax_parse(header_begin, data, &builder);
  } catch (const Json::parse_error& e) {
    reporter.fail(str_cat("header is not valid JSON (file byte ", kLengthPrefixBytes + e.byte,
                          "): ", e.what()));
  } catch (const Json::exception& e) {
    reporter.fail(str_cat("header is not valid JSON: ", e.what()));
  } catch (const FormatError& e) {
    if (in_member) throw;
    reporter.fail(str_cat("header JSON ", e.what()));
  }
  const Json& header = builder.result();
  if (!header.is_object()) reporter.fail_field("header", header, "a JSON object");
}

}  // namespace

size_t safetensors_dtype_size(SafetensorsDType dtype) { return dtype_info(dtype).size; }

std::string_view safetensors_dtype_name(SafetensorsDType dtype) { return dtype_info(dtype).name; }

DType SafetensorsTensor::engine_dtype() const {
  switch (dtype) {
    case SafetensorsDType::kF32:
      return DType::kF32;
    case SafetensorsDType::kF16:
      return DType::kF16;
    case SafetensorsDType::kBF16:
      return DType::kBF16;
    case SafetensorsDType::kI8:
      return DType::kI8;
    default:
      throw UnsupportedError(str_cat("safetensors tensor ", cut_quoted(name), " has dtype ",
                                     safetensors_dtype_name(dtype),
                                     "; the engine supports F32, F16, BF16 and I8"));
  }
}

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  return SafetensorsFile(MappedFile::open(path));
}

SafetensorsFile SafetensorsFile::from_bytes(std::vector<uint8_t> bytes) {
  return SafetensorsFile(MappedFile::from_bytes(std::move(bytes)));
}

SafetensorsFile::SafetensorsFile(MappedFile file) : file_(std::move(file)) { parse(); }

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  const auto it =
      std::lower_bound(tensors_.begin(), tensors_.end(), name,
                       [](const SafetensorsTensor& t, const std::string& n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

const SafetensorsTensor& SafetensorsFile::tensor(const std::string& name) const {
  const SafetensorsTensor* t = find(name);
  if (t == nullptr) {
    throw FormatError(str_cat("safetensors file ", source(), " has no tensor ", cut_quoted(name),
                              " (", tensors_.size(), " tensors)"));
  }
  return *t;
}

void SafetensorsFile::parse() {
  const Reporter reporter(file_.source());
  const uint64_t size = file_.size();
  if (size < kLengthPrefixBytes) {
    reporter.fail(str_cat("file is ", size, " bytes, shorter than the 8-byte header length"));
  }
  header_size_bytes_ = read_le_u64(file_.data());
  if (header_size_bytes_ > kMaxHeaderBytes || header_size_bytes_ > size - kLengthPrefixBytes) {
    reporter.fail(
        str_cat("header length ", header_size_bytes_, " exceeds ",
                header_size_bytes_ > kMaxHeaderBytes ? "the cap " : "the file size ",
                header_size_bytes_ > kMaxHeaderBytes ? kMaxHeaderBytes : size - kLengthPrefixBytes,
                " (file truncated or not safetensors?)"));
  }
  read_header(file_, header_size_bytes_, reporter, tensors_, metadata_);
  // Name order, as the DOM's std::map gave it; a name twice is refused (a DOM keeps the last).
  std::sort(tensors_.begin(), tensors_.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) { return a.name < b.name; });
  for (size_t i = 1; i < tensors_.size(); ++i) {
    if (tensors_[i].name == tensors_[i - 1].name) {
      reporter.fail(str_cat("duplicate key ", cut_quoted(tensors_[i].name), " in header JSON"));
    }
  }
  check_no_overlap(tensors_, reporter);
}

}  // namespace specdec::model
