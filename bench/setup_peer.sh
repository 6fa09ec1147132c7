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
have=$("$PY" -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))' 2>/dev/null || true)
if [ "$have" = "$LLAMA_CPP_PYTHON_VERSION" ]; then
  echo "== llama-cpp-python $have already installed"
else
  echo "== building llama-cpp-python $LLAMA_CPP_PYTHON_VERSION from source (CPU only)"
  # CPU build for this machine: no GPU backends, no BLAS (llama.cpp's own kernels, as llama-bench
  # uses by default), native SIMD, OpenMP threading.
  export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=ON -DGGML_BLAS=OFF -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_OPENCL=OFF -DGGML_METAL=OFF -DGGML_OPENMP=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF}"
  export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"
  flock /tmp/specdec-pip.lock "$PY" -m pip install --disable-pip-version-check --no-cache-dir \
    --no-binary llama-cpp-python "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
fi
# The reference model's dequantizer (also in the test extra).
flock /tmp/specdec-pip.lock "$PY" -m pip install -q --disable-pip-version-check "gguf==0.19.0"
"$PY" -c 'import llama_cpp; print("llama_cpp", llama_cpp.__version__, "system_info:", llama_cpp.llama_print_system_info().decode())'
