#!/usr/bin/env python3
"""Validates the NumPy reference (tests/python/reference/numpy_model.py) against llama.cpp.

Both compute teacher-forced logits for the same token ids: llama.cpp through llama-cpp-python
(``Llama(logits_all=True)``, ``eval(ids)``, then ``scores[:n]``, which copies
``llama_get_logits`` for every position of every batch), the reference in NumPy. Reported per
model and prompt: argmax agreement, max-abs and relative logit differences, the largest
log-probability difference, and the reference's top-2 margin where the argmaxes differ.

    bash bench/setup_peer.sh                       # llama-cpp-python, pinned
    .venv/bin/python bench/reference_vs_llamacpp.py [--models NAME...] [--random] [--results]

Writes bench/out/reference_vs_llamacpp.json (``--results``: also bench/results/).
llama.cpp quantizes activations to Q8 inside its CPU matmuls and keeps K/V in f16, so ~1e-2
relative differences are expected; the reference is plain f32/f64 on gguf-py dequantized weights.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "python"))
sys.path.insert(0, str(ROOT / "bench"))

import specdec  # noqa: E402
from prompts import LONG, PROMPTS  # noqa: E402
from reference.numpy_model import NumpyModel  # noqa: E402

STORIES = ROOT.parent / "shared" / "models" / "stories260K.gguf"
REAL_MODELS = ["smollm2-135m-instruct-q4_1", "gemma-3-270m-q4_k_m",
               "qwen2.5-coder-0.5b-instruct-q4_k_m", "qwen2.5-coder-1.5b-instruct-q4_k_m"]
STORIES_PROMPTS = {"story": "Once upon a time, there was a little girl named Lily. She loved to "
                            "play outside in the park with her friends. One day, she saw a big red "
                            "ball under a tree, and she wanted to play with it.",
                   "dialogue": "Tom and Sue went to the beach. Tom said, \"Look at the big boat!\" "
                               "Sue was happy. They ran to the water and played in the sand all day."}
RANDOM_ARCHS = ["llama", "qwen2", "qwen3", "gemma3", "deepseek2", "deepseek2-kvb"]
THREADS = 2


class LlamaCpp:
    """One llama.cpp context; ``logits(ids)`` evaluates from an empty cache."""

    def __init__(self, path: str, n_ctx: int) -> None:
        from llama_cpp import Llama
        self.llm = Llama(model_path=path, n_ctx=n_ctx, n_batch=512, n_ubatch=512, logits_all=True,
                         n_threads=THREADS, n_threads_batch=THREADS, verbose=False)

    def tokenize(self, text: str) -> List[int]:
        return self.llm.tokenize(text.encode("utf-8"), add_bos=True, special=False)

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        self.llm.reset()
        self.llm.eval(list(ids))
        return np.array(self.llm.scores[:len(ids)], dtype=np.float32, copy=True)


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def compare(ref: np.ndarray, peer: np.ndarray) -> Dict[str, object]:
    """Agreement of two [n, vocab] logit arrays (ref = NumPy reference, peer = llama.cpp)."""
    a_ref, a_peer = ref.argmax(-1), peer.argmax(-1)
    diff = np.abs(ref - peer)
    row_scale = np.abs(ref).max(-1)
    top2 = np.sort(ref, -1)[:, -2:]
    lp_ref, lp_peer = _log_softmax(ref), _log_softmax(peer)
    rows = np.arange(ref.shape[0])
    disagree = np.nonzero(a_ref != a_peer)[0]
    return {
        "positions": int(ref.shape[0]),
        "argmax_agreement": float(np.mean(a_ref == a_peer)),
        "max_abs_diff": float(diff.max()),
        "mean_abs_diff": float(diff.mean()),
        "max_rel_diff": float((diff.max(-1) / row_scale).max()),     # per row, vs max |logit|
        "rms_rel_diff": float(np.sqrt(np.mean((ref - peer) ** 2) / np.mean(ref.astype(np.float64) ** 2))),
        "max_logprob_diff_at_ref_top1": float(np.abs(lp_ref[rows, a_ref] - lp_peer[rows, a_ref]).max()),
        "ref_top2_margin_where_argmax_differs": [float(top2[i, 1] - top2[i, 0]) for i in disagree],
    }


def _tokens(path: str, text: str, peer: LlamaCpp) -> Dict[str, object]:
    """specdec's tokenization (checked against llama.cpp's); llama.cpp's if specdec's fails."""
    theirs = peer.tokenize(text)
    try:
        ours = specdec.Tokenizer.from_file(path).encode(text)
    except Exception as e:  # noqa: BLE001 - recorded in the JSON
        return {"ids": theirs, "tokenizer": f"llama.cpp (specdec.Tokenizer failed: {e})"}
    return {"ids": ours, "tokenizer": "specdec", "same_as_llama_cpp": ours == theirs}


def run_model(name: str, path: str, prompts: Dict[str, str]) -> Dict[str, object]:
    t0 = time.time()
    texts = {k: v for k, v in prompts.items()}
    peer = LlamaCpp(path, n_ctx=2048)
    toks = {k: _tokens(path, v, peer) for k, v in texts.items()}
    peer_logits = {k: peer.logits(t["ids"]) for k, t in toks.items()}
    del peer
    t1 = time.time()
    model = NumpyModel(path)
    keys = list(toks)
    outs = model.forward_batch([toks[k]["ids"] for k in keys])
    t2 = time.time()
    entry: Dict[str, object] = {"model": name, "path": path,
                                "file_bytes": os.path.getsize(path),
                                "architecture": model.config["architecture"], "prompts": {}}
    for k, out in zip(keys, outs):
        cmp = compare(out.logits, peer_logits[k])
        cmp.update({key: v for key, v in toks[k].items() if key != "ids"})
        entry["prompts"][k] = cmp
    all_ref = np.concatenate([o.logits for o in outs])
    all_peer = np.concatenate([peer_logits[k] for k in keys])
    entry["overall"] = {kk: v for kk, v in compare(all_ref, all_peer).items()
                        if kk != "ref_top2_margin_where_argmax_differs"}
    entry["seconds"] = {"llama_cpp": round(t1 - t0, 1), "reference": round(t2 - t1, 1)}
    o = entry["overall"]
    print(f"{name:40s} {o['positions']:5d} pos  argmax {o['argmax_agreement']:.4f}  "
          f"max|d| {o['max_abs_diff']:.4f}  max rel {o['max_rel_diff']:.4f}  "
          f"rms rel {o['rms_rel_diff']:.5f}  ({entry['seconds']})", flush=True)
    return entry


def random_models(formats: Sequence[str]) -> List[Dict[str, object]]:
    from specdec.testing import write_random_model
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for arch in RANDOM_ARCHS:
            for fmt in formats:
                path = write_random_model(Path(tmp) / f"{arch}-{fmt}.gguf", arch, fmt, seed=11)
                entry = run_model(f"random {arch} {fmt}", path, {"facts": PROMPTS["facts"]})
                entry["path"] = f"specdec.testing.write_random_model(..., {arch!r}, {fmt!r}, seed=11)"
                out.append(entry)
    return out


def _versions() -> Dict[str, str]:
    import gguf
    import llama_cpp
    from importlib.metadata import version
    return {"llama_cpp_python": llama_cpp.__version__, "gguf": version("gguf"),
            "numpy": np.__version__, "python": platform.python_version(),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "llama_cpp_system_info": llama_cpp.llama_print_system_info().decode().strip()}


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="*", default=None,
                    help="catalog names (default: stories260K and the four real models)")
    ap.add_argument("--random", action="store_true", help="also every random test architecture")
    ap.add_argument("--random-formats", nargs="*",
                    default=["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q4_K", "Q5_K", "Q6_K"])
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "reference_vs_llamacpp.json"))
    ap.add_argument("--results", action="store_true", help="also copy to bench/results/")
    args = ap.parse_args(argv)

    report: Dict[str, object] = {"what": "teacher-forced logits: NumPy reference vs llama.cpp",
                                 "versions": _versions(), "threads": THREADS, "models": []}
    names = args.models if args.models is not None else ["stories260K"] + REAL_MODELS
    for name in names:
        if name == "stories260K":
            report["models"].append(run_model(name, str(STORIES), STORIES_PROMPTS))
            continue
        prompts = dict(PROMPTS)
        if name.startswith("gemma"):
            prompts["long"] = LONG  # longer than the 512-token sliding window
        report["models"].append(run_model(name, specdec.resolve_model(name), prompts))
    if args.random:
        report["random_models"] = random_models(args.random_formats)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")
    if args.results:
        dest = ROOT / "bench" / "results" / Path(args.out).name
        shutil.copyfile(args.out, dest)
        print(f"wrote {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
