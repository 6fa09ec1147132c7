#!/usr/bin/env python3
"""Host time per engine step: what a step costs beyond the target's forward and the proposer's
call (Python orchestration + the Python <-> C++ crossings: scheduling, verification, rollback,
counters, stops, the outputs delivered to callers), on decode / verify steps of N concurrent
requests.

    .venv/bin/python bench/host_overhead.py [--model smollm2-135m-instruct-q4_1]
        [--requests 1 16] [--method ngram draft_model] [--k 4] [--tokens 64]
        [--out bench/out/host_overhead.json]

The forward (runner.step) and the proposer's propose call are timed around the calls and
subtracted from each step's wall time; the rest is host time. draft_model drafts with the target
itself (every draft accepted when greedy): the step's shape with k + 1 rows per request. Steps
with a prefill chunk are left out. Works on any checkout of the engine (it wraps the runner and
the proposer the engine holds), so the same script measures before and after a change.
Not a test: numbers for reading, like every benchmark here.
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
from specdec._files import check_output_file, write_file_atomic

ROOT = Path(__file__).resolve().parents[1]
PROMPT = ("def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n"
          "def mul(a, b):\n    return a * b\n\ndef div(a, b):\n    return a / b\n\n")


class _Timed:
    """Delegates to `inner`, adding the seconds spent in `name` calls to `box[0]` (wall) and
    `box[1]` (this thread's CPU time)."""

    def __init__(self, inner, name: str, box: list) -> None:
        object.__setattr__(self, "_inner", inner)
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_box", box)

    def __getattr__(self, attr):
        value = getattr(self._inner, attr)
        if attr != self._name:
            return value

        def timed(*a, **kw):
            t0, c0 = time.perf_counter(), time.thread_time()
            try:
                return value(*a, **kw)
            finally:
                self._box[0] += time.perf_counter() - t0
                self._box[1] += time.thread_time() - c0
        return timed


def measure(model: str, method: str, n: int, k: int, tokens: int, temperature: float) -> dict:
    spec = None
    if method == "ngram":
        spec = {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": 1, "prompt_lookup_max": 4}
    elif method == "draft_model":
        spec = {"method": "draft_model", "model": model, "num_speculative_tokens": k}
    llm = specdec.LLM(model, progress=False, speculative_config=spec, max_num_seqs=max(16, n),
                      max_num_batched_tokens=max(512, n * (k + 1)))
    core = llm.engine.core
    fwd, prop, call = [0.0, 0.0], [0.0, 0.0], [0.0]
    core.runner = _Timed(core.runner, "step", fwd)
    if core.proposer is not None:
        core.proposer = _Timed(core.proposer, "propose", prop)
    if hasattr(core, "propose_and_step"):  # a drafting model proposes inside the forward's call
        fused = core.propose_and_step

        def timed_fused(proposer, asks, rows, runner, steps, need_logits, *verify):
            t0, c0 = time.perf_counter(), time.thread_time()
            got = fused(proposer._inner, asks, rows, runner._inner, steps, need_logits, *verify)
            wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
            seconds = got[2]
            prop[0] += seconds
            prop[1] += seconds  # the drafter runs in this thread too
            # the call times its forward (got[3]): the binding and verification in it are host time;
            # older engines: the whole call less its drafting counted as forward
            fwd[0] += got[3] if len(got) > 3 else wall - seconds
            fwd[1] += cpu - seconds  # this thread's CPU time in the call (it waits on the forward)
            call[0] += wall - seconds - (got[3] if len(got) > 3 else wall - seconds)
            return got
        core.propose_and_step = timed_fused
    if hasattr(core, "decode_step"):  # a decode / verify step scheduled and verified in one call
        whole = core.decode_step

        def timed_whole(proposer, runner, *rest):
            t0, c0 = time.perf_counter(), time.thread_time()
            got = whole(proposer._inner, runner._inner, *rest)
            wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
            if got is None:
                call[0] += wall  # scheduling found a request short of blocks: host time
                return got
            seconds, forward = got[2], got[3]
            prop[0] += seconds
            prop[1] += seconds
            fwd[0] += forward
            fwd[1] += cpu - seconds
            call[0] += wall - seconds - forward
            return got
        core.decode_step = timed_whole
    engine = llm.engine
    rows, step = [], engine._step_locked  # the engine's step: core.step and the outputs it delivers

    def timed_step():
        decode = not core.scheduler.waiting and bool(core.scheduler.running)
        fwd[:] = [0.0, 0.0]
        prop[:] = [0.0, 0.0]
        call[0] = 0.0
        t0, c0 = time.perf_counter(), time.thread_time()
        out = step()
        wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
        if decode and fwd[0] > 0:
            rows.append((wall, fwd[0], prop[0], cpu - fwd[1] - prop[1], call[0]))
        return out

    engine._step_locked = timed_step
    params = specdec.SamplingParams(temperature=temperature, max_tokens=tokens, ignore_eos=True, seed=1)
    llm.generate([PROMPT + f"# {i}\n" for i in range(n)], params)  # warm
    rows.clear()
    llm.generate([PROMPT + f"# {i}\n" for i in range(n)], params)
    host = sorted((w - f - p) * 1e3 for w, f, p, *_ in rows)
    host_cpu = sorted(r[3] * 1e3 for r in rows)
    return {"model": model, "method": method, "requests": n, "k": k if spec else 0,
            "temperature": temperature, "steps": len(rows),
            "host_ms_median": statistics.median(host), "host_ms_p10": host[len(host) // 10],
            "host_ms_p90": host[9 * len(host) // 10],
            # the engine thread's own CPU time outside the two calls: host work without the time
            # the thread waited for a core
            "host_cpu_ms_median": statistics.median(host_cpu),
            # of host_ms: the part inside a fused propose-forward(-verify) call (binding, verification)
            "host_in_call_ms_median": statistics.median(r[4] * 1e3 for r in rows),
            "forward_ms_median": statistics.median(r[1] * 1e3 for r in rows),
            "propose_ms_median": statistics.median(r[2] * 1e3 for r in rows),
            "step_ms_median": statistics.median(r[0] * 1e3 for r in rows)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct-q4_1")
    ap.add_argument("--requests", type=int, nargs="+", default=[1, 16])
    ap.add_argument("--method", nargs="+", default=["ngram", "draft_model"])
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--temperature", type=float, nargs="+", default=[0.0])
    ap.add_argument("--label", default="", help="a name for this checkout in the JSON (before / after)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "host_overhead.json"))
    a = ap.parse_args()
    check_output_file(a.out, "--out", create_folder=Path(a.out).resolve().parent == ROOT / "bench" / "out")
    results = []
    for method in a.method:
        for n in a.requests:
            for t in a.temperature:
                r = measure(a.model, method, n, a.k, a.tokens, t)
                r["label"] = a.label
                results.append(r)
                print(json.dumps(r), flush=True)
    doc = {"machine": {"cpu": _cpu(), "python": platform.python_version()}, "results": results}
    write_file_atomic(a.out, json.dumps(doc, indent=1) + "\n", "--out")
    return 0


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


if __name__ == "__main__":
    sys.exit(main())
