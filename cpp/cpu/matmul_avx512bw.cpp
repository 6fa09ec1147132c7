// The AVX-512 BW path (compiled with -mavx512f -mavx512bw -mavx512vl -mfma -mf16c: CMakeLists.txt).
#include "cpu/matmul_kernels.h"

#if defined(__x86_64__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__FMA__)
#include "cpu/matmul_avx512_impl.h"

namespace specdec::cpu::kernels {
GroupKernel avx512bw_kernel(int type) { return avx512_kernel<false>(type); }
}  // namespace specdec::cpu::kernels
#else
namespace specdec::cpu::kernels {
GroupKernel avx512bw_kernel(int) { return nullptr; }
}  // namespace specdec::cpu::kernels
#endif
