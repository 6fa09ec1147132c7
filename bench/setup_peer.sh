#!/usr/bin/env bash
# Installs the peer engine the benchmarks and the reference validation compare against:
# llama.cpp through the llama-cpp-python package, built from source (its sdist carries
# llama.cpp) as a plain CPU build, into .venv. Takes ~10 minutes on 2 cores; idempotent.
# Not needed by the tests: pytest never imports llama_cpp.
set -euo pipefail
cd "$(dirname "$0")/.."

LLAMA_CPP_PYTHON_VERSION="0.3.36"   # pinned: bench numbers and validation were taken with it
PY=.venv/bin/python
if [ ! -x "$PY" ]; then
  echo "bench/setup_peer.sh: .venv is missing; run scripts/setup.sh first" >&2
  exit 1
fi
# CPU build for this machine: no GPU backends, no BLAS (llama.cpp's own kernels, as llama-bench
# uses by default); bench/peer_cpu_flags.sh adds OpenMP, no AMX and the SIMD flags of the CPU.
flags="-DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_OPENCL=OFF -DGGML_METAL=OFF"
flags+=" -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF"
source bench/peer_cpu_flags.sh
export CMAKE_ARGS="${CMAKE_ARGS:-$flags}"
stamp=.venv/llama_cpp_python.build
want="$LLAMA_CPP_PYTHON_VERSION $CMAKE_ARGS"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && "$PY" -c 'import llama_cpp' 2>/dev/null; then
  echo "== llama-cpp-python $LLAMA_CPP_PYTHON_VERSION already built with these flags"
else
  echo "== building llama-cpp-python $LLAMA_CPP_PYTHON_VERSION from source (CPU only): $CMAKE_ARGS"
  export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
  flock /tmp/specdec-pip.lock "$PY" -m pip install --disable-pip-version-check --no-cache-dir \
    --force-reinstall --no-deps --no-binary llama-cpp-python "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
  # Its runtime dependencies (numpy is there already).
  flock /tmp/specdec-pip.lock "$PY" -m pip install -q --disable-pip-version-check \
    "typing-extensions>=4.5" "diskcache>=5.6.1" "jinja2>=2.11.3"
  echo "$want" > "$stamp"
fi
# The reference model's dequantizer (also in the test extra).
flock /tmp/specdec-pip.lock "$PY" -m pip install -q --disable-pip-version-check "gguf==0.19.0"
"$PY" -c 'import llama_cpp; print("llama_cpp", llama_cpp.__version__, "system_info:", llama_cpp.llama_print_system_info().decode())'
