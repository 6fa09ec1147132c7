// rope on OpenCL (kernels/ops_rope.cl).
#include "common/math.h"
#include "device/ocl_device.h"
#include "ops/impl.h"
#include "ops/ocl_common.h"

namespace specdec::ops {

void ocl_rope(device::Device& dev, Slice x, Slice positions, int64_t num_tokens, int num_heads,
              int head_size, const RopeTable& table, int64_t token_stride) {
  ocl::Context& ctx = ocl::context_of(dev);
  const int rope_dim = table.rope_dim();
  ocl::Kernel k = ctx.kernel("ops_rope", "rope", ops_build_options(ctx));
  k.arg(0, *x.buffer).arg(1, cl_long{x.offset});
  k.arg(2, *positions.buffer).arg(3, cl_long{positions.offset});
  k.arg(4, table.buffer()).arg(5, cl_long{0});
  k.arg(6, cl_long{token_stride}).arg(7, cl_int{num_heads}).arg(8, cl_int{head_size});
  k.arg(9, cl_int{rope_dim}).arg(10, cl_int{table.type() == RopeType::kNeox ? 1 : 0});
  const size_t global[2] = {static_cast<size_t>(cdiv(rope_dim / 2, 16)),
                            static_cast<size_t>(num_tokens)};
  k.launch(ctx, 2, global);
}

}  // namespace specdec::ops
