// The AVX2 path (compiled with -mavx2 -mfma -mf16c: CMakeLists.txt).
#include "cpu/matmul_kernels.h"

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include "cpu/matmul_avx2_impl.h"

namespace specdec::cpu::kernels {
GroupKernel avx2_kernel(int type) { return avx2_kernel_of<false>(type); }
}  // namespace specdec::cpu::kernels
#else
namespace specdec::cpu::kernels {
GroupKernel avx2_kernel(int) { return nullptr; }
}  // namespace specdec::cpu::kernels
#endif
