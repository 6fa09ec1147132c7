#!/usr/bin/env python3
"""Validates the NumPy reference (tests/python/reference/numpy_model.py) against llama.cpp.

Both compute teacher-forced logits for the same token ids: llama.cpp through llama-cpp-python
(``Llama(logits_all=True)``, ``eval(ids)``, then ``scores[:n]``, which copies
``llama_get_logits`` for every position of every batch), the reference in NumPy. Reported per
model and prompt: argmax agreement (all positions, and where the reference's top-2 margin exceeds
0.1 / 0.5), max-abs and relative logit differences, the largest log-probability difference, and
the reference's top-2 margin where the argmaxes differ.

Comparisons per real model:
  specdec     specdec's own forward (the OpenCL runner, f16 KV cache as llama.cpp's default)
              against llama.cpp on the file: the engine-to-engine agreement (issue 24). Both
              quantize activations to int8 (llama.cpp: Q8_K in front of K-quants; specdec one
              scale per 32 values, Q8_K's rule with SPECDEC_Q8K_ACTIVATIONS=1); see also
              bench/agreement_llamacpp.py, which puts llama.cpp's agreement with itself beside.
  file        the model file as published (quantized weights). llama.cpp's CPU matmuls quantize
              activations to Q8 (K-quants: Q8_K), so this holds llama.cpp's rounding too.
  noise_floor the reference against itself with that rounding emulated
              (``NumpyModel(emulate_llamacpp=True)``): how far Q8 activations alone move logits.
  twin        the model's dequantized F32 twin (bench/dequantized_twin.py): same weights, no
              activation quantization in llama.cpp, so this isolates the forward pass.

    bash bench/setup_peer.sh                       # llama-cpp-python, pinned
    .venv/bin/python bench/reference_vs_llamacpp.py [--models NAME...] [--random] [--results]
        [--specdec-only]     # only specdec against llama.cpp (no NumPy reference, no twin)

Writes bench/out/reference_vs_llamacpp.json (``--results``: also bench/results/).
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
from specdec._files import check_output_file, write_file_atomic  # noqa: E402
from prompts import LONG, PROMPTS  # noqa: E402
from reference.numpy_model import NumpyModel  # noqa: E402

STORIES = ROOT / "tests" / "data" / "models" / "stories260K.gguf"
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
    margin = top2[:, 1] - top2[:, 0]
    lp_ref, lp_peer = _log_softmax(ref), _log_softmax(peer)
    rows = np.arange(ref.shape[0])
    disagree = np.nonzero(a_ref != a_peer)[0]
    decided = {f"argmax_agreement_margin_gt_{m}": float(np.mean((a_ref == a_peer)[margin > m]))
               for m in (0.1, 0.5) if (margin > m).any()}
    return {
        "positions": int(ref.shape[0]),
        "argmax_agreement": float(np.mean(a_ref == a_peer)),
        **decided,
        "max_abs_diff": float(diff.max()),
        "mean_abs_diff": float(diff.mean()),
        "max_rel_diff": float((diff.max(-1) / row_scale).max()),     # per row, vs max |logit|
        "rms_rel_diff": float(np.sqrt(np.mean((ref - peer) ** 2) / np.mean(ref.astype(np.float64) ** 2))),
        "max_logprob_diff_at_ref_top1": float(np.abs(lp_ref[rows, a_ref] - lp_peer[rows, a_ref]).max()),
        "ref_top2_margin_where_argmax_differs": [float(margin[i]) for i in disagree],
        "positions_where_argmax_differs": [int(i) for i in disagree],
        "position_of_max_abs_diff": int(diff.max(-1).argmax()),
    }


def _tokens(path: str, text: str, peer: LlamaCpp) -> Dict[str, object]:
    """specdec's tokenization (checked against llama.cpp's); llama.cpp's if specdec's fails."""
    theirs = peer.tokenize(text)
    try:
        ours = specdec.Tokenizer.from_file(path).encode(text)
    except Exception as e:  # noqa: BLE001 - recorded in the JSON
        return {"ids": theirs, "tokenizer": f"llama.cpp (specdec.Tokenizer failed: {e})"}
    return {"ids": ours, "tokenizer": "specdec", "same_as_llama_cpp": ours == theirs}


def _summary(cmp: Dict[str, object]) -> Dict[str, object]:
    return {k: v for k, v in cmp.items() if not isinstance(v, list)}


def runner_logits(path: str, ids: Sequence[int]) -> np.ndarray:
    """specdec's teacher-forced logits for ids: one prefill step of the OpenCL runner, every
    position's logits, an f16 KV cache (llama.cpp's default cache type)."""
    from specdec import _core
    n = len(ids)
    r = _core.ModelRunner(specdec.Context(), path, "", max(n, 64), 256 << 20, kv_cache_dtype="f16",
                          max_num_batched_tokens=n, max_num_logits=n)
    out = r.step([_core.StepRequest("t", list(ids), num_logits=n)]).logits
    r.free("t")
    return np.asarray(out, dtype=np.float32)


def _compare_specdec(path: str, toks: Dict[str, Dict], peer_logits: Dict[str, np.ndarray]
                     ) -> Dict[str, object]:
    """specdec's runner against llama.cpp (llama.cpp's margins: it is the one compared to)."""
    result: Dict[str, object] = {"prompts": {}}
    ours = {k: runner_logits(path, t["ids"]) for k, t in toks.items()}
    for k in toks:
        result["prompts"][k] = compare(peer_logits[k], ours[k])
    keys = list(toks)
    result["overall"] = _summary(compare(np.concatenate([peer_logits[k] for k in keys]),
                                         np.concatenate([ours[k] for k in keys])))
    return result


def _compare_file(path: str, prompts: Dict[str, str], tokens: Optional[Dict] = None,
                  noise_floor: bool = False, reference: bool = True, runner: bool = True
                  ) -> Dict[str, object]:
    """llama.cpp vs specdec's runner and (``reference``) the NumPy reference on one file;
    ``tokens`` reuses another file's token ids."""
    t0 = time.time()
    peer = LlamaCpp(path, n_ctx=2048)
    toks = tokens or {k: _tokens(path, v, peer) for k, v in prompts.items()}
    peer_logits = {k: peer.logits(t["ids"]) for k, t in toks.items()}
    del peer
    t1 = time.time()
    result: Dict[str, object] = {"tokens": toks}
    if runner:
        result["specdec"] = _compare_specdec(path, toks, peer_logits)
    t1b = time.time()
    if not reference:
        result["seconds"] = {"llama_cpp": round(t1 - t0, 1), "specdec": round(t1b - t1, 1)}
        return result
    t1 = t1b
    keys = list(toks)
    outs = NumpyModel(path).forward_batch([toks[k]["ids"] for k in keys])
    t2 = time.time()
    result["prompts"] = {}
    for k, out in zip(keys, outs):
        result["prompts"][k] = compare(out.logits, peer_logits[k])
        result["prompts"][k].update({key: v for key, v in toks[k].items() if key != "ids"})
    ref_all = np.concatenate([o.logits for o in outs])
    result["overall"] = _summary(compare(ref_all, np.concatenate([peer_logits[k] for k in keys])))
    result["seconds"] = {"llama_cpp": round(t1 - t0, 1), "reference": round(t2 - t1, 1)}
    if noise_floor:
        emu = NumpyModel(path, emulate_llamacpp=True).forward_batch([toks[k]["ids"] for k in keys])
        result["noise_floor"] = _summary(compare(ref_all, np.concatenate([o.logits for o in emu])))
    return result


def _line(label: str, o: Dict[str, object]) -> str:
    return (f"{label:44s} {o['positions']:5d} pos  argmax {o['argmax_agreement']:.4f} "
            f"(margin>0.1: {o.get('argmax_agreement_margin_gt_0.1', float('nan')):.4f})  "
            f"max|d| {o['max_abs_diff']:.4f}  max rel {o['max_rel_diff']:.4f}  "
            f"rms rel {o['rms_rel_diff']:.5f}")


def run_model(name: str, path: str, prompts: Dict[str, str], twin_dir: Optional[str] = None,
              noise_floor: bool = True, reference: bool = True) -> Dict[str, object]:
    from reference.numpy_model import GgufTensors
    file = _compare_file(path, prompts, noise_floor=noise_floor, reference=reference)
    toks = file.pop("tokens")
    entry: Dict[str, object] = {"model": name, "path": path, "file_bytes": os.path.getsize(path),
                                "architecture": NumpyModel(path).config["architecture"],
                                "file": file}
    print(_line(f"{name}: specdec vs llama.cpp", file["specdec"]["overall"]), file["seconds"],
          flush=True)
    for k, v in file["specdec"]["prompts"].items():
        print(_line(f"  {k}", v), flush=True)
    if not reference:
        return entry
    print(_line(f"{name}: reference vs llama.cpp", file["overall"]), flush=True)
    if "noise_floor" in file:
        print(_line("  noise floor (ref vs ref with Q8 activations)", file["noise_floor"]), flush=True)
    quantized = any(GgufTensors(path).type(n).name not in ("F32",)
                    for n in GgufTensors(path).names())
    if twin_dir is not None and quantized:
        from dequantized_twin import write_twin
        twin = os.path.join(twin_dir, Path(path).stem + "-f32-twin.gguf")
        write_twin(path, twin)
        entry["twin"] = _compare_file(twin, prompts, tokens=toks, runner=False)
        entry["twin"].pop("tokens")
        os.remove(twin)
        print(_line("  dequantized F32 twin", entry["twin"]["overall"]), flush=True)
    return entry


def random_models(formats: Sequence[str], report: Dict[str, object], out: str) -> None:
    from specdec.testing import write_random_model
    report["random_models"] = []
    with tempfile.TemporaryDirectory() as tmp:
        for arch in RANDOM_ARCHS:
            for fmt in formats:
                path = write_random_model(Path(tmp) / f"{arch}-{fmt}.gguf", arch, fmt, seed=11)
                entry = run_model(f"random {arch} {fmt}", path, {"facts": PROMPTS["facts"]},
                                  twin_dir=tmp if fmt != "F32" else None)
                entry["path"] = f"specdec.testing.write_random_model(..., {arch!r}, {fmt!r}, seed=11)"
                report["random_models"].append(entry)
                _write(report, out)


def _versions() -> Dict[str, str]:
    import gguf
    import llama_cpp
    from importlib.metadata import version
    return {"llama_cpp_python": llama_cpp.__version__, "gguf": version("gguf"),
            "numpy": np.__version__, "python": platform.python_version(),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "llama_cpp_system_info": llama_cpp.llama_print_system_info().decode().strip()}


def _write(report: Dict[str, object], out: str) -> None:
    write_file_atomic(out, json.dumps(report, indent=1) + "\n", "--out")


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="*", default=None,
                    help="catalog names (default: stories260K and the four real models)")
    ap.add_argument("--random", action="store_true", help="also every random test architecture")
    ap.add_argument("--random-formats", nargs="*",
                    default=["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q4_K", "Q5_K", "Q6_K"])
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "reference_vs_llamacpp.json"))
    ap.add_argument("--results", action="store_true", help="also copy to bench/results/")
    ap.add_argument("--twin-dir", default=None,
                    help="where dequantized F32 twins are written (and removed); default: a "
                         "temporary directory; 'none' skips the twin comparison")
    ap.add_argument("--specdec-only", action="store_true",
                    help="only specdec's runner against llama.cpp (no NumPy reference, no twin)")
    args = ap.parse_args(argv)
    if args.specdec_only:
        args.twin_dir = "none"
    default_folder = Path(args.out).resolve().parent == ROOT / "bench" / "out"  # created if missing
    check_output_file(args.out, "--out", create_folder=default_folder)  # before the run

    report: Dict[str, object] = {"what": "teacher-forced logits: specdec and the NumPy reference "
                                         "vs llama.cpp",
                                 "versions": _versions(), "threads": THREADS, "models": []}
    names = args.models if args.models is not None else ["stories260K"] + REAL_MODELS
    with tempfile.TemporaryDirectory() as tmp:
        twin_dir = None if args.twin_dir == "none" else (args.twin_dir or tmp)
        if twin_dir:
            os.makedirs(twin_dir, exist_ok=True)
        for name in names:
            if name == "stories260K":
                entry = run_model(name, str(STORIES), STORIES_PROMPTS, twin_dir,
                                  reference=not args.specdec_only)
            else:
                prompts = dict(PROMPTS)
                if name.startswith("gemma"):
                    prompts["long"] = LONG  # longer than the 512-token sliding window
                entry = run_model(name, specdec.resolve_model(name), prompts, twin_dir,
                                  reference=not args.specdec_only)
            report["models"].append(entry)
            _write(report, args.out)
    if args.random:
        random_models(args.random_formats, report, args.out)
    print(f"wrote {args.out}")
    if args.results:
        dest = ROOT / "bench" / "results" / Path(args.out).name
        shutil.copyfile(args.out, dest)
        print(f"wrote {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
