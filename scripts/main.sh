#!/usr/bin/env bash
# Sets up everything, then runs the main job: list the OpenCL devices, fetch the real
# Qwen2.5-Coder pair (1.5B target, 0.5B drafter; pinned hashes, cached in
# ${SPECDEC_CACHE:-~/.cache/specdec} after the first time), print the target's architecture,
# tokenizer and KV-cache plan, then generate speculatively with the 0.5B drafter (greedy,
# streamed to its end, acceptance metrics and the time split) and decode the same prompt plainly
# for a side-by-side table: tokens/s, acceptance, speedup, and that the output is identical. Both
# models are warmed up at load (every kernel variant built and run once; the time is printed), so
# the comparison is warm on the first run too.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/specdec devices
echo
.venv/bin/specdec fetch qwen2.5-coder-1.5b-instruct-q4_k_m qwen2.5-coder-0.5b-instruct-q4_k_m
.venv/bin/specdec inspect qwen2.5-coder-1.5b-instruct-q4_k_m
echo
PROMPT='Rewrite this function with type hints and a docstring. Keep the logic and the names exactly the same and reply with the code only.

def merge_intervals(intervals):
    if not intervals:
        return []
    intervals = sorted(intervals, key=lambda iv: iv[0])
    merged = [list(intervals[0])]
    for start, end in intervals[1:]:
        last = merged[-1]
        if start <= last[1]:
            last[1] = max(last[1], end)
        else:
            merged.append([start, end])
    return merged'
.venv/bin/specdec generate --model qwen2.5-coder-1.5b-instruct-q4_k_m --chat --max-tokens 512 \
    --prompt "$PROMPT" --compare-plain \
    --speculative-config '{"method": "draft_model", "model": "qwen2.5-coder-0.5b-instruct-q4_k_m", "num_speculative_tokens": 6, "adaptive": true, "draft_vocab_size": 16384, "draft_vocab_file": "data/draft_vocab_qwen2.5-coder.json"}'
