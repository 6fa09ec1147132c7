#!/usr/bin/env python3
"""Loading a model, and its first request, on each device: seconds to a ready `LLM` (read, repack or
upload, KV cache, warm-up), resident memory against the GGUF file + KV cache, and the first
request's decode speed against a later one's.

    .venv/bin/python bench/load_bench.py [--models smollm2-135m-instruct-q4_1,...]
        [--devices native,ocl:auto] [--rounds 3] [--out bench/out/load_bench.json]

Each (round, model, device) runs in a fresh Python process, devices alternating inside a round, so
no run inherits another's page cache state more than its neighbour does: the GGUF is read once
before the rounds (the file in the page cache, as on a user's second start; a cold first start
depends on the disk). Per run: `load_s` (the LLM constructor), `rss_MB` after loading (VmRSS),
`peak_rss_MB` (VmHWM) after the requests, `kv_MB` (the KV cache the LLM sized), and
`rss_over_model_kv` = rss / (GGUF bytes + KV bytes); `first_tok_s` / `warm_tok_s`: decode tokens
per second of the first request after loading and of a third one (greedy, --tokens each, the
same prompt, prefix caching off so that each request prefills it; results before 2026-11-29's
seventh stop of issue 35 had it on, so their later request skipped the prefill). The median
over rounds is reported per (model, device). Not a test: numbers to read.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, os, sys, time
def status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0
import specdec
path, device, tokens, kv = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
t0 = time.perf_counter()
# no prefix caching: a later request would skip the prompt the first one prefilled
llm = specdec.LLM(path, device=device, max_model_len=2048, kv_cache_memory_bytes=kv, progress=False,
                  enable_prefix_caching=False)
load_s = time.perf_counter() - t0
rss = status("VmRSS")
params = specdec.SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)
prompt = "def quicksort(items):\n    " * 4
speeds = []
for _ in range(3):
    t = time.perf_counter()
    out = llm.generate([prompt], params)
    dt = time.perf_counter() - t
    speeds.append(len(out[0].outputs[0].token_ids) / dt)
print(json.dumps({"load_s": load_s, "rss": rss, "peak_rss": status("VmHWM"), "prefix_caching": False,
                  "kv_bytes": int(llm.kv_split["target_bytes"]),
                  "first_tok_s": speeds[0], "warm_tok_s": speeds[2],
                  "device": llm.context.device.summary()}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="smollm2-135m-instruct-q4_1,qwen2.5-coder-1.5b-instruct-q4_k_m")
    ap.add_argument("--devices", default="native,ocl:auto")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--kv", default="64MiB", help="kv_cache_memory_bytes of every run")
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "load_bench.json"))
    args = ap.parse_args()
    if args.rounds < 1 or args.tokens < 1:
        ap.error("--rounds and --tokens must be at least 1")
    import specdec
    from specdec._files import check_output_file, write_file_atomic
    default_folder = Path(args.out).resolve().parent == ROOT / "bench" / "out"
    check_output_file(args.out, "--out", create_folder=default_folder)
    models = [m for m in args.models.split(",") if m]
    devices = [d for d in args.devices.split(",") if d]
    if not models or not devices:
        ap.error("--models and --devices each need at least one name")
    try:
        paths = {m: specdec.resolve_model(m) for m in models}
    except (ValueError, OSError) as e:
        ap.error(f"--models: {e}")
    for p in paths.values():  # the file in the page cache before any timed run
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass
    runs = []
    for r in range(args.rounds):
        for m in models:
            order = devices if r % 2 == 0 else list(reversed(devices))
            for d in order:
                proc = subprocess.run([sys.executable, "-c", CHILD, paths[m], d, str(args.tokens), args.kv],
                                      capture_output=True, text=True)
                if proc.returncode != 0:
                    print(f"load_bench: {m} on {d!r} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}",
                          file=sys.stderr)
                    return 1
                row = json.loads(proc.stdout.strip().splitlines()[-1])
                row.update(model=m, device_arg=d, round=r, gguf_bytes=os.path.getsize(paths[m]))
                runs.append(row)
                print(f"round {r} {m} {d}: load {row['load_s']:.2f} s, rss {row['rss'] / 1e6:.0f} MB, "
                      f"first {row['first_tok_s']:.1f} / warm {row['warm_tok_s']:.1f} tok/s", file=sys.stderr)
    summary = []
    for m in models:
        for d in devices:
            rs = [x for x in runs if x["model"] == m and x["device_arg"] == d]
            med = {k: statistics.median(x[k] for x in rs) for k in ("load_s", "rss", "peak_rss", "kv_bytes",
                                                                     "first_tok_s", "warm_tok_s")}
            gguf = rs[0]["gguf_bytes"]
            summary.append({"model": m, "device": d, "load_s": med["load_s"], "rss_MB": med["rss"] / 1e6,
                            "peak_rss_MB": med["peak_rss"] / 1e6, "kv_MB": med["kv_bytes"] / 1e6,
                            "gguf_MB": gguf / 1e6, "rss_over_model_kv": med["rss"] / (gguf + med["kv_bytes"]),
                            "first_tok_s": med["first_tok_s"], "warm_tok_s": med["warm_tok_s"],
                            "first_over_warm": med["first_tok_s"] / med["warm_tok_s"]})
    for s in summary:
        print(f"{s['model']:40s} {s['device']:9s} load {s['load_s']:5.2f} s  rss {s['rss_MB']:6.0f} MB "
              f"= {s['rss_over_model_kv']:.2f}x (gguf {s['gguf_MB']:.0f} + kv {s['kv_MB']:.0f})  "
              f"first/warm {s['first_tok_s']:.1f}/{s['warm_tok_s']:.1f} tok/s", file=sys.stderr)
    report = {"bench": "load", "cpu": platform.processor() or platform.machine(),
              "cpu_model": next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                                 if ln.startswith("model name")), ""),
              "nproc": os.cpu_count(), "rounds": args.rounds, "tokens": args.tokens, "kv": args.kv,
              "summary": summary, "runs": runs}
    write_file_atomic(args.out, json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
