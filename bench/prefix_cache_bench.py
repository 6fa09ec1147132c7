#!/usr/bin/env python3
"""Automatic prefix caching on a real model: requests that share a long system prompt, and a
multi-turn chat, with and without the cache, side by side in one run (alternating rounds).

Per setting: prompt tokens, prefill tokens computed (the rest came from the cache), time to first
token per request (median), total seconds, and whether every output equals the uncached one.

    .venv/bin/python bench/prefix_cache_bench.py [--model M] [--rounds 2] [--out FILE]

Writes bench/out/prefix_cache_bench.json. Not a test: nothing asserts on timings.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
import specdec  # noqa: E402
from specdec._files import write_file_atomic  # noqa: E402
from specdec.bench import machine_info  # noqa: E402

SYSTEM = ("You are a senior Python reviewer. Follow the team's rules: " + " ".join(
    f"Rule {i}: prefer clear names, small functions, type hints, docstrings, tests for every "
    f"branch, no global state, explicit errors that name the bad value, and comments that explain "
    f"why rather than what." for i in range(1, 13)))
QUESTIONS = ["How should I name a function that parses dates?", "Is a global cache ever fine?",
             "What belongs in a docstring?", "How small is a small function?",
             "Should tests cover error messages?", "When are comments useful?"]


def run(llm, params):
    """Shared system prompt (one request after another), then a 3-turn chat."""
    out = {"ttft": [], "texts": [], "prompt_tokens": 0, "cached_tokens": 0}
    t0 = time.perf_counter()
    before = llm.engine.core.stats.prefill_tokens
    for q in QUESTIONS:
        o = llm.chat([{"role": "system", "content": SYSTEM}, {"role": "user", "content": q}], params)[0]
        out["ttft"].append(o.metrics["time_to_first_token"])
        out["texts"].append(o.outputs[0].text)
        out["prompt_tokens"] += len(o.prompt_token_ids)
        out["cached_tokens"] += o.metrics["num_cached_tokens"]
    convo = [{"role": "system", "content": SYSTEM}]
    for q in QUESTIONS[:3]:
        convo.append({"role": "user", "content": q})
        o = llm.chat(convo, params)[0]
        convo.append({"role": "assistant", "content": o.outputs[0].text})
        out["ttft"].append(o.metrics["time_to_first_token"])
        out["texts"].append(o.outputs[0].text)
        out["prompt_tokens"] += len(o.prompt_token_ids)
        out["cached_tokens"] += o.metrics["num_cached_tokens"]
    out["seconds"] = time.perf_counter() - t0
    out["prefill_tokens_computed"] = llm.engine.core.stats.prefill_tokens - before
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct-q4_k_m")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "prefix_cache_bench.json"))
    a = ap.parse_args()
    params = specdec.SamplingParams(temperature=0, max_tokens=a.max_tokens)
    llms = {pc: specdec.LLM(a.model, progress=False, max_model_len=2048, max_num_seqs=2,
                            enable_prefix_caching=pc) for pc in (False, True)}
    rounds = []
    for i in range(a.rounds):
        for pc in ((False, True) if i % 2 == 0 else (True, False)):
            llms[pc].reset_prefix_cache()
            r = run(llms[pc], params)
            r["prefix_caching"] = pc
            rounds.append(r)
    summary = {}
    for pc in (False, True):
        rs = [r for r in rounds if r["prefix_caching"] == pc]
        summary["on" if pc else "off"] = {
            "prompt_tokens": rs[0]["prompt_tokens"], "cached_tokens": rs[0]["cached_tokens"],
            "prefill_tokens_computed": rs[0]["prefill_tokens_computed"],
            "ttft_median_s": [statistics.median(r["ttft"]) for r in rs],
            "seconds": [r["seconds"] for r in rs]}
    ref = [r["texts"] for r in rounds if not r["prefix_caching"]][0]
    summary["outputs_identical"] = all(r["texts"] == ref for r in rounds)
    report = {"machine": machine_info(llms[True].context),
              "date": time.strftime("%Y-%m-%d"), "model": a.model, "config": vars(a),
              "summary": summary, "rounds": [{k: v for k, v in r.items() if k != "texts"} for r in rounds]}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    write_file_atomic(a.out, json.dumps(report, indent=1))
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
