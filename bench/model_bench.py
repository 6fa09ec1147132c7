#!/usr/bin/env python3
"""specdec's plain forward on the real models, side by side with llama.cpp in the same run.

Per model (same methodology as bench/peer_llamacpp.py, which measures the peer):
  decode_tok_s      one token per forward after a 16-token prompt, the next input the argmax
  prefill_tok_s     one forward over --prefill-tokens tokens (logits of the last position)
  forward_ms_best[n]  a forward of n = 1, 2, 4, 8, 16 tokens after --context tokens, with logits
                    for all n (what verifying n - 1 drafts costs), best of --repeats rounds over
                    all n (median too); relative_cost[n] = forward_ms_best[n] / forward_ms_best[1]
                    (relative_cost_median likewise); the request is rolled back after each forward
  decode_GBps       weight bytes on the device x decode_tok_s
and the ratios specdec / llama.cpp. The machine's streaming read bandwidth is measured in the
same run (numpy copy of 512 MiB) for context.

    bash bench/setup_peer.sh            # llama-cpp-python (pinned), once
    .venv/bin/python bench/model_bench.py [--models ...] [--rounds N] [--no-peer] [--out FILE]

Writes bench/out/model_bench.json. Not a test: nothing asserts on timings.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Dict, Optional, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import specdec  # noqa: E402
from specdec import _core  # noqa: E402
from specdec._core import StepRequest  # noqa: E402
from specdec._files import check_output_file, write_file_atomic  # noqa: E402

from peer_llamacpp import DEFAULT_MODELS, N_VALUES, forward_costs, summary_line  # noqa: E402
from prompts import LONG  # noqa: E402


def host_read_GBps() -> float:
    a = np.ones(64 << 20, dtype=np.float64)  # 512 MiB
    best = 0.0
    for _ in range(3):
        t = time.perf_counter()
        a.sum()
        best = max(best, a.nbytes / (time.perf_counter() - t) / 1e9)
    return best


def _timed_step(runner, reqs) -> float:
    t = time.perf_counter()
    runner.step(reqs)
    return time.perf_counter() - t


def bench_ours(ctx, name: str, decode_tokens: int, prefill_tokens: int, context: int,
               repeats: int) -> Dict[str, object]:
    path = specdec.resolve_model(name)
    tok = specdec.Tokenizer.from_file(path)
    ids = tok.encode(LONG)
    while len(ids) < max(prefill_tokens, context + max(N_VALUES)):
        ids += ids[1:]
    runner = _core.ModelRunner(ctx, path, "", 2048, 256 << 20,
                               max_num_batched_tokens=max(prefill_tokens, 64), max_num_logits=32)
    # warm-up: every kernel variant built once
    runner.step([StepRequest("w", ids[:64])])
    for n in N_VALUES:
        runner.step([StepRequest("w", ids[64:64 + n], num_computed_tokens=64, num_logits=n)])
        runner.truncate("w", 64)
    runner.free("w")

    prefill = []
    for _ in range(max(2, repeats // 2)):
        prefill.append(_timed_step(runner, [StepRequest("p", ids[:prefill_tokens])]))
        runner.free("p")

    out = runner.step([StepRequest("d", ids[:16])])
    t = int(np.argmax(out.logits[0]))
    steps = []
    for i in range(decode_tokens):
        t0 = time.perf_counter()
        out = runner.step([StepRequest("d", [t], num_computed_tokens=16 + i)])
        steps.append(time.perf_counter() - t0)
        t = int(np.argmax(out.logits[0]))
    runner.free("d")

    runner.step([StepRequest("v", ids[:context])])
    def forward(n: int) -> float:
        t = _timed_step(runner, [StepRequest("v", ids[context:context + n], num_computed_tokens=context,
                                             num_logits=n)])
        runner.truncate("v", context)
        return t

    costs = forward_costs(forward, repeats)
    runner.free("v")
    decode_s = statistics.median(steps)
    entry = {
        "model": name, "weight_bytes": runner.weight_bytes,
        "attention_backends": sorted(set(runner.attention_backends)),
        "decode_tok_s": 1.0 / decode_s, "decode_ms_per_token": decode_s * 1e3,
        "decode_GBps": runner.weight_bytes / decode_s / 1e9,
        "prefill_tokens": prefill_tokens, "prefill_tok_s": prefill_tokens / min(prefill),
        "forward_context": context, **costs,
    }
    print(summary_line(f"specdec   {name:38s}", entry), flush=True)
    return entry


def llama_bench_tool(bindir: Path, name: str, decode_tokens: int, prefill_tokens: int,
                     repeats: int) -> Dict[str, object]:
    """llama.cpp measured by its own llama-bench (same threads as cores): tg, pp, and a forward of
    n tokens as pp<n> (n / tokens per second; a fresh context, all n logits not requested)."""
    import subprocess
    path = str(specdec.fetch(name, progress=False))
    ns = ",".join(str(n) for n in N_VALUES)
    cmd = [str(bindir / "llama-bench"), "-m", path, "-p", f"{ns},{prefill_tokens}", "-n", str(decode_tokens),
           "-t", str(os.cpu_count() or 2), "-r", str(max(3, repeats // 2)), "-o", "json"]
    rows = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    fwd, out = {}, {}
    for r in rows:
        if r["n_gen"] > 0:
            out["decode_tok_s"] = r["avg_ts"]
        elif r["n_prompt"] == prefill_tokens:
            out["prefill_tok_s"] = r["avg_ts"]
        if r["n_gen"] == 0 and r["n_prompt"] in N_VALUES:
            fwd[str(r["n_prompt"])] = 1e3 * r["n_prompt"] / r["avg_ts"]
    out["forward_ms_best"] = fwd
    out["relative_cost"] = {n: fwd[n] / fwd["1"] for n in fwd}
    out["source"] = " ".join(cmd[1:])
    print(f"  llama.cpp (llama-bench) {name}: decode {out['decode_tok_s']:.1f} tok/s, prefill "
          f"{out['prefill_tok_s']:.1f}, 4-token forward {out['relative_cost']['4']:.2f}x", flush=True)
    return out


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="*", default=DEFAULT_MODELS)
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--prefill-tokens", type=int, default=512)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--rounds", type=int, default=1,
                    help="per model, specdec and llama.cpp this many times in alternating order "
                         "(specdec first, then llama.cpp first, ...): the per-round decode ratios "
                         "and their median, what to read on a noisy machine (default 1)")
    ap.add_argument("--no-peer", action="store_true", help="skip llama.cpp")
    ap.add_argument("--peer-tools", default=None,
                    help="measure llama.cpp with llama-bench from this folder (bench/setup_peer_tools.sh "
                         "installs into $SPECDEC_CACHE/peer-llama.cpp/bin, default "
                         "~/.cache/specdec/peer-llama.cpp/bin) instead of the llama-cpp-python package")
    ap.add_argument("--device", default="")
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "model_bench.json"))
    args = ap.parse_args(argv)
    default_folder = Path(args.out).resolve().parent == ROOT / "bench" / "out"  # created if missing
    check_output_file(args.out, "--out", create_folder=default_folder)  # before the run

    ctx = _core.Context(args.device)
    report: Dict[str, object] = {
        "what": "plain forward: specdec (OpenCL) and llama.cpp (CPU) side by side in one run",
        "device": ctx.device.name, "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "load_average_before": os.getloadavg(), "host_read_GBps": host_read_GBps(), "models": []}
    peer_bench = None
    if args.peer_tools and not args.no_peer:
        def peer_bench(name, decode_tokens, prefill_tokens, context, repeats):  # noqa: ARG001
            return llama_bench_tool(Path(args.peer_tools), name, decode_tokens, prefill_tokens, repeats)
        report["llama_cpp_tools"] = args.peer_tools
    elif not args.no_peer:
        import llama_cpp
        from peer_llamacpp import bench_model as peer_bench
        report["llama_cpp_python"] = llama_cpp.__version__
    if args.rounds < 1:
        raise SystemExit(f"--rounds = {args.rounds}: must be >= 1")
    for name in args.models:
        def ours_once():
            return bench_ours(ctx, name, args.decode_tokens, args.prefill_tokens, args.context, args.repeats)

        def peer_once():
            return peer_bench(name, args.decode_tokens, args.prefill_tokens, args.context, args.repeats)

        ours = ours_once()
        entry: Dict[str, object] = {"model": name, "specdec": ours}
        if peer_bench is not None:
            peer = peer_once()
            entry["llama_cpp"] = peer
            rounds = [(ours["decode_tok_s"], peer["decode_tok_s"])]
            for r in range(1, args.rounds):  # later rounds: decode only, the order alternating
                if r % 2:
                    p_, o_ = peer_once(), ours_once()
                else:
                    o_, p_ = ours_once(), peer_once()
                rounds.append((o_["decode_tok_s"], p_["decode_tok_s"]))
            if args.rounds > 1:
                ratios = [o / p for o, p in rounds]
                entry["decode_rounds"] = [{"specdec_tok_s": o, "llama_cpp_tok_s": p, "ratio": o / p}
                                          for o, p in rounds]
                entry["decode_ratio_rounds_median"] = statistics.median(ratios)
                print(f"  decode ratio per round: {', '.join(f'{x:.2f}' for x in ratios)}; median "
                      f"{statistics.median(ratios):.2f}x", flush=True)
            entry["ratio_specdec_over_llama_cpp"] = {
                "decode_tok_s": ours["decode_tok_s"] / peer["decode_tok_s"],
                "prefill_tok_s": ours["prefill_tok_s"] / peer["prefill_tok_s"],
            }
            print(f"  ratio decode {entry['ratio_specdec_over_llama_cpp']['decode_tok_s']:.2f}x, "
                  f"prefill {entry['ratio_specdec_over_llama_cpp']['prefill_tok_s']:.2f}x; "
                  f"4-token forward: specdec {ours['relative_cost']['4']:.2f}x, llama.cpp "
                  f"{peer['relative_cost']['4']:.2f}x of a 1-token forward", flush=True)
        report["models"].append(entry)
    report["load_average_after"] = os.getloadavg()
    write_file_atomic(args.out, json.dumps(report, indent=1) + "\n", "--out")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
