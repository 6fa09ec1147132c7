#!/usr/bin/env python3
"""Where a forward's time goes: per kernel, launches and device time for decode steps (and a
k-token verify step) of a model, from OpenCL event timestamps (SPECDEC_PROFILE=1).

    .venv/bin/python bench/profile_step.py [--model NAME_OR_PATH] [--steps 20] [--tokens 1]
        [--out bench/out/profile_step.json]

Per kernel: launches per step, device µs per step, µs per launch. `span_us` is the queue time
from the first launch queued to the last ended; `gap_us` = span - the sum of device times: what
launching costs beyond the kernels' own work (host enqueue, scheduling, idle between kernels).
On the native device (--device native) an op's time is the caller thread's share plus the barrier
after it, and `pool` splits the threads' time in the step into work and waiting (woken at the
region's start, at the barriers between ops, at its end): `wait_share`, `wait_us_per_barrier`.
Not a test; the numbers are for reading, like every benchmark here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ["SPECDEC_PROFILE"] = "1"  # before the context exists

import numpy as np  # noqa: E402

import specdec  # noqa: E402
from specdec import _core  # noqa: E402
from specdec._core import StepRequest  # noqa: E402
from specdec._files import check_output_file, write_file_atomic  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct-q4_1")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=1, help="tokens per step (k + 1 for a verify)")
    ap.add_argument("--device", default="")
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "profile_step.json"))
    args = ap.parse_args()
    default_folder = Path(args.out).resolve().parent == ROOT / "bench" / "out"  # created if missing
    check_output_file(args.out, "--out", create_folder=default_folder)  # before the run
    path = specdec.resolve_model(args.model)
    ctx = specdec.Context(args.device) if args.device else specdec.Context()
    runner = _core.ModelRunner(ctx, path, "", 512, 256 << 20)
    prompt = list(range(3, 3 + 32))
    runner.step([StepRequest("p", prompt)])
    n = len(prompt)
    step = [StepRequest("p", prompt[:args.tokens], num_computed_tokens=n, num_logits=args.tokens)]
    for _ in range(3):  # warm-up: kernels built
        runner.step(step)
        runner.truncate("p", n)
    ctx.take_profile()
    wall = []
    for _ in range(args.steps):
        t = time.perf_counter()
        runner.step(step, return_logits=False)
        wall.append(time.perf_counter() - t)
        runner.truncate("p", n)
    prof = ctx.take_profile()
    s = args.steps
    rows = [{"kernel": k["kernel"], "launches_per_step": k["launches"] / s,
             "device_us_per_step": k["device_us"] / s, "us_per_launch": k["device_us"] / k["launches"],
             **({"wait_us_per_step": k["wait_us"] / s} if "wait_us" in k else {})}
            for k in prof["kernels"]]
    rows.sort(key=lambda r: -r["device_us_per_step"])
    device = sum(r["device_us_per_step"] for r in rows)
    launches = sum(r["launches_per_step"] for r in rows)
    out = {"model": args.model, "tokens_per_step": args.tokens, "steps": s,
           "device": ctx.device.name if hasattr(ctx, "device") else "",
           "wall_ms_per_step_median": float(np.median(wall)) * 1e3,
           "span_us_per_step": prof["span_us"] / s, "device_us_per_step": device,
           "gap_us_per_step": prof["span_us"] / s - device, "launches_per_step": launches,
           "kernels": rows}
    pool = prof.get("pool")
    if pool:  # the native device: its threads' time, and the part spent waiting between ops
        out["pool"] = {"threads": pool["threads"], "regions_per_step": pool["regions"] / s,
                       "barriers_per_step": pool["barriers"] / s,
                       "thread_us_per_step": pool["thread_us"] / s,
                       "wait_us_per_step": pool["wait_us"] / s,
                       "wait_share": pool["wait_us"] / pool["thread_us"] if pool["thread_us"] else 0.0,
                       "barrier_wait_share": (pool["barrier_wait_us"] / pool["thread_us"]
                                              if pool["thread_us"] else 0.0),
                       "wait_us_per_barrier": (pool["barrier_wait_us"] / (pool["barriers"] * pool["threads"])
                                               if pool["barriers"] else 0.0)}
    write_file_atomic(args.out, json.dumps(out, indent=1), "--out")
    print(f"{args.model}: {args.tokens} token(s)/step, wall {out['wall_ms_per_step_median']:.2f} ms "
          f"(median), {launches:.0f} launches, device {device / 1e3:.2f} ms, gaps "
          f"{out['gap_us_per_step'] / 1e3:.2f} ms ({out['gap_us_per_step'] / launches:.1f} µs per launch)")
    if "pool" in out:
        p = out["pool"]
        print(f"pool: {p['threads']} threads, {p['barriers_per_step']:.0f} barriers/step; waiting "
              f"{100 * p['wait_share']:.1f} % of thread time ({100 * p['barrier_wait_share']:.1f} % at "
              f"barriers between ops, {p['wait_us_per_barrier']:.2f} µs per barrier and thread)")
    waits = "pool" in out  # the native device: threads' waits at the barrier after each op
    print(f"{'kernel':34s} {'launches':>8s} {'µs/step':>9s} {'µs/launch':>9s}"
          + (f" {'wait µs/step':>12s}" if waits else ""))
    for r in rows:
        print(f"{r['kernel']:34s} {r['launches_per_step']:8.1f} {r['device_us_per_step']:9.1f} "
              f"{r['us_per_launch']:9.1f}" + (f" {r.get('wait_us_per_step', 0.0):12.1f}" if waits else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
