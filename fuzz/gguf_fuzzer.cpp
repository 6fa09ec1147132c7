// libFuzzer target for GgufFile::from_bytes. A malformed input must throw FormatError (with a
// valid UTF-8 message); anything else (another exception, a crash, a sanitizer report, a leak,
// an allocation past -malloc_limit_mb, a broken invariant below) is a finding. On success every
// metadata value, typed getter and tensor info is read back and checked against the file.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "common/errors.h"
#include "fuzz_check.h"
#include "model/gguf.h"

namespace specdec::fuzz {
namespace {

using model::GgufArray;
using model::GgufFile;
using model::GgufTensor;
using model::GgufType;
using model::GgufValue;

uint64_t touch_value(const GgufValue& value) {
  check(model::gguf_type_name(value.type()) != std::string_view("unknown"), "value type");
  return std::visit(
      [](const auto& v) -> uint64_t {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          uint64_t sum = v.size();
          for (char c : v) sum += static_cast<uint8_t>(c);
          return sum;
        } else if constexpr (std::is_same_v<T, GgufArray>) {
          uint64_t sum = v.values.size();
          for (const GgufValue& item : v.values) {
            check(item.type() == v.type, "array element type differs from the array's type");
            sum += touch_value(item);
          }
          return sum;
        } else if constexpr (std::is_same_v<T, float>) {
          return std::bit_cast<uint32_t>(v);
        } else if constexpr (std::is_same_v<T, double>) {
          return std::bit_cast<uint64_t>(v);
        } else {
          return static_cast<uint64_t>(v);
        }
      },
      value.variant());
}

// Typed getters agree with the value's type; the wrong ones throw FormatError.
void touch_getters(const GgufFile& file, const std::string& key, const GgufValue& value) {
  check(file.find(key) == &value, "find() returns another value");
  try {
    consume(static_cast<uint64_t>(file.get_int(key)));
  } catch (const FormatError& e) {
    check_error(e);
  }
  try {
    for (const std::string& text : file.get_string_array(key)) consume(text.size());
    check(value.get_if<GgufArray>()->type == GgufType::kString, "string array of another type");
  } catch (const FormatError& e) {
    check_error(e);
  }
  if (value.type() == GgufType::kString) consume(file.get_string(key).size());
  if (value.type() == GgufType::kUint32) consume(file.get_u32(key));
  if (value.type() == GgufType::kBool) consume(file.get_bool(key));
}

void touch_tensor(const GgufFile& file, const GgufTensor& tensor) {
  check(file.find_tensor(tensor.name) == &tensor, "find_tensor() returns another tensor");
  const model::GgmlTypeInfo* info = model::ggml_type_info(static_cast<uint32_t>(tensor.type));
  check(info != nullptr, "tensor of an unknown ggml type");
  int64_t num_elements = 1;
  for (int64_t dim : tensor.dims) {
    check(dim > 0, "non-positive dimension");
    num_elements *= dim;
  }
  check(num_elements == tensor.num_elements, "num_elements is not the product of dims");
  check(
      tensor.size_bytes == static_cast<uint64_t>(num_elements / info->block_size * info->type_size),
      "size_bytes does not match the type layout");
  check(tensor.offset % file.alignment() == 0, "misaligned tensor offset");
  check(file.data_offset() <= file.file_size() &&
            tensor.offset <= file.file_size() - file.data_offset() &&
            tensor.size_bytes <= file.file_size() - file.data_offset() - tensor.offset,
        "tensor extends past the end of the file");
  consume(tensor.offset + tensor.size_bytes);
  if (tensor.size_bytes > 0) consume(tensor.data[0] + tensor.data[tensor.size_bytes - 1]);
}

}  // namespace
}  // namespace specdec::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace specdec;
  try {
    const auto file = model::GgufFile::from_bytes(std::vector<uint8_t>(data, data + size));
    fuzz::check(file.version() == 2 || file.version() == 3, "version");
    fuzz::check(std::has_single_bit(file.alignment()), "alignment");
    for (const auto& [key, value] : file.metadata()) {
      fuzz::consume(fuzz::touch_value(value));
      fuzz::touch_getters(file, key, value);
    }
    for (const model::GgufTensor& tensor : file.tensors()) fuzz::touch_tensor(file, tensor);
  } catch (const FormatError& e) {
    fuzz::check_error(e);
  }
  return 0;
}
