#!/usr/bin/env bash
# Builds llama.cpp's own tools used as the peer (llama-speculative-simple, llama-lookup, llama-bench, llama-completion)
# from the vendor/llama.cpp tree inside the pinned llama-cpp-python sdist, as a native CPU build
# (in build/peer-llama.cpp), and installs them where `specdec bench` looks for them:
# $SPECDEC_PEER_BIN if set, else $SPECDEC_CACHE/peer-llama.cpp/bin (default
# ~/.cache/specdec/peer-llama.cpp/bin). specdec never runs tools from the working directory.
# ~10 minutes on 2 cores; idempotent. Not needed by the tests.
set -euo pipefail
# resolved before the cd below: a relative SPECDEC_PEER_BIN / SPECDEC_CACHE means what it does to specdec
cache="${SPECDEC_CACHE:-$HOME/.cache/specdec}"
dest="$(realpath -m "${SPECDEC_PEER_BIN:-$cache/peer-llama.cpp/bin}")"
cd "$(dirname "$0")/.."
LLAMA_CPP_PYTHON_VERSION="0.3.36"   # the same pin as bench/setup_peer.sh
out=build/peer-llama.cpp
tools="llama-speculative-simple llama-lookup llama-bench llama-completion"
installed() { for t in $tools; do [ -x "$1/$t" ] || return 1; done; }
if installed "$dest"; then
  echo "peer tools already installed in $dest"; exit 0
fi
if installed "$out/bin"; then  # built by an earlier version of this script
  mkdir -p "$dest"
  for t in $tools; do install -m 755 "$out/bin/$t" "$dest/$t"; done
  echo "peer tools in $dest"; exit 0
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
cmake --build "$out/build" -j 2 --target $tools
mkdir -p "$dest"
for t in $tools; do install -m 755 "$out/build/bin/$t" "$dest/$t"; done
echo "peer tools in $dest"
