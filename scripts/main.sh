#!/usr/bin/env bash
# Sets up everything, then runs the main job: list the OpenCL devices and print the KV-cache
# plan of the built-in Gemma 3 270M example.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/specdec devices
echo
.venv/bin/specdec kv-plan --example gemma3-270m
