// libFuzzer target for SafetensorsFile::from_bytes. A malformed input must throw FormatError (with
// a valid UTF-8 message); anything else (another exception, a crash, a sanitizer report, a leak,
// an allocation past -malloc_limit_mb, a broken invariant below) is a finding. On success every
// tensor and metadata entry is read back and checked against the file.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/errors.h"
#include "fuzz_check.h"
#include "model/safetensors.h"

namespace specdec::fuzz {
namespace {

using model::SafetensorsFile;
using model::SafetensorsTensor;

void touch_tensor(const SafetensorsFile& file, const SafetensorsTensor& tensor) {
  check(file.contains(tensor.name) && &file.tensor(tensor.name) == &tensor,
        "tensor() returns another tensor");
  check(is_valid_utf8(tensor.name), "tensor name is not valid UTF-8");
  check(tensor.shape.size() <= SafetensorsFile::kMaxRank, "rank");
  uint64_t num_elements = 1;
  for (uint64_t dim : tensor.shape) num_elements *= dim;
  check(num_elements == tensor.num_elements, "num_elements is not the product of shape");
  check(tensor.size_bytes == num_elements * model::safetensors_dtype_size(tensor.dtype),
        "size_bytes does not match shape and dtype");
  const uint64_t data_size_bytes = file.file_size() - 8 - file.header_size_bytes();
  check(tensor.data_offsets[0] <= tensor.data_offsets[1] &&
            tensor.data_offsets[1] <= data_size_bytes &&
            tensor.data_offsets[1] - tensor.data_offsets[0] == tensor.size_bytes,
        "data_offsets outside the data section");
  consume(model::safetensors_dtype_name(tensor.dtype).size());
  if (tensor.size_bytes > 0) consume(tensor.data[0] + tensor.data[tensor.size_bytes - 1]);
  try {
    consume(dtype_name(tensor.engine_dtype()).size());
  } catch (const UnsupportedError& e) {
    check_error(e);
  }
}

}  // namespace
}  // namespace specdec::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace specdec;
  try {
    const auto file = model::SafetensorsFile::from_bytes(std::vector<uint8_t>(data, data + size));
    fuzz::check(file.header_size_bytes() <= file.file_size() - 8, "header size");
    for (const model::SafetensorsTensor& tensor : file.tensors()) fuzz::touch_tensor(file, tensor);
    for (const auto& [key, value] : file.metadata()) {
      fuzz::check(fuzz::is_valid_utf8(key) && fuzz::is_valid_utf8(value), "metadata UTF-8");
      fuzz::consume(key.size() + value.size());
    }
    if (!file.contains("no such tensor")) {
      try {
        file.tensor("no such tensor");
        fuzz::check(false, "tensor() found a name that is not in the file");
      } catch (const FormatError& e) {
        fuzz::check_error(e);
      }
    }
  } catch (const FormatError& e) {
    fuzz::check_error(e);
  }
  return 0;
}
