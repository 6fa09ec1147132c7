#!/usr/bin/env bash
# Builds and runs the KV-cache benchmark; writes bench/out/kv_bench.json. Pass --quick for a smoke run.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build/bench -G Ninja -DSPECDEC_BUILD_TESTS=OFF -DSPECDEC_BUILD_BENCH=ON \
      -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build/bench --target kv_bench
mkdir -p bench/out
build/bench/bench/kv_bench "$@" | tee bench/out/kv_bench.json
