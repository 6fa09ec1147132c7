"""Why specdec's structured outputs run on llguidance: its compile and mask times against
outlines-core's on one JSON schema and Qwen 2.5's vocabulary (151,936 tokens) (issue 36).

    pip install outlines-core        # optional: only this comparison needs it
    .venv/bin/python bench/structured_library_choice.py [--model qwen2.5-coder-0.5b-instruct-q4_k_m]

xgrammar is not measured: it requires torch, triton and transformers (gigabytes), which rules it
out for specdec's CPU users before any timing. Prints JSON (and writes it with --out).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import specdec
from specdec._files import write_file_atomic
from specdec.structured import StructuredOutputs, StructuredOutputsParams

SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 12},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120},
                         "pets": {"type": "array", "items": {"enum": ["dog", "cat", "bird"]}, "maxItems": 3}},
          "required": ["name", "age", "pets"], "additionalProperties": False}


def llguidance_times(tok, vocab_size):
    so = StructuredOutputs(tok, vocab_size)
    t0 = time.perf_counter()
    so._ll_tokenizer()
    t1 = time.perf_counter()
    c = so.constraint(StructuredOutputsParams(json=SCHEMA))
    t2 = time.perf_counter()
    ids = tok.encode_continuation('{"name": "Bob", "age": 42, "pets": ["cat"]}')
    times = []
    for t in ids:
        a = time.perf_counter()
        so.masks([(c, [])])
        times.append(time.perf_counter() - a)
        c.accept([t])
    return {"vocabulary_s": t1 - t0, "compile_s": t2 - t1, "mask_ms_median": 1e3 * statistics.median(times),
            "mask_ms_max": 1e3 * max(times), "grammars": "JSON schema, regex, Lark, GBNF, choices"}


def outlines_times(tok):
    try:
        from outlines_core import Guide, Index, Vocabulary
        from outlines_core.json_schema import build_regex_from_schema
    except ImportError as e:
        return {"skipped": f"outlines-core not installed ({e})"}
    eos = tok.eos_token_id
    vocab = {}
    t0 = time.perf_counter()
    for i in range(tok.vocab_size):
        if i == eos or tok.token_type(i) in ("control", "unknown", "unused"):
            continue
        try:
            s = tok.token_to_piece(i, True).decode("utf-8")
        except UnicodeDecodeError:
            continue  # partial UTF-8 tokens left out: a lower bound on its work
        vocab.setdefault(s, []).append(i)
    v = Vocabulary(eos, vocab)
    t1 = time.perf_counter()
    regex = build_regex_from_schema(json.dumps(SCHEMA))
    index = Index(regex, v)
    t2 = time.perf_counter()
    g = Guide(index)
    times = []
    for _ in range(20):
        a = time.perf_counter()
        g.get_tokens()
        times.append(time.perf_counter() - a)
    return {"vocabulary_s": t1 - t0, "compile_s": t2 - t1, "mask_ms_median": 1e3 * statistics.median(times),
            "grammars": "regex and JSON schema (as a regex); no context-free grammars"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct-q4_k_m")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    path = str(specdec.fetch(a.model, progress=False))
    tok = specdec.Tokenizer.from_file(path)
    vocab_size = specdec.load_model_config(path).vocab_size
    out = {"what": "structured-output libraries on one JSON schema (bench/structured_library_choice.py)",
           "model": a.model, "schema": SCHEMA, "llguidance": llguidance_times(tok, vocab_size),
           "outlines_core": outlines_times(tok),
           "xgrammar": "not measured: requires torch, triton and transformers"}
    text = json.dumps(out, indent=1)
    print(text)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        write_file_atomic(a.out, text + "\n", "--out")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
