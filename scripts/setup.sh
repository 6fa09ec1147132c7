#!/usr/bin/env bash
# Installs everything specdec needs on a fresh Debian machine and builds the Python package
# into .venv. Idempotent: what is already there is not installed again.
# System packages need root: run as root, or as a user who may sudo.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake ninja-build pkg-config git
          ocl-icd-opencl-dev opencl-headers pocl-opencl-icd clinfo
          libeigen3-dev nlohmann-json3-dev libgtest-dev
          clang libclang-rt-dev
          python3 python3-dev python3-venv)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "== installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv with $($PYTHON --version)"
  $PYTHON -m venv .venv
fi
echo "== installing Python build and test tools"
.venv/bin/python -m pip install -q --disable-pip-version-check \
  "scikit-build-core>=0.10" "pybind11>=2.10" "numpy>=1.22" "jinja2>=3.1" "pytest>=7" "safetensors>=0.4" "tokenizers>=0.15" \
  "gguf>=0.17" "matplotlib>=3.5" \
  "fastapi>=0.100" "uvicorn>=0.23" "prometheus_client>=0.17" "openai>=1.0" "llguidance>=1.9,<2" "jsonschema>=4"
echo "== building and installing specdec (pip install .)"
.venv/bin/python -m pip install -q --disable-pip-version-check --no-build-isolation .
