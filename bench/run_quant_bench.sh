#!/usr/bin/env bash
# Builds and runs the quantized-matmul benchmark on the models in the cache; writes
# bench/out/quant_bench.json (progress lines on stderr). Pass --quick for a smoke run, or
# --working-set-mb N / --reps N / --models DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build/bench -G Ninja -DSPECDEC_BUILD_TESTS=OFF -DSPECDEC_BUILD_BENCH=ON \
      -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build/bench --target quant_bench
mkdir -p bench/out
build/bench/bench/quant_bench "$@" > bench/out/quant_bench.json
echo "wrote bench/out/quant_bench.json"
