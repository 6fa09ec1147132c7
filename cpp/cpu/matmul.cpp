#include "cpu/matmul.h"

#include <algorithm>
#include <vector>

#include "common/errors.h"
#include "cpu/matmul_kernels.h"

namespace specdec::cpu {
namespace {

kernels::GroupKernel kernel_of(Isa isa, int type) {
  switch (isa) {
    case Isa::kAmxInt8:  // no tile kernels yet: its CPUs run the AVX-512 VNNI ones (lower())
      return nullptr;
    case Isa::kAvx512vnni:
      return kernels::avx512_vnni_kernel(type);
    case Isa::kAvx512bw:
      return kernels::avx512bw_kernel(type);
    case Isa::kAvxVnni:
      return kernels::avx_vnni_kernel(type);
    case Isa::kAvx2:
      return kernels::avx2_kernel(type);
    case Isa::kPortable:
      return kernels::portable_kernel(type);
  }
  return nullptr;
}

// The next path down whose kernels a CPU running `isa` also runs.
Isa lower(Isa isa) {
  switch (isa) {
    case Isa::kAmxInt8:
      return Isa::kAvx512vnni;
    case Isa::kAvx512vnni:
      return Isa::kAvx512bw;
    case Isa::kAvx512bw:
    case Isa::kAvxVnni:
      return Isa::kAvx2;
    default:
      return Isa::kPortable;
  }
}

void check_input(const quant::DeviceLayout& layout, const MatmulInput& in, bool is_float) {
  SPECDEC_CHECK(in.n >= 0, "n", in.n, "must be >= 0");
  if (is_float) {
    SPECDEC_CHECK(in.x != nullptr || in.n == 0, "x", "null",
                  str_cat(quant::weight_type_name(layout.type), " weights read f32 activations x"));
    return;
  }
  SPECDEC_CHECK(in.xq != nullptr || in.n == 0, "xq", "null",
                str_cat(quant::weight_type_name(layout.type),
                        " weights read quantised activations (cpu::quantize_activations)"));
  if (in.xq == nullptr) return;
  SPECDEC_CHECK(in.xq->cols == layout.cols, "xq.cols", in.xq->cols,
                str_cat("must equal the weight's cols, ", layout.cols));
  SPECDEC_CHECK(in.xq->n >= in.n, "xq.n", in.xq->n, str_cat("must be >= n = ", in.n));
}

}  // namespace

Isa matmul_isa_for(quant::GgmlType type, Isa isa) {
  while (isa != Isa::kPortable && kernel_of(isa, static_cast<int>(type)) == nullptr)
    isa = lower(isa);
  return isa;
}

void matmul(const PackedWeight& w, const MatmulInput& in, int64_t group_begin, int64_t group_end,
            float* y, Isa isa) {
  SPECDEC_CHECK(w.layout != nullptr, "w", "null", "a packed weight needs its layout");
  matmul(w, in, group_begin, group_end, y, w.layout->rows, isa);
}

void matmul(const PackedWeight& w, const MatmulInput& in, int64_t group_begin, int64_t group_end,
            float* y, int64_t ldy, Isa isa) {
  SPECDEC_CHECK(w.layout != nullptr && w.data != nullptr, "w", "null",
                "a packed weight needs its layout and bytes");
  const quant::DeviceLayout& layout = *w.layout;
  SPECDEC_CHECK(ldy >= layout.rows, "ldy", ldy, str_cat("must be >= the weight's rows, ", layout.rows));
  SPECDEC_CHECK(0 <= group_begin && group_begin <= group_end && group_end <= layout.groups,
                "group range", str_cat("[", group_begin, ", ", group_end, ")"),
                str_cat("must lie in [0, ", layout.groups, "]"));
  const std::vector<Isa>& runnable = cpu_isas();
  SPECDEC_CHECK(std::find(runnable.begin(), runnable.end(), isa) != runnable.end(), "isa",
                isa_name(isa), "is not a path this CPU can run");
  const bool is_float = quant::weight_format(layout.type).block_size == 1;
  check_input(layout, in, is_float);
  if (in.n == 0 || group_begin == group_end) return;
  const int type = static_cast<int>(layout.type);
  const kernels::GroupKernel kernel = kernel_of(matmul_isa_for(layout.type, isa), type);
  SPECDEC_CHECK(kernel != nullptr, "type", quant::weight_type_name(layout.type),
                "has no CPU kernel");

  kernels::Args base;
  for (size_t p = 0; p < layout.planes.size() && p < 4; ++p)
    base.plane[p] = w.data + layout.planes[p].offset;
  base.blocks_per_row = layout.blocks_per_row;
  base.cols = layout.cols;
  base.rows = layout.rows;
  base.ldy = ldy;
  // tiles of 16 activation rows, each run over a group while its records are in cache
  const int64_t num_tiles = (in.n + kernels::kMaxRows - 1) / kernels::kMaxRows;
  std::vector<kernels::Args> tiles(static_cast<size_t>(num_tiles), base);
  for (int64_t t = 0; t < num_tiles; ++t) {
    const int64_t i0 = t * kernels::kMaxRows;
    kernels::Args& a = tiles[static_cast<size_t>(t)];
    a.n = static_cast<int>(std::min<int64_t>(kernels::kMaxRows, in.n - i0));
    a.y = y + i0 * ldy;
    if (is_float) {
      a.x = in.x + i0 * layout.cols;
      continue;
    }
    const int64_t nb32 = layout.cols / 32;
    a.xq = in.xq->q + i0 * layout.cols;
    a.xr = in.xq->rec + i0 * nb32;
  }
  for (int64_t g = group_begin; g < group_end; ++g) {
    for (const kernels::Args& a : tiles) kernel(a, g);
  }
}

void matmul(const PackedWeight& w, const MatmulInput& in, float* y, Isa isa) {
  SPECDEC_CHECK(w.layout != nullptr, "w", "null", "a packed weight needs its layout");
  matmul(w, in, 0, w.layout->groups, y, isa);
}

}  // namespace specdec::cpu
