#!/usr/bin/env bash
# Builds and runs the forward-op benchmark; writes bench/out/ops_bench.json. Pass --quick for a
# smoke run, --only SUBSTRING to time the ops whose name contains it.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build/bench -G Ninja -DSPECDEC_BUILD_TESTS=OFF -DSPECDEC_BUILD_BENCH=ON \
      -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build/bench --target ops_bench
mkdir -p bench/out
build/bench/bench/ops_bench "$@" | tee bench/out/ops_bench.json
