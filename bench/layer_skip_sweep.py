"""Layer-skip self-drafting per exit layer: acceptance per draft position, mean acceptance length
and decode tokens/s against plain decoding, on the real models (no second model needed).

    .venv/bin/python bench/layer_skip_sweep.py [--models M ...] [--k 3] [--max-tokens 64]
        [--categories code_generation chat] [--out bench/out/layer_skip_sweep.json]

Per model: plain decoding, then method layer_skip with each fixed exit layer (a quarter, half and
three quarters of the depth, and 3 and 1 layers short of it) and with exit layer "auto", one
request at a time on the chat-templated prompts of `specdec bench`, greedy. Every output is
checked against plain decoding (lossless). Modes run in alternating order over --rounds rounds;
tokens/s and speedups are medians of the rounds (speedups against plain decoding of the same
round), acceptance is the first round's (it does not depend on timing, except for "auto")."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

import specdec  # noqa: E402
from specdec import _core  # noqa: E402
from specdec._files import check_output_file, write_file_atomic  # noqa: E402
from specdec.bench import PROMPTS, _prompt_ids, _run_one, machine_info  # noqa: E402

MODELS = ["smollm2-135m-instruct-q4_1", "gemma-3-270m-q4_k_m", "qwen2.5-coder-0.5b-instruct-q4_k_m",
          "qwen2.5-coder-1.5b-instruct-q4_k_m"]


def exit_layers(n: int) -> list:
    picks = {round(n * f) for f in (0.25, 0.5, 0.75)} | {n - 3, n - 1}
    return sorted(x for x in picks if 1 <= x < n)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=MODELS)
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--categories", nargs="+", default=["code_generation", "chat"], choices=list(PROMPTS))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--modes", nargs="+", default=["plain", "fixed", "auto"], choices=["plain", "fixed", "auto"],
                    help="which rows (plain decoding is always run: every row is checked against it)")
    default_out = str(ROOT / "bench" / "out" / "layer_skip_sweep.json")
    ap.add_argument("--out", default=default_out)
    a = ap.parse_args()
    check_output_file(a.out, "--out", create_folder=a.out == default_out)  # before the run
    result = {"k": a.k, "max_tokens": a.max_tokens, "categories": a.categories, "rounds": a.rounds,
              "models": {}}
    for name in a.models:
        path = specdec.resolve_model(name)
        llm = specdec.LLM(path, max_model_len=1024, kv_cache_memory_bytes="256MiB", progress=False,
                          max_num_seqs=1)
        result.setdefault("machine", machine_info(llm.context))
        n = llm.runner.config.num_layers
        ids = _prompt_ids(llm.tokenizer, a.categories, 1024 - a.max_tokens - 8)
        modes = ([("plain", None)] + ([(f"L={x}", x) for x in exit_layers(n)] if "fixed" in a.modes else [])
                 + ([("auto", 0)] if "auto" in a.modes else []))
        runs: dict = {}
        for rnd in range(a.rounds):
            order = modes if rnd % 2 == 0 else modes[::-1]
            for label, x in order:
                for cat, prompt in ids.items():
                    proposer = None if x is None else _core.spec_decode.LayerSkipProposer(llm.runner, x)
                    out, core = _run_one(llm, proposer, 0 if x is None else a.k, False, prompt, a.max_tokens)
                    m = out.metrics
                    row = {"tokens": list(out.outputs[0].token_ids), "tokens_per_s": m["tokens_per_s"],
                           "acceptance_rate_per_pos": list(m["acceptance_rate_per_pos"]),
                           "mean_acceptance_length": m["mean_acceptance_length"],
                           "num_drafts": m["num_drafts"], "num_accepted_tokens": m["num_accepted_tokens"]}
                    if proposer is not None and x == 0:
                        row["exit_layer"] = proposer.exit_layer
                        row["exit_layer_stats"] = proposer.stats()
                    runs.setdefault((label, cat), []).append(row)
                    print(f"{name} {label:6s} {cat:16s} {row['tokens_per_s']:7.2f} tok/s  accept/pos "
                          f"{[round(v, 2) for v in row['acceptance_rate_per_pos']]}  mean length "
                          f"{row['mean_acceptance_length']:.2f}", flush=True)
        rows = []
        for label, x in modes:
            for cat in ids:
                per = runs[(label, cat)]
                plain = runs[("plain", cat)]
                first = per[0]
                rows.append({
                    "mode": label, "exit_layer": x, "category": cat,
                    "lossless": all(r["tokens"] == p["tokens"] for r, p in zip(per, plain)),
                    "tokens_per_s": statistics.median(r["tokens_per_s"] for r in per),
                    "speedup_vs_plain": statistics.median(r["tokens_per_s"] / p["tokens_per_s"]
                                                          for r, p in zip(per, plain)),
                    **{k: v for k, v in first.items() if k not in ("tokens", "tokens_per_s")},
                })
        result["models"][name] = {"num_layers": n, "rows": rows}
        print(f"{name}: {n} layers", file=sys.stderr)
        for r in rows:
            print(f"  {r['mode']:6s} {r['category']:16s} {r['tokens_per_s']:7.2f} tok/s "
                  f"({r['speedup_vs_plain']:.2f}x)  first-position acceptance "
                  f"{(r['acceptance_rate_per_pos'] or [float('nan')])[0]:.2f}  mean length "
                  f"{r['mean_acceptance_length']:.2f}  lossless {r['lossless']}", file=sys.stderr)
        del llm
    write_file_atomic(a.out, json.dumps(result, indent=1) + "\n", "--out")
    print(f"wrote {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
