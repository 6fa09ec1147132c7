// The AVX-VNNI path: the AVX2 kernels with 256-bit VEX vpdpbusd (compiled with the AVX2 flags
// plus -mavxvnni: CMakeLists.txt).
#include "cpu/matmul_kernels.h"

#if defined(__x86_64__) && defined(__AVXVNNI__) && defined(__AVX2__) && defined(__FMA__)
#include "cpu/matmul_avx2_impl.h"

namespace specdec::cpu::kernels {
GroupKernel avx_vnni_kernel(int type) { return avx2_kernel_of<true>(type); }
}  // namespace specdec::cpu::kernels
#else
namespace specdec::cpu::kernels {
GroupKernel avx_vnni_kernel(int) { return nullptr; }
}  // namespace specdec::cpu::kernels
#endif
