#!/usr/bin/env bash
# Builds llama.cpp's own speculative tools (llama-speculative-simple, llama-lookup, llama-bench)
# from the vendor/llama.cpp tree inside the pinned llama-cpp-python sdist, as a native CPU build,
# into build/peer-llama.cpp/bin. ~10 minutes on 2 cores; idempotent. Not needed by the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
LLAMA_CPP_PYTHON_VERSION="0.3.36"   # the same pin as bench/setup_peer.sh
out=build/peer-llama.cpp
if [ -x "$out/bin/llama-speculative-simple" ] && [ -x "$out/bin/llama-lookup" ] && [ -x "$out/bin/llama-bench" ]; then
  echo "peer tools already built in $out/bin"; exit 0
fi
mkdir -p "$out"
if [ ! -d "$out/src" ]; then
  .venv/bin/python -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$out/sdist"
  mkdir -p "$out/src"
  tar -xzf "$out"/sdist/llama_cpp_python-*.tar.gz -C "$out/src" --strip-components=1
fi
flags="-DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=OFF"
source bench/peer_cpu_flags.sh
# shellcheck disable=SC2086
cmake -S "$out/src/vendor/llama.cpp" -B "$out/build" -G Ninja -DCMAKE_BUILD_TYPE=Release $flags > "$out/cmake.log"
cmake --build "$out/build" -j 2 --target llama-speculative-simple llama-lookup llama-bench
mkdir -p "$out/bin"
cp "$out"/build/bin/llama-speculative-simple "$out"/build/bin/llama-lookup "$out"/build/bin/llama-bench "$out/bin/"
echo "peer tools in $out/bin"
