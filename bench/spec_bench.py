"""Speculative decoding on the real Qwen2.5-Coder pair (1.5B target, 0.5B drafter), greedy, one
request at a time, against specdec's own plain decoding and llama.cpp's plain and speculative
modes in the same run, on prompts of four kinds (code generation, code editing, chat,
summarisation). Writes JSON (and a PNG when matplotlib is there).

    bash bench/setup_peer_tools.sh          # llama.cpp's tools from the pinned sdist (~10 min)
    .venv/bin/python bench/spec_bench.py --max-tokens 128 --out bench/results/spec_bench.json

Every speculative output is checked token for token against plain decoding in the run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import specdec
from specdec import _core
from specdec.engine import EngineCore, LLMEngine

sys.path.insert(0, str(Path(__file__).resolve().parent))
from prompts import CODE, STORY  # noqa: E402

TARGET, DRAFTER = "qwen2.5-coder-1.5b-instruct-q4_k_m", "qwen2.5-coder-0.5b-instruct-q4_k_m"
PROMPTS = {
    "code_generation": "Write a Python function merge_intervals(intervals) that merges overlapping "
                       "intervals and returns them sorted, with a docstring and two doctests.",
    "code_editing": "Rewrite this function with type hints and a docstring. Keep the logic and the "
                    "names exactly the same and reply with the code only.\n\n```python\n" + CODE + "```",
    "chat": "What are three practical tips for staying focused when working from home? Answer in "
            "a short paragraph for each.",
    "summarisation": "Summarise the following story in three sentences.\n\n" + STORY,
}
PEER_BIN = Path(__file__).resolve().parents[1] / "build" / "peer-llama.cpp" / "bin"


def machine() -> Dict[str, object]:
    cpu = ""
    flags = set()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name") and not cpu:
                cpu = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    isa = [f for f in ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "amx_tile") if f in flags]
    dev = specdec.Context().device
    return {"cpu": cpu, "isa": isa, "cores": os.cpu_count(), "platform": platform.platform(),
            "opencl_device": dev.name, "specdec": specdec.__version__}


def run_specdec(llm, drafter, tokenizer, configs, prompt_ids, max_tokens) -> List[dict]:
    rows = []
    plain_ids = {}
    for name, cfg in configs:
        if cfg is None:
            proposer, k = None, 0
        else:
            sc = specdec.SpeculativeConfig(**cfg)
            k = sc.num_speculative_tokens
            if sc.method == "draft_model":
                proposer = _core.spec.DraftModelProposer(drafter, llm.config.vocab_size)
            elif sc.method == "ngram":
                proposer = _core.spec.NgramProposer(sc.prompt_lookup_min, sc.prompt_lookup_max, llm.runner.max_model_len)
            else:
                proposer = _core.spec.SuffixProposer(sc.suffix_decoding_max_tree_depth, sc.suffix_decoding_max_cached_requests,
                                                     sc.suffix_decoding_max_spec_factor, sc.suffix_decoding_min_token_prob,
                                                     llm.runner.max_model_len)
        for kind, ids in prompt_ids.items():
            core = EngineCore(llm.runner, tokenizer, proposer, k, 0, 1, 512, 128)
            engine = LLMEngine(core)
            params = specdec.SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
            req = llm._make_request({"prompt_token_ids": ids}, params)
            t0 = time.perf_counter()
            sink = engine.add_request(req)
            out = None
            for item in engine.iterate(sink, [req.request_id]):
                if item.finished:
                    out = item.output
            wall = time.perf_counter() - t0
            toks = out.outputs[0].token_ids
            if cfg is None:
                plain_ids[kind] = toks
            m = out.metrics
            st = core.stats.as_dict()
            dsteps = proposer.num_steps if isinstance(proposer, _core.spec.DraftModelProposer) else 0
            row = {
                "method": name, "config": cfg, "prompt": kind, "prompt_tokens": len(ids),
                "output_tokens": len(toks), "lossless": toks == plain_ids.get(kind),
                "tokens_per_s": m["tokens_per_s"], "wall_seconds": wall,
                "time_to_first_token": m["time_to_first_token"],
                "num_drafts": m["num_drafts"], "num_draft_tokens": m["num_draft_tokens"],
                "num_accepted_tokens": m["num_accepted_tokens"],
                "acceptance_rate": None if m["num_draft_tokens"] == 0 else m["acceptance_rate"],
                "acceptance_rate_per_pos": m["acceptance_rate_per_pos"],
                "mean_acceptance_length": m["mean_acceptance_length"],
                "engine_steps": st["num_steps"],
                "time_split_seconds": {k2: st[k2] for k2 in ("draft_seconds", "forward_seconds",
                                                              "sampling_seconds", "host_seconds")},
                "host_per_step_ms": 1e3 * (st["host_seconds"] + st["sampling_seconds"]) / max(st["num_steps"], 1),
            }
            if dsteps:
                row["drafter_steps_total"] = dsteps
            rows.append(row)
            acc = "-" if row["acceptance_rate"] is None else f"{100 * row['acceptance_rate']:.0f}%"
            print(f"  {name:18s} {kind:16s} {row['tokens_per_s']:6.2f} tok/s  accept {acc}  "
                  f"mean len {row['mean_acceptance_length']:.2f}  lossless {row['lossless']}", flush=True)
    return rows


def drafter_step_ms(drafter) -> float:
    """One single-token forward of the drafter (the smallest real drafter's step)."""
    drafter.step([("probe", list(range(100, 164)), 0, 1)], return_logits=False)
    times = []
    for i in range(20):
        t0 = time.perf_counter()
        drafter.step([("probe", [200 + i], 64 + i, 1)], return_logits=False)
        times.append(time.perf_counter() - t0)
    drafter.free("probe")
    times.sort()
    return 1e3 * times[len(times) // 2]


def run_peer(target: str, drafter: str, prompts: Dict[str, str], tokenizer, max_tokens: int,
             threads: int) -> List[dict]:
    rows = []
    if not (PEER_BIN / "llama-speculative-simple").exists():
        print(f"  llama.cpp tools not built ({PEER_BIN}); run bench/setup_peer_tools.sh", flush=True)
        return rows
    out = subprocess.run([str(PEER_BIN / "llama-bench"), "-m", target, "-p", "0", "-n", str(max_tokens),
                          "-t", str(threads), "-r", "2", "-o", "json"], capture_output=True, text=True)
    try:
        tg = json.loads(out.stdout)[0]["avg_ts"]
    except Exception:  # noqa: BLE001
        tg = None
    rows.append({"method": "llama.cpp plain (llama-bench tg)", "prompt": "-", "tokens_per_s": tg})
    print(f"  llama.cpp plain       {tg} tok/s", flush=True)
    for kind, text in prompts.items():
        chat = tokenizer.apply_chat_template([{"role": "user", "content": text}])
        draft = ["-md", drafter, "--spec-type", "draft-simple", "--spec-draft-n-min", "0"]
        for mode, args in (("llama.cpp draft_model k=3", draft + ["--spec-draft-n-max", "3"]),
                           ("llama.cpp draft_model k=6", draft + ["--spec-draft-n-max", "6"]),
                           ("llama.cpp lookup k=4", ["--spec-draft-n-max", "4"])):
            exe = "llama-lookup" if "lookup" in mode else "llama-speculative-simple"
            cmd = [str(PEER_BIN / exe), "-m", target, *args, "-p", chat, "-n", str(max_tokens),
                   "-t", str(threads), "--temp", "0", "-c", "2048", "--ignore-eos"]
            r = subprocess.run(cmd, capture_output=True, text=True)
            log = r.stdout + r.stderr
            speed = re.search(r"decoded\s+(\d+)\s+tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s", log)
            acc = re.search(r"accept\s*=\s*([\d.]+)%", log)
            rows.append({"method": mode, "prompt": kind, "tokens_per_s": float(speed.group(3)) if speed else None,
                         "acceptance_rate": float(acc.group(1)) / 100 if acc else None,
                         "returncode": r.returncode,
                         "log_tail": None if speed else log[-600:]})
            print(f"  {mode:26s} {kind:16s} {rows[-1]['tokens_per_s']} tok/s accept {rows[-1]['acceptance_rate']}", flush=True)
    return rows


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--ks", default="2,4", help="draft_model k values")
    ap.add_argument("--no-peer", action="store_true")
    ap.add_argument("--out", default="bench/results/spec_bench.json")
    args = ap.parse_args(argv)
    target, drafter_path = specdec.fetch(TARGET, progress=False), specdec.fetch(DRAFTER, progress=False)
    info = machine()
    print(f"machine: {info['cpu']} ({', '.join(info['isa'])}), OpenCL {info['opencl_device']}", flush=True)
    llm = specdec.LLM(str(target), max_model_len=2048, kv_cache_memory_bytes="256MiB", progress=False,
                      max_num_seqs=1)
    drafter = _core.ModelRunner(llm.context, str(drafter_path), "", llm.runner.max_model_len, 128 << 20,
                                16, "f16", 512, 128, None)
    drafter.step([("w", [1] * 17, 0, 1)])
    drafter.free("w")
    tok = llm.tokenizer
    # warm-up: the first generation builds kernels for every shape a step uses and faults the
    # weights in; measured runs start after it
    llm.generate("def f(x):", specdec.SamplingParams(temperature=0, max_tokens=24, ignore_eos=True))
    prompt_ids = {k: tok.apply_chat_template([{"role": "user", "content": v}], tokenize=True)
                  for k, v in PROMPTS.items()}
    configs = [("plain", None)]
    configs += [(f"draft_model k={k}", {"method": "draft_model", "model": DRAFTER, "num_speculative_tokens": int(k)})
                for k in args.ks.split(",")]
    configs += [("ngram k=4", {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2,
                               "prompt_lookup_max": 5}),
                ("suffix k<=8", {"method": "suffix", "num_speculative_tokens": 8})]
    rows = run_specdec(llm, drafter, tok, configs, prompt_ids, args.max_tokens)
    step_ms = drafter_step_ms(drafter)
    peer = [] if args.no_peer else run_peer(str(target), str(drafter_path), PROMPTS, tok, args.max_tokens, args.threads)
    plain = {r["prompt"]: r["tokens_per_s"] for r in rows if r["method"] == "plain"}
    for r in rows:
        r["speedup_vs_plain"] = r["tokens_per_s"] / plain[r["prompt"]] if plain.get(r["prompt"]) else None
    host = max(r["host_per_step_ms"] for r in rows)
    result = {"machine": info, "target": TARGET, "drafter": DRAFTER, "max_tokens": args.max_tokens,
              "greedy": True, "batch": 1, "specdec": rows, "llama_cpp": peer,
              "drafter_single_token_step_ms": step_ms, "max_host_overhead_per_step_ms": host,
              "host_overhead_vs_drafter_step": host / step_ms}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"host overhead per engine step (Python + C++ outside forwards): {host:.2f} ms = "
          f"{100 * host / step_ms:.1f} % of a 0.5B drafter step ({step_ms:.1f} ms)")
    print(f"wrote {args.out}")
    try:
        _plot(result, str(Path(args.out).with_suffix(".png")))
    except ImportError:
        pass
    return 0


def _plot(result: dict, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = result["specdec"]
    methods = list(dict.fromkeys(r["method"] for r in rows))
    kinds = list(dict.fromkeys(r["prompt"] for r in rows))
    fig, ax = plt.subplots(figsize=(9, 4))
    w = 0.8 / len(methods)
    for i, m in enumerate(methods):
        ax.bar([j + i * w for j in range(len(kinds))],
               [next(r["tokens_per_s"] for r in rows if r["method"] == m and r["prompt"] == k) for k in kinds],
               w, label=m)
    ax.set_xticks([j + 0.4 - w / 2 for j in range(len(kinds))], kinds)
    ax.set_ylabel("tokens/s")
    ax.set_title(f"{result['target']} on {result['machine']['cpu']}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
