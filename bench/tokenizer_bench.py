#!/usr/bin/env python3
"""Tokenizer throughput: encode, decode and streaming decode of ~100 KB of text (the project's own
C++ sources and docs: code and English prose) for each model's vocabulary. Writes JSON.

    .venv/bin/python bench/tokenizer_bench.py [--models NAME_OR_PATH ...] [--bytes 100000]
        [--repeat 5] [--out bench/out/tokenizer_bench.json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Callable, List

import specdec
from specdec._files import check_output_file, write_file_atomic

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODELS = ["qwen2.5-coder-0.5b-instruct-q4_k_m", "smollm2-135m-instruct-q4_1",
                  "gemma-3-270m-q4_k_m"]


def corpus(num_bytes: int) -> str:
    parts: List[str] = []
    total = 0
    files = sorted((ROOT / "cpp").rglob("*.cpp")) + sorted((ROOT / "docs").glob("*.md"))
    while total < num_bytes and files:
        for f in files:
            text = f.read_text(encoding="utf-8", errors="replace")
            parts.append(text)
            total += len(text.encode())
            if total >= num_bytes:
                break
    return "".join(parts).encode()[:num_bytes].decode("utf-8", "ignore")


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def bench_model(name: str, text: str, repeat: int) -> dict:
    start = time.perf_counter()
    tok = specdec.Tokenizer.from_file(name)
    load_s = time.perf_counter() - start
    ids = tok.encode(text, add_special=False)
    num_bytes = len(text.encode())
    encode_s = best_of(repeat, lambda: tok.encode(text, add_special=False))
    decode_s = best_of(repeat, lambda: tok.decode(ids))

    def stream() -> None:
        d = tok.stream_decoder()
        for i in ids:
            d.push(i)
        d.flush()
    stream_s = best_of(repeat, stream)
    return {
        "model": name, "kind": tok.kind, "pre": tok.pre, "vocab_size": tok.vocab_size,
        "text_bytes": num_bytes, "tokens": len(ids), "load_s": round(load_s, 4),
        "encode_ms": round(encode_s * 1e3, 3), "encode_MBps": round(num_bytes / encode_s / 1e6, 3),
        "encode_tokens_per_s": round(len(ids) / encode_s),
        "decode_ms": round(decode_s * 1e3, 3),
        "stream_decode_us_per_token": round(stream_s / len(ids) * 1e6, 3),
        "round_trip_exact": tok.decode(ids) == text,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=DEFAULT_MODELS)
    ap.add_argument("--bytes", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "tokenizer_bench.json"))
    ap.add_argument("--quick", action="store_true", help="10 KB, 1 repeat, llama.cpp's gpt-2 test vocabulary unless --models")
    args = ap.parse_args()
    default_folder = Path(args.out).resolve().parent == ROOT / "bench" / "out"  # created if missing
    check_output_file(args.out, "--out", create_folder=default_folder)  # before the run
    if args.quick:
        args.bytes, args.repeat = 10_000, 1
        if args.models == DEFAULT_MODELS:  # llama.cpp's gpt-2 test vocabulary (sdist, cached)
            sys.path.insert(0, str(ROOT / "tests" / "python"))
            from llamacpp_sdist import models_dir
            args.models = [str(models_dir() / "ggml-vocab-gpt-2.gguf")]
    text = corpus(args.bytes)
    results = [bench_model(m, text, args.repeat) for m in args.models]
    for r in results:
        print(f"{r['model']}: {r['text_bytes']} bytes -> {r['tokens']} tokens; encode "
              f"{r['encode_ms']} ms ({r['encode_MBps']} MB/s, {r['encode_tokens_per_s']} tok/s); "
              f"decode {r['decode_ms']} ms; stream {r['stream_decode_us_per_token']} us/token")
    out = write_file_atomic(args.out, json.dumps({"machine": platform.platform(),
                                                  "processor": platform.processor(),
                                                  "results": results}, indent=2) + "\n", "--out")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
