// The device layout of weight matrices: ggml blocks repacked so that 16 rows are interleaved
// ("lanes = rows"), split into planes (one per block field). No value is dequantized: every
// plane holds the stored bits, only moved (Q5_0's fifth bits and the K-quants' 6-bit scales are
// re-arranged, losslessly). The kernels in kernels/quant_matmul_*.cl and quant_embedding.cl
// index exactly these layouts; docs/quant.md draws them.
//
// A matrix has `rows` (out_features, GGUF ne1) rows of `cols` (in_features, ne0) elements. Rows
// are grouped by kRowsPerGroup; the last group is padded with zero rows. A "record" is the part
// of one plane that belongs to one (group, block): records of a plane are stored in the order
// group-major, block-minor, so record index = g * blocks_per_row + b.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "quant/formats.h"

namespace specdec::quant {

inline constexpr int kRowsPerGroup = 16;
inline constexpr int64_t kPlaneAlignment = 64;  // bytes; one AVX-512 vector

struct Plane {
  std::string name;          // "qs", "d", ...
  int64_t offset = 0;        // bytes from the start of the buffer (multiple of kPlaneAlignment)
  int64_t record_bytes = 0;  // bytes of one (group, block) record
};

struct DeviceLayout {
  GgmlType type = GgmlType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t groups = 0;          // ceil(rows / kRowsPerGroup)
  int64_t blocks_per_row = 0;  // cols / block size (F32/F16/BF16: cols, one element per block)
  std::vector<Plane> planes;
  int64_t total_bytes = 0;

  const Plane& plane(const std::string& name) const;
};

// The layout of a rows x cols matrix of `type`: ConfigError for non-positive shapes or cols
// that are not a multiple of the block size, UnsupportedError for unsupported types.
DeviceLayout device_layout(GgmlType type, int64_t rows, int64_t cols);

// ggml row-major blocks (rows * row_bytes(type, cols) bytes at src) -> the device layout.
std::vector<uint8_t> repack(const DeviceLayout& layout, const uint8_t* src);
// The same into dst (layout.total_bytes, zeroed beforehand: the padding is left as it is), e.g.
// straight into a fresh kModel buffer of the native device, which comes zeroed.
void repack_into(const DeviceLayout& layout, const uint8_t* src, uint8_t* dst);
// The inverse: the device layout -> ggml row-major blocks (tests; reading weights back).
std::vector<uint8_t> unpack(const DeviceLayout& layout, const uint8_t* packed);
// Row r alone: row_bytes(type, cols) ggml bytes to dst (an embedding row; ConfigError for r out
// of [0, rows)).
void unpack_row(const DeviceLayout& layout, const uint8_t* packed, int64_t r, uint8_t* dst);

}  // namespace specdec::quant
