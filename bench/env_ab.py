#!/usr/bin/env python3
"""A/B of one environment setting on a model's decode step, in alternating processes.

    .venv/bin/python bench/env_ab.py --models qwen2.5-coder-1.5b-instruct-q4_k_m \\
        --env SPECDEC_HUGE_PAGES=0 [--rounds 4] [--steps 48] [--out bench/out/env_ab.json]

Each round runs the decode twice, once with the process's environment (A) and once with the
setting added (B), each in a fresh process (settings such as SPECDEC_HUGE_PAGES are read once per
process), alternating the order every round so that a machine drifting over time hurts neither
side. A decode is bench/model_bench.py's (`--no-peer`, `--decode-tokens` = `--steps`): the median
step after a 16-token prompt. The summary gives per side the median of the
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
import tempfile
from pathlib import Path

from specdec._files import check_output_file, write_file_atomic

ROOT = Path(__file__).resolve().parents[1]

def run_once(model: str, steps: int, extra: dict, tmp: Path) -> dict:
    """bench/model_bench.py's decode of one model (no peer) in a fresh process with `extra` set."""
    out = tmp / "run.json"
    cmd = [sys.executable, str(ROOT / "bench" / "model_bench.py"), "--models", model, "--no-peer",
           "--repeats", "2", "--decode-tokens", str(steps), "--out", str(out)]
    proc = subprocess.run(cmd, env=dict(os.environ, **extra), capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"{model} with {extra or 'the default environment'} failed:\n{proc.stderr[-2000:]}")
    report = json.loads(out.read_text())
    return {"median_ms": report["models"][0]["specdec"]["decode_ms_per_token"], "device": report["device"]}


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
    if a.rounds < 1 or a.steps < 1:
        raise SystemExit("--rounds and --steps must be >= 1")
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
                with tempfile.TemporaryDirectory() as tmp:
                    row[side] = run_once(model, a.steps, extra, Path(tmp))
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
