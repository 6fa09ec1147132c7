#!/usr/bin/env python3
"""llama.cpp (llama-cpp-python, CPU) on the models specdec runs: the peer figures that specdec's
own benchmark puts side by side with its numbers, measured in the same run.

Per model, with THREADS threads (this machine has 2 cores):
  decode_tok_s        one token per forward after a short prompt (greedy-like: the next input is
                      the argmax, so the cost is that of plain decoding)
  prefill_tok_s       one forward over a prompt of --prefill-tokens (logits of the last position)
  forward_ms_best[n]  a forward of n = 1, 2, 4, 8, 16 tokens at context --context with logits for
                      all n positions, as verifying n - 1 draft tokens needs (best and median of
                      --repeats rounds over all n); relative_cost[n] = forward_ms_best[n] /
                      forward_ms_best[1]
  decode_GBps         file bytes x decode_tok_s: the weight bandwidth decoding achieves

    bash bench/setup_peer.sh
    .venv/bin/python bench/peer_llamacpp.py [--models NAME_OR_PATH ...] [--out FILE]

Writes JSON to bench/out/peer_llamacpp.json with the load average before and after: on a
shared 2-core machine other work inflates every figure (llama.cpp's OpenMP threads spin), so
compare runs only at similar load. Not a test: nothing asserts on timings.
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
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from specdec._files import check_output_file, write_file_atomic  # noqa: E402
from prompts import LONG  # noqa: E402

DEFAULT_MODELS = ["smollm2-135m-instruct-q4_1", "gemma-3-270m-q4_k_m",
                  "qwen2.5-coder-0.5b-instruct-q4_k_m", "qwen2.5-coder-1.5b-instruct-q4_k_m"]
N_VALUES = (1, 2, 4, 8, 16)
THREADS = 2


def _resolve(name_or_path: str) -> str:
    if os.path.exists(name_or_path):
        return name_or_path
    import specdec
    return specdec.resolve_model(name_or_path)


class Peer:
    """A llama.cpp context. ``forward(ids, n_past, all_logits)`` runs one batch after rolling the
    KV cache back to ``n_past`` tokens (llama-cpp-python's eval removes cells >= n_tokens)."""

    def __init__(self, path: str, n_ctx: int) -> None:
        from llama_cpp import Llama
        self.llm = Llama(model_path=path, n_ctx=n_ctx, n_batch=512, n_ubatch=512, logits_all=True,
                         n_threads=THREADS, n_threads_batch=THREADS, verbose=False)

    def forward(self, ids: Sequence[int], n_past: int, all_logits: bool) -> float:
        """Seconds for one llama_decode of ``ids`` at position n_past."""
        self.llm.n_tokens = n_past
        self.llm._logits_all = all_logits  # False: only the last position's logits are computed
        t = time.perf_counter()
        self.llm.eval(list(ids))
        return time.perf_counter() - t

    def last_argmax(self) -> int:
        import llama_cpp
        ptr = llama_cpp.llama_get_logits_ith(self.llm._ctx.ctx, -1)
        return int(np.ctypeslib.as_array(ptr, shape=(self.llm.n_vocab(),)).argmax())


def _prompt_ids(peer: Peer, n: int) -> List[int]:
    ids = peer.llm.tokenize(LONG.encode("utf-8"), add_bos=True)
    while len(ids) < n:
        ids += ids[1:]
    return ids[:n]


def bench_model(name: str, decode_tokens: int, prefill_tokens: int, context: int,
                repeats: int) -> Dict[str, object]:
    path = _resolve(name)
    peer = Peer(path, n_ctx=max(2048, prefill_tokens + 64, context + max(N_VALUES) + 8))
    ids = _prompt_ids(peer, max(prefill_tokens, context + max(N_VALUES)))
    peer.forward(ids[:64], 0, False)                                     # warm-up: page in weights

    prefill = [peer.forward(ids[:prefill_tokens], 0, False) for _ in range(max(2, repeats // 2))]

    peer.forward(ids[:16], 0, False)                                     # decode after 16 tokens
    tok, steps = peer.last_argmax(), []
    for i in range(decode_tokens):
        steps.append(peer.forward([tok], 16 + i, False))
        tok = peer.last_argmax()

    peer.forward(ids[:context], 0, False)
    costs = forward_costs(lambda n: peer.forward(ids[context:context + n], context, True), repeats)
    decode_s = statistics.median(steps)
    decode_best = float(np.percentile(steps, 10))
    size = os.path.getsize(path)
    entry = {
        "model": name, "path": path, "file_bytes": size,
        "decode_tokens": decode_tokens,
        "decode_tok_s": 1.0 / decode_s, "decode_ms_per_token": decode_s * 1e3,
        "decode_tok_s_p10": 1.0 / decode_best,      # from the 10th-percentile step time
        "decode_GBps": size / decode_s / 1e9,
        "prefill_tokens": prefill_tokens, "prefill_tok_s": prefill_tokens / min(prefill),
        "prefill_tok_s_median": prefill_tokens / statistics.median(prefill),
        "forward_context": context, **costs,
    }
    print(summary_line(name.ljust(40), entry), flush=True)
    return entry


def forward_costs(forward: Callable[[int], float], repeats: int) -> Dict[str, object]:
    """Times forward(n) (seconds) for every n in N_VALUES, in `repeats` rounds over all n (load from
    elsewhere then hits every n alike): best and median ms, and both relative to n = 1."""
    times: Dict[int, List[float]] = {n: [] for n in N_VALUES}
    for _ in range(repeats):
        for n in N_VALUES:
            times[n].append(forward(n))
    best = {n: min(v) * 1e3 for n, v in times.items()}
    median = {n: statistics.median(v) * 1e3 for n, v in times.items()}
    return {
        "forward_repeats": repeats,
        "forward_ms_best": {str(n): v for n, v in best.items()},
        "forward_ms_median": {str(n): v for n, v in median.items()},
        "relative_cost": {str(n): best[n] / best[1] for n in N_VALUES},        # from best times
        "relative_cost_median": {str(n): median[n] / median[1] for n in N_VALUES},
    }


def summary_line(label: str, entry: Dict[str, object]) -> str:
    return (f"{label} decode {entry['decode_tok_s']:7.1f} tok/s  prefill "
            f"{entry['prefill_tok_s']:7.1f} tok/s  n-cost "
            + " ".join(f"{n}:{entry['relative_cost'][str(n)]:.2f}" for n in N_VALUES))


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="*", default=DEFAULT_MODELS, help="catalog names or paths")
    ap.add_argument("--decode-tokens", type=int, default=64)
    ap.add_argument("--prefill-tokens", type=int, default=512)
    ap.add_argument("--context", type=int, default=128, help="tokens before the n-token forwards")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "peer_llamacpp.json"))
    args = ap.parse_args(argv)
    default_folder = Path(args.out).resolve().parent == ROOT / "bench" / "out"  # created if missing
    check_output_file(args.out, "--out", create_folder=default_folder)  # before the run

    import llama_cpp
    report = {"what": "llama.cpp CPU decode / prefill / n-token forward cost",
              "llama_cpp_python": llama_cpp.__version__, "threads": THREADS,
              "machine": f"{platform.machine()}, {os.cpu_count()} cores",
              "load_average_before": os.getloadavg(),
              "llama_cpp_system_info": llama_cpp.llama_print_system_info().decode().strip(),
              "models": []}
    for name in args.models:
        report["models"].append(bench_model(name, args.decode_tokens, args.prefill_tokens,
                                            args.context, args.repeats))
    report["load_average_after"] = os.getloadavg()  # other work on the machine skews timings
    write_file_atomic(args.out, json.dumps(report, indent=1) + "\n", "--out")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
