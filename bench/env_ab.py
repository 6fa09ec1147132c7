#!/usr/bin/env python3
"""A/B of one environment setting on a model's decode step, in alternating processes.

    .venv/bin/python bench/env_ab.py --models qwen2.5-coder-1.5b-instruct-q4_k_m \\
        --env SPECDEC_HUGE_PAGES=0 [--rounds 4] [--steps 48] [--out bench/out/env_ab.json]

Each round runs the decode twice, once with the process's environment (A) and once with the
setting added (B), each in a fresh process (settings such as SPECDEC_HUGE_PAGES are read once per
process), alternating the order every round so that a machine drifting over time hurts neither
side. A decode = load, a 16-token prompt, then `--steps` greedy one-token steps, the first 8 not
counted; per run the median and minimum step time. The summary gives per side the median of the
runs' medians and the B / A ratio per round: on a noisy VM the per-round ratios are what to read.
Not a test; the numbers are for reading, like every benchmark here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from specdec._files import check_output_file, write_file_atomic

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys, time
import numpy as np
import specdec
from specdec import _core
from specdec._core import StepRequest
ctx = specdec.Context()
runner = _core.ModelRunner(ctx, specdec.resolve_model(sys.argv[1]), "", 2048, 256 << 20,
                           max_num_batched_tokens=64, max_num_logits=8)
out = runner.step([StepRequest("d", list(range(100, 116)))])
t = int(np.argmax(out.logits[0]))
steps = []
for i in range(int(sys.argv[2])):
    t0 = time.perf_counter()
    out = runner.step([StepRequest("d", [t], num_computed_tokens=16 + i)])
    steps.append(time.perf_counter() - t0)
    t = int(np.argmax(out.logits[0]))
steps = steps[8:]
print(json.dumps({"median_ms": 1e3 * float(np.median(steps)), "min_ms": 1e3 * min(steps),
                  "device": ctx.device.summary()}))
"""


def run_once(model: str, steps: int, extra: dict) -> dict:
    env = dict(os.environ, **extra)
    proc = subprocess.run([sys.executable, "-c", CHILD, model, str(steps)], env=env,
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"{model} with {extra or 'the default environment'} failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def parse_env(text: str) -> dict:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise SystemExit(f"--env: {text!r} is not NAME=VALUE")
    return {name: value}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["qwen2.5-coder-1.5b-instruct-q4_k_m"])
    ap.add_argument("--env", required=True, help="NAME=VALUE: side B's setting")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "env_ab.json"),
                    help="JSON output (its folder must exist, except for the default bench/out)")
    a = ap.parse_args()
    if a.rounds < 1 or a.steps < 9:
        raise SystemExit("--rounds must be >= 1 and --steps >= 9 (the first 8 steps are not counted)")
    b_env = parse_env(a.env)
    default_out = str(ROOT / "bench" / "out" / "env_ab.json")
    check_output_file(a.out, "--out", create_folder=a.out == default_out)  # before the run
    result = {"setting_b": a.env, "rounds": a.rounds, "steps": a.steps, "models": []}
    for model in a.models:
        runs = []
        for r in range(a.rounds):
            order = [("A", {}), ("B", b_env)] if r % 2 == 0 else [("B", b_env), ("A", {})]
            row = {}
            for side, extra in order:
                row[side] = run_once(model, a.steps, extra)
            row["b_over_a"] = row["B"]["median_ms"] / row["A"]["median_ms"]
            runs.append(row)
            print(f"{model} round {r + 1}: A {row['A']['median_ms']:.2f} ms, B ({a.env}) "
                  f"{row['B']['median_ms']:.2f} ms, B/A {row['b_over_a']:.3f}", flush=True)
        med = {s: statistics.median(x[s]["median_ms"] for x in runs) for s in ("A", "B")}
        ratios = [x["b_over_a"] for x in runs]
        result["models"].append({"model": model, "runs": runs, "median_ms": med,
                                 "b_over_a": {"median": statistics.median(ratios), "min": min(ratios),
                                              "max": max(ratios)},
                                 "device": runs[0]["A"]["device"]})
        print(f"{model}: A {med['A']:.2f} ms, B {med['B']:.2f} ms; B/A per round "
              f"{min(ratios):.3f}..{max(ratios):.3f}", flush=True)
    write_file_atomic(a.out, json.dumps(result, indent=1) + "\n", "--out")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
