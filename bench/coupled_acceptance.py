#!/usr/bin/env python3
"""Acceptance of sampled drafts under the two lossless verifications: rejection sampling
(unseeded requests: accept with min(1, p/q)) and coupled verification (seeded requests: the
drafter draws with the target's random numbers; a draft token is accepted when it is the target's
own draw). Rejection sampling's acceptance is the optimum 1 - TV(p, q); the race's is at least
(1 - TV) / (1 + TV). Point-mass drafts (n-gram, suffix) are accepted with p(d) either way.

    .venv/bin/python bench/coupled_acceptance.py [--model PATH_OR_NAME] [--requests 64]
        [--tokens 48] [--temperature 0.8] [--out bench/out/coupled_acceptance.json]

Methods whose drafter has a distribution of its own: layer_skip and draft_model (a model with the
target's vocabulary: --drafter; by default layer_skip and, for the tests' tiny model, its DFlash
drafter). Not a test: numbers for reading.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import specdec
from specdec._files import check_output_file, write_file_atomic

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["Once upon a time", "The dog", "Lily went to the park and saw a big red ball. She",
           "Tom had a toy. Tom had a"]


def run(model: str, spec: dict, seeded: bool, n: int, tokens: int, temperature: float) -> dict:
    llm = specdec.LLM(model, progress=False, speculative_config=spec, max_num_seqs=16)
    params = [specdec.SamplingParams(temperature=temperature, max_tokens=tokens, ignore_eos=True,
                                     seed=(1 + i) if seeded else None) for i in range(n)]
    llm.generate([PROMPTS[i % len(PROMPTS)] for i in range(n)], params)
    m = llm.last_metrics
    return {"method": spec["method"], "verification": "coupled" if seeded else "rejection",
            "acceptance_rate": m["acceptance_rate"], "mean_acceptance_length": m["mean_acceptance_length"],
            "num_draft_tokens": m["num_draft_tokens"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(ROOT / "tests" / "data" / "models" / "stories260K.gguf"))
    ap.add_argument("--drafter", default="", help="a draft model with the target's vocabulary")
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "coupled_acceptance.json"))
    a = ap.parse_args()
    check_output_file(a.out, "--out", create_folder=Path(a.out).resolve().parent == ROOT / "bench" / "out")
    specs = [{"method": "layer_skip", "num_speculative_tokens": 3, "exit_layer": 3}]
    if a.drafter:
        specs.append({"method": "draft_model", "model": a.drafter, "num_speculative_tokens": 4})
    elif Path(a.model).name == "stories260K.gguf":
        specs.append({"method": "dflash", "model": str(ROOT / "data" / "dflash-stories260k"),
                      "num_speculative_tokens": 7})
    rows = []
    for spec in specs:
        for seeded in (False, True):
            r = run(a.model, spec, seeded, a.requests, a.tokens, a.temperature)
            rows.append(r)
            print(json.dumps(r), flush=True)
    write_file_atomic(a.out, json.dumps({"model": a.model, "temperature": a.temperature, "requests": a.requests,
                                         "tokens": a.tokens, "results": rows}, indent=1) + "\n", "--out")
    return 0


if __name__ == "__main__":
    sys.exit(main())
