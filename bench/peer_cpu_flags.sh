# Sourced by bench/setup_peer.sh and bench/setup_peer_tools.sh: appends to $flags the llama.cpp
# CMake options for a CPU build of this machine: OpenMP, no BLAS, no AMX (its tile instructions
# fault where the kernel or hypervisor does not grant AMX state: seen here at ldtilecfg), and the
# SIMD extensions /proc/cpuinfo lists (not GGML_NATIVE, which would turn AMX on).
flags+=" -DGGML_NATIVE=OFF -DGGML_BLAS=OFF -DGGML_OPENMP=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF"
flags+=" -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF"
cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
for pair in avx:AVX avx2:AVX2 avx_vnni:AVX_VNNI fma:FMA f16c:F16C bmi2:BMI2 avx512f:AVX512 \
            avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
  if [[ "$cpu_flags" == *" ${pair%%:*} "* ]]; then flags+=" -DGGML_${pair##*:}=ON"; else flags+=" -DGGML_${pair##*:}=OFF"; fi
done
