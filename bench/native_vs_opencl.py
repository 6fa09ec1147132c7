#!/usr/bin/env python3
"""The native CPU device beside OpenCL (PoCL on a CPU) in one run: decode tok/s of plain and
speculative generation for one model (and drafter), on both devices, rounds interleaved, each
device's speculative output checked against its own plain output (greedy: token for token).

    .venv/bin/python bench/native_vs_opencl.py [--model smollm2-135m-instruct-q4_1]
        [--drafter MODEL] [--method plain draft_model ngram] [--k 4] [--tokens 64]
        [--requests 1] [--rounds 2] [--kv-bytes N] [--out bench/out/native_vs_opencl.json]

Not a test: numbers for reading. The JSON records the CPU, the native device's SIMD path and
threads and the OpenCL device's name beside every figure.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import specdec
from specdec import _core
from specdec._files import check_output_file, write_file_atomic

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["def fib(n):\n    if n < 2:\n        return n\n", "import numpy as np\n\ndef softmax(x):\n",
           "class Stack:\n    def __init__(self):\n", "def quicksort(xs):\n"]


def spec_of(method: str, model: str, drafter: str, k: int):
    if method == "plain":
        return None
    if method == "draft_model":
        return {"method": "draft_model", "model": drafter or model, "num_speculative_tokens": k}
    if method == "ngram":
        return {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": 1, "prompt_lookup_max": 4}
    return {"method": method, "num_speculative_tokens": k}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct-q4_1")
    ap.add_argument("--drafter", default="")
    ap.add_argument("--method", nargs="+", default=["plain", "draft_model", "ngram"])
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--requests", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--kv-bytes", type=int, default=256 << 20,
                    help="each engine's KV cache (several engines are open at once)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "native_vs_opencl.json"))
    a = ap.parse_args()
    check_output_file(a.out, "--out", create_folder=Path(a.out).resolve().parent == ROOT / "bench" / "out")
    params = specdec.SamplingParams(temperature=0, max_tokens=a.tokens, ignore_eos=True)
    prompts = [PROMPTS[i % len(PROMPTS)] for i in range(a.requests)]
    devices = {"native": "native", "opencl": "ocl:auto"}
    llms, tokens, rates = {}, {}, {}
    for dev, sel in devices.items():
        for m in a.method:
            spec = spec_of(m, a.model, a.drafter, a.k)
            if spec and spec["method"] == "draft_model":
                spec["draft_kv_cache_memory_bytes"] = a.kv_bytes // 3  # its share of the total
            llm = specdec.LLM(a.model, progress=False, device=sel, speculative_config=spec,
                              kv_cache_memory_bytes=a.kv_bytes, max_model_len=2048)
            llm.generate(prompts, params)  # warm
            llms[(dev, m)] = llm
    for _ in range(a.rounds):
        for m in a.method:
            for dev in devices:
                llm = llms[(dev, m)]
                t0 = time.perf_counter()
                outs = llm.generate(prompts, params)
                dt = time.perf_counter() - t0
                toks = [o.outputs[0].token_ids for o in outs]
                tokens[(dev, m)] = toks
                rates.setdefault((dev, m), []).append(sum(map(len, toks)) / dt)
                print(f"{dev:7s} {m:12s} {rates[(dev, m)][-1]:7.1f} tok/s", flush=True)
    results = []
    for m in a.method:
        row = {"method": m, "k": a.k if m != "plain" else 0}
        for dev in devices:
            row[f"{dev}_tok_s"] = statistics.median(rates[(dev, m)])
            row[f"{dev}_lossless"] = tokens[(dev, m)] == tokens[(dev, "plain")] if "plain" in a.method else None
            if m != "plain":
                mt = llms[(dev, m)].last_metrics
                row[f"{dev}_acceptance"] = mt.get("acceptance_rate")
        row["native_over_opencl"] = row["native_tok_s"] / row["opencl_tok_s"]
        results.append(row)
        print(json.dumps(row), flush=True)
    native_ctx = llms[("native", a.method[0])].context
    opencl_ctx = llms[("opencl", a.method[0])].context
    doc = {"machine": {"cpu": native_ctx.device.name, "native_path": _core.quant_isa(native_ctx),
                       "native_threads": native_ctx.device.compute_units,
                       "opencl_device": opencl_ctx.device.name, "opencl_quant_isa": _core.quant_isa(opencl_ctx),
                       "python": platform.python_version()},
           "model": a.model, "drafter": a.drafter or a.model, "tokens": a.tokens, "requests": a.requests,
           "rounds": a.rounds, "results": results}
    write_file_atomic(a.out, json.dumps(doc, indent=1) + "\n", "--out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
