"""Structured outputs: what the grammar masks cost, and constrained decoding plain and speculative,
on a JSON-extraction workload (issue 36).

    .venv/bin/python bench/structured_bench.py [--models smollm2,qwen] [--device native] [--rounds 2]
        [--out bench/results/issue36/structured_bench.json]

Per model: every mode runs the same extraction prompts (a short text in, the JSON of a fixed
schema out, through the model's chat template), greedy, in rounds with the modes' order reversed
every other round; a row gives the median decode tokens/s, its ratio to constrained plain decoding
in the same round, the acceptance of drafts, and the mask cost per generated token (llguidance's
masks and the engine's -inf writes) against the decode step's time. Unconstrained rows show what a
constraint does to acceptance. Prints a table; writes JSON.
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

import specdec
from specdec import SamplingParams, StructuredOutputsParams
from specdec._files import write_file_atomic

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "city": {"type": "string", "maxLength": 40},
        "occupation": {"type": "string", "maxLength": 40},
        "languages": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 4},
    },
    "required": ["name", "age", "city", "occupation", "languages"],
    "additionalProperties": False,
}
TEXTS = [
    "Maria Gonzalez, 34, is a civil engineer living in Valencia. She speaks Spanish, Catalan and English.",
    "Kenji Watanabe is a 58-year-old sushi chef from Osaka who speaks Japanese and a little French.",
    "At 27, Amara Okafor works as a data analyst in Lagos; she is fluent in English, Yoruba and Igbo.",
    "Lars Eriksson (41) teaches mathematics in Uppsala and speaks Swedish, German and English.",
    "The violinist Sofia Rossi, aged 19, studies in Milan. Languages: Italian and English.",
    "Ahmed Hassan, a 63-year-old taxi driver in Cairo, speaks Arabic and English.",
]
MODELS = {
    "smollm2": ("smollm2-135m-instruct-q4_1", None),
    "qwen": ("qwen2.5-coder-1.5b-instruct-q4_k_m", "qwen2.5-coder-0.5b-instruct-q4_k_m"),
}


def messages(text: str):
    return [{"role": "system", "content": "You extract facts from text into JSON."},
            {"role": "user", "content": "Extract name, age, city, occupation and languages as JSON.\n\n" + text}]


def modes(drafter: str | None):
    out = [("plain", None, True), ("plain", None, False)]
    specs = [("ngram k=3", {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1,
                            "prompt_lookup_max": 3}),
             ("suffix k=4", {"method": "suffix", "num_speculative_tokens": 4})]
    if drafter:
        specs += [("draft_model k=3", {"method": "draft_model", "model": drafter, "num_speculative_tokens": 3}),
                  ("draft_model adaptive", {"method": "draft_model", "model": drafter,
                                            "num_speculative_tokens": 6, "adaptive": True})]
    else:
        specs += [("layer_skip k=3", {"method": "layer_skip", "num_speculative_tokens": 3})]
    for name, cfg in specs:
        out += [(name, cfg, True), (name, cfg, False)]
    return out


def run_mode(llm, constrained: bool, max_tokens: int):
    so = StructuredOutputsParams(json=SCHEMA) if constrained else None
    params = SamplingParams(temperature=0, max_tokens=max_tokens, structured_outputs=so)
    s = llm.structured_outputs
    calls0, rows0, mask0, apply0 = s.mask_calls, s.mask_rows, s.mask_seconds, s.apply_seconds
    tokens, seconds, valid = 0, 0.0, 0
    drafts = accepted = 0
    steps = 0
    for text in TEXTS:
        out = llm.chat(messages(text), params)[0]
        m = llm.last_metrics
        tokens += m["decode_tokens"]
        seconds += m["decode_seconds"]
        steps += m["num_steps"]
        drafts += m["num_draft_tokens"]
        accepted += m["num_accepted_tokens"]
        try:
            json.loads(out.outputs[0].text)
            valid += 1
        except ValueError:
            pass
    mask_s = s.mask_seconds - mask0 + s.apply_seconds - apply0
    return {"tokens": tokens, "seconds": seconds, "tokens_per_s": tokens / seconds if seconds else 0.0,
            "steps": steps, "valid_json": valid, "requests": len(TEXTS),
            "num_draft_tokens": drafts, "num_accepted_tokens": accepted,
            "acceptance_rate": accepted / drafts if drafts else None,
            "mask_calls": s.mask_calls - calls0, "mask_rows": s.mask_rows - rows0,
            "mask_seconds": mask_s, "mask_ms_per_token": 1e3 * mask_s / tokens if tokens else 0.0,
            "mask_share_of_decode": mask_s / seconds if seconds else 0.0}


def bench_model(key: str, device: str, rounds: int, max_tokens: int):
    target, drafter = MODELS[key]
    tpath = str(specdec.fetch(target, progress=False))
    dpath = str(specdec.fetch(drafter, progress=False)) if drafter else None
    llms = {}
    rows = {}
    order = modes(dpath)
    for rnd in range(rounds):
        seq = order if rnd % 2 == 0 else list(reversed(order))
        for name, cfg, constrained in seq:
            if name not in llms:
                llms[name] = specdec.LLM(tpath, device=device, progress=False, max_model_len=1024,
                                         speculative_config=cfg)
            r = run_mode(llms[name], constrained, max_tokens)
            label = f"{name}{'' if constrained else ' (unconstrained)'}"
            rows.setdefault(label, []).append(r)
            acc = "-" if r["acceptance_rate"] is None else f"{100 * r['acceptance_rate']:.0f}%"
            print(f"  {key:8s} round {rnd + 1} {label:36s} {r['tokens_per_s']:7.1f} tok/s  valid "
                  f"{r['valid_json']}/{r['requests']}  accept {acc}  mask "
                  f"{r['mask_ms_per_token']:.3f} ms/token ({100 * r['mask_share_of_decode']:.2f} %)",
                  flush=True)
    base = rows["plain"]
    table = []
    for label, rs in rows.items():
        ratios = [r["tokens_per_s"] / b["tokens_per_s"] for r, b in zip(rs, base) if b["tokens_per_s"]]
        acc = [r["acceptance_rate"] for r in rs if r["acceptance_rate"] is not None]
        table.append({"mode": label, "rounds": rs,
                      "tokens_per_s": statistics.median(r["tokens_per_s"] for r in rs),
                      "vs_constrained_plain": statistics.median(ratios) if ratios else None,
                      "acceptance_rate": statistics.median(acc) if acc else None,
                      "mask_ms_per_token": statistics.median(r["mask_ms_per_token"] for r in rs),
                      "mask_share_of_decode": statistics.median(r["mask_share_of_decode"] for r in rs),
                      "valid_json": [r["valid_json"] for r in rs]})
    return {"model": target, "drafter": drafter, "rows": table}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="smollm2,qwen")
    ap.add_argument("--device", default=os.environ.get("SPECDEC_DEVICE", "auto"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--out", default="bench/results/issue36/structured_bench.json")
    a = ap.parse_args()
    keys = [k.strip() for k in a.models.split(",") if k.strip()]
    for k in keys:
        if k not in MODELS:
            print(f"--models: {k!r}; allowed: {', '.join(MODELS)}", file=sys.stderr)
            return 2
    ctx = specdec.Context(a.device) if a.device != "auto" else specdec.Context()
    machine = {"cpu": platform.processor() or platform.machine(), "device": str(ctx),
               "date": time.strftime("%Y-%m-%d"), "threads": os.cpu_count()}
    results = {"what": "structured outputs on a JSON-extraction workload (bench/structured_bench.py)",
               "machine": machine, "schema": SCHEMA, "texts": TEXTS, "max_tokens": a.max_tokens,
               "models": [bench_model(k, a.device, a.rounds, a.max_tokens) for k in keys]}
    print("\nmedians: decode tok/s (x constrained plain, acceptance, mask ms/token = share of decode)")
    for m in results["models"]:
        print(m["model"])
        for r in m["rows"]:
            acc = "-" if r["acceptance_rate"] is None else f"{100 * r['acceptance_rate']:.0f}%"
            print(f"  {r['mode']:38s} {r['tokens_per_s']:7.1f} ({r['vs_constrained_plain']:.2f}x, {acc}, "
                  f"{r['mask_ms_per_token']:.3f} ms = {100 * r['mask_share_of_decode']:.2f} %) valid {r['valid_json']}")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    write_file_atomic(a.out, json.dumps(results, indent=1) + "\n", "--out")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
