// A weight matrix on the device, kept in its block format (repacked into the 16-row interleaved
// layout of quant/layout.h; never dequantized).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/ggml_type.h"
#include "device/arena.h"
#include "device/device.h"
#include "quant/layout.h"

namespace specdec::quant {

struct DeviceWeight {
  std::string name;
  DeviceLayout layout;  // type, rows (out_features), cols (in_features), planes
  device::Buffer buffer;  // layout.total_bytes (kModel, kReadOnly)

  GgmlType type() const { return layout.type; }
  int64_t rows() const { return layout.rows; }
  int64_t cols() const { return layout.cols; }
  // Bytes of the matrix in its ggml format (what a GGUF file stores).
  int64_t source_bytes() const;
  // The matrix read back in ggml's row-major block format (tests, debugging).
  std::vector<uint8_t> download(device::Device& dev) const;
};

// A weight's bytes in its ggml format, as a GGUF file stores them (not owned): what the uploads
// take, so that quant needs nothing of the model layer (runner::weight_bytes makes one from a
// model::GgufTensor).
struct WeightBytes {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> dims;  // ne[0] first (innermost, contiguous)
  const uint8_t* data = nullptr;
  size_t size_bytes = 0;
};

// Uploads a weight: dims [ne0 = cols, ne1 = rows, ...] (further dims multiply the rows; a
// 1-D tensor is one row). UnsupportedError for unsupported types (naming the tensor),
// ConfigError for shapes the type cannot hold. With an arena, the device buffer is carved out of
// it (a model's small matrices then share huge pages, device::Arena).
DeviceWeight upload_weight(device::Device& dev, const WeightBytes& weight,
                           device::Arena* arena = nullptr);
// The same from raw ggml bytes (`size_bytes` must match the dims exactly).
DeviceWeight upload_weight(device::Device& dev, GgmlType type, const uint8_t* data, size_t size_bytes,
                           const std::vector<int64_t>& dims, const std::string& name = "",
                           device::Arena* arena = nullptr);

// Several matrices of one type and one cols stacked by rows into one device matrix, so that one
// matmul launch computes them all (q/k/v or gate/up projections of a layer: on PoCL every launch
// costs ~10 µs, as much as a small matrix's data). Rows of part i follow those of parts < i; each
// output element is bitwise the same as with the part alone. ConfigError when types or cols differ.
DeviceWeight upload_weight_stacked(device::Device& dev, const std::vector<WeightBytes>& parts,
                                   const std::string& name, device::Arena* arena = nullptr);

}  // namespace specdec::quant
