// The quantized matmul, activation quantisation and embedding lookup: the checks, then the
// device's implementation (OpenCL: quant/ocl_matmul.cpp).
#include "quant/matmul.h"

#include <limits>

#include "common/errors.h"
#include "quant/impl.h"

namespace specdec::quant {

Family family(GgmlType type) {
  switch (type) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return Family::kFloat;
    case GgmlType::kQ2_K:
    case GgmlType::kQ3_K:
    case GgmlType::kQ4_K:
    case GgmlType::kQ5_K:
    case GgmlType::kQ6_K:
      return Family::kK;
    default:
      return Family::kQ32;
  }
}

namespace {

void check_scale_block(int scale_block) {
  SPECDEC_CHECK(scale_block == 32 || scale_block == 256, "scale_block", scale_block,
                "must be 32 or 256 (values per activation scale)");
}

void check_holds(const device::Buffer& buf, int64_t n, int64_t width, size_t elem_bytes,
                 const std::string& field, const std::string& shape) {
  const auto need = static_cast<size_t>(n) * static_cast<size_t>(width) * elem_bytes;
  SPECDEC_CHECK(
      !buf.empty() && buf.size_bytes() >= need, field, str_cat(buf.size_bytes(), " bytes"),
      str_cat("must hold ", shape, " = ", n, " x ", width, " elements (", need, " bytes)"));
}

}  // namespace

bool prepare_activations(device::Device& dev, int64_t n, int64_t cols, QuantizedActivations& out,
                         int scale_block) {
  SPECDEC_CHECK(n >= 0, "n", n, "must be >= 0");
  SPECDEC_CHECK(cols > 0, "cols", cols, "must be > 0");
  check_scale_block(scale_block);
  out.n = n;
  out.cols = cols;
  out.scale_block = scale_block;
  clear_source(out);
  if (n == 0 || cols % scale_block != 0) return false;
  const auto elems = static_cast<size_t>(n * cols);
  // Replacing a buffer while matmuls may still read the old one: the ordering contract's rule 2
  // (device/device.h).
  if (out.q8.size_bytes() < elems) out.q8 = dev.allocate(elems);
  if (out.q16.size_bytes() < elems * 2) out.q16 = dev.allocate(elems * 2);
  if (out.rec.size_bytes() < elems / 32 * 16) out.rec = dev.allocate(elems / 32 * 16);
  return true;
}

void quantize_activations(device::Device& dev, const device::Buffer& x, int64_t n, int64_t cols,
                          QuantizedActivations& out, int scale_block) {
  SPECDEC_CHECK(n >= 0, "n", n, "must be >= 0");
  SPECDEC_CHECK(cols > 0, "cols", cols, "must be > 0");
  check_holds(x, n, cols, sizeof(float), "x", "[n, cols]");
  // No block format with this scale block has rows of such length: only F32 / F16 / BF16 weights
  // (which read x) can follow, so there is nothing to quantise.
  if (!prepare_activations(dev, n, cols, out, scale_block)) return;
  switch (dev.kind()) {
    case device::Kind::kOpenCL: ocl_quantize_activations(dev, x, n, cols, out, scale_block); break;
    case device::Kind::kCpu: cpu_quantize_activations(dev, x, n, cols, out, scale_block); break;
  }
  set_source(out, x);  // just quantised from x
}

void quantize_activations_of(device::Device& dev, const device::Buffer& x, int64_t n, int64_t cols,
                             QuantizedActivations& out, int scale_block) {
  if (out.source != device::BufferId{} && out.source == x.id() && out.n == n && out.cols == cols &&
      out.scale_block == scale_block) {
    return;
  }
  quantize_activations(dev, x, n, cols, out, scale_block);
}

void quantize_activations_for(device::Device& dev, const device::Buffer& x, int64_t n,
                              const DeviceWeight& w, QuantizedActivations& out) {
  const int scale_block = activation_scale_block(w.type());
  if (scale_block != 0 && n > 0) quantize_activations_of(dev, x, n, w.cols(), out, scale_block);
}

void matmul(device::Device& dev, const DeviceWeight& w, const device::Buffer& x,
            const QuantizedActivations& xq, int64_t n, device::Buffer& y, OutputColumns out) {
  SPECDEC_CHECK(n >= 0, "n", n, "must be >= 0");
  const int64_t rows = w.rows(), cols = w.cols();
  const int64_t ldy = out.stride == 0 ? rows : out.stride;
  if (out.offset != 0 || out.stride != 0) {
    SPECDEC_CHECK(out.offset >= 0 && ldy >= rows && out.offset <= ldy - rows &&
                      ldy <= std::numeric_limits<int32_t>::max(),
                  "output columns", str_cat("offset ", out.offset, ", stride ", out.stride),
                  str_cat("must place the ", rows, " columns inside each row: 0 <= offset <= stride - ",
                          rows, ", stride < 2^31 (stride 0: ", rows, ", contiguous)"));
    const auto need = static_cast<size_t>(n > 0 ? (n - 1) * ldy + out.offset + rows : 0) * sizeof(float);
    SPECDEC_CHECK(!y.empty() && y.size_bytes() >= need, "y", str_cat(y.size_bytes(), " bytes"),
                  str_cat("must hold ", n, " rows of stride ", ldy, " from column ", out.offset, " (",
                          need, " bytes)"));
  } else {
    check_holds(y, n, rows, sizeof(float), "y", "[n, rows]");
  }
  if (n == 0) return;
  if (family(w.type()) == Family::kFloat) {
    check_holds(x, n, cols, sizeof(float), "x", "[n, cols]");
  } else {
    SPECDEC_CHECK(xq.n >= n && xq.cols == cols && xq.rec.size_bytes() > 0, "quantized activations",
                 str_cat(xq.n, " x ", xq.cols),
                 str_cat("must be quantize_activations of x [", n, ", ", cols, "]"));
    const int scale_block = activation_scale_block(w.type());
    SPECDEC_CHECK(xq.scale_block == scale_block, "quantized activations",
                  str_cat("one scale per ", xq.scale_block, " values"),
                  str_cat("must have one scale per ", scale_block, " values for ",
                          weight_format(w.type()).name, " weights (quantize_activations_for)"));
  }
  switch (dev.kind()) {
    case device::Kind::kOpenCL: return ocl_matmul(dev, w, x, xq, n, y, out.offset, ldy);
    case device::Kind::kCpu: return cpu_matmul(dev, w, x, xq, n, y, out.offset, ldy);
  }
}

void matmul(device::Device& dev, const DeviceWeight& w, const device::Buffer& x, int64_t n,
            device::Buffer& y) {
  QuantizedActivations xq;
  quantize_activations_for(dev, x, n, w, xq);
  matmul(dev, w, x, xq, n, y);
}

void matmul_reusing(device::Device& dev, const DeviceWeight& w, const device::Buffer& x,
                    QuantizedActivations& xq, int64_t n, device::Buffer& y, OutputColumns out) {
  quantize_activations_for(dev, x, n, w, xq);
  matmul(dev, w, x, xq, n, y, out);
}

void embedding_lookup(device::Device& dev, const DeviceWeight& w, const device::Buffer& ids, int64_t n,
                      device::Buffer& out, float scale) {
  SPECDEC_CHECK(n >= 0, "n", n, "must be >= 0");
  check_holds(ids, n, 1, sizeof(int32_t), "ids", "[n]");
  check_holds(out, n, w.cols(), sizeof(float), "out", "[n, cols]");
  if (n == 0) return;
  switch (dev.kind()) {
    case device::Kind::kOpenCL: return ocl_embedding_lookup(dev, w, ids, n, out, scale);
    case device::Kind::kCpu: return cpu_embedding_lookup(dev, w, ids, n, out, scale);
  }
}

void embedding_lookup(device::Device& dev, const DeviceWeight& w, std::span<const int32_t> ids,
                      device::Buffer& out, float scale) {
  for (size_t i = 0; i < ids.size(); ++i) {
    SPECDEC_CHECK(ids[i] >= 0 && ids[i] < w.rows(), str_cat("ids[", i, "]"), ids[i],
                 str_cat("must be a row of ", w.name, " in [0, ", w.rows(), ")"));
  }
  if (ids.empty()) return;
  const device::Buffer buf =
      dev.allocate(ids.size() * sizeof(int32_t), device::Lifetime::kStep, device::Access::kReadOnly);
  dev.write(buf, ids.data(), ids.size() * sizeof(int32_t));
  embedding_lookup(dev, w, buf, static_cast<int64_t>(ids.size()), out, scale);
}

}  // namespace specdec::quant
