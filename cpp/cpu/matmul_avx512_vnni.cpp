// The AVX-512 VNNI path (compiled with the AVX-512 BW flags plus -mavx512vnni: CMakeLists.txt).
#include "cpu/matmul_kernels.h"

#if defined(__x86_64__) && defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__FMA__)
#include "cpu/matmul_avx512_impl.h"

namespace specdec::cpu::kernels {
GroupKernel avx512_vnni_kernel(int type) { return avx512_kernel<true>(type); }
}  // namespace specdec::cpu::kernels
#else
namespace specdec::cpu::kernels {
GroupKernel avx512_vnni_kernel(int) { return nullptr; }
}  // namespace specdec::cpu::kernels
#endif
