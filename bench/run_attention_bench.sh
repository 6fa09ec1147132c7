#!/usr/bin/env bash
# Builds and runs the attention benchmark; writes bench/out/attention_bench.json (and a plot when
# matplotlib is installed). Pass --quick for a smoke run.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build/bench -G Ninja -DSPECDEC_BUILD_TESTS=OFF -DSPECDEC_BUILD_BENCH=ON \
      -DCMAKE_BUILD_TYPE=Release > /dev/null
cmake --build build/bench --target attention_bench
mkdir -p bench/out
build/bench/bench/attention_bench "$@" > bench/out/attention_bench.json
python3 bench/summarize_attention.py bench/out/attention_bench.json
