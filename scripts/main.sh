#!/usr/bin/env bash
# Sets up everything, then runs the main job: list the OpenCL devices, fetch the real
# Qwen2.5-Coder-1.5B target (pinned hashes, cached in ${SPECDEC_CACHE:-~/.cache/specdec}), print
# its architecture, tensors, tokenizer and KV-cache plan, and generate with it (greedy, streamed,
# with prefill and decode tokens/s): plainly, then speculatively with the 0.5B drafter (the same
# text, with acceptance metrics and the time split).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/specdec devices
echo
.venv/bin/specdec fetch qwen2.5-coder-1.5b-instruct-q4_k_m qwen2.5-coder-0.5b-instruct-q4_k_m
.venv/bin/specdec inspect qwen2.5-coder-1.5b-instruct-q4_k_m
echo
.venv/bin/specdec generate --model qwen2.5-coder-1.5b-instruct-q4_k_m --chat --max-tokens 96 \
    --prompt "Write a Python function that checks whether a number is prime."
echo
.venv/bin/specdec generate --model qwen2.5-coder-1.5b-instruct-q4_k_m --chat --max-tokens 96 \
    --prompt "Write a Python function that checks whether a number is prime." \
    --speculative-config '{"method": "draft_model", "model": "qwen2.5-coder-0.5b-instruct-q4_k_m", "num_speculative_tokens": 3}'
