#include "cpu/embedding.h"

#include <algorithm>
#include <vector>

#include "quant/dequantize.h"
#include "quant/formats.h"
#include "cpu/strict_fp.h"

namespace specdec::cpu {

void embedding(const PackedWeight& w, const int32_t* ids, int64_t t0, int64_t t1, float* out, float scale) {
  const quant::DeviceLayout& layout = *w.layout;
  const int64_t cols = layout.cols;
  std::vector<uint8_t> row(static_cast<size_t>(quant::row_bytes(layout.type, cols)));
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t r = std::clamp<int64_t>(ids[t], 0, layout.rows - 1);
    quant::unpack_row(layout, w.data, r, row.data());
    float* o = out + t * cols;
    quant::dequantize_row(layout.type, row.data(), o, cols);
    if (scale != 1.0f) {
      for (int64_t i = 0; i < cols; ++i) o[i] = o[i] * scale;
    }
  }
}

}  // namespace specdec::cpu
