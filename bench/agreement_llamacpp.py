#!/usr/bin/env python3
"""Teacher-forced agreement of specdec with llama.cpp, beside llama.cpp's agreement with itself.

For each model and prompt (bench/prompts.py; Gemma also the prompt past its 512-token window) the
logits of every position are computed by:
  llama.cpp        llama-cpp-python (pinned), n_batch = n_ubatch = 512: the run compared to
  llama.cpp ub1    the same, one token per micro-batch (its decode path: other matmul kernels,
                   other summation order, same weights and rounding rules)
  llama.cpp fa     the same with flash attention on
  specdec          specdec's OpenCL runner, one prefill step, f16 KV cache (llama.cpp's default)
  specdec q8_k     the same with SPECDEC_Q8K_ACTIVATIONS=1: activations in front of K-quants
                   rounded as llama.cpp's Q8_K (one scale per 256 values; run in a child process)
and each is compared with the first: top-1 agreement over all positions and where llama.cpp's
top-2 margin exceeds 0.1, max |logit difference|, rms relative difference.

llama.cpp's agreement with itself when only its batch shape or attention kernel changes is the
ceiling for any engine that does not repeat its floating-point operations in its order.

    bash bench/setup_peer.sh
    .venv/bin/python bench/agreement_llamacpp.py [--models NAME...] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import specdec  # noqa: E402
from specdec._files import check_output_file, write_file_atomic  # noqa: E402
from prompts import LONG, PROMPTS  # noqa: E402
from reference_vs_llamacpp import (REAL_MODELS, THREADS, _summary, _versions, compare,  # noqa: E402
                                   runner_logits)


def llamacpp_logits(path: str, seqs: Dict[str, List[int]], **kw) -> Dict[str, np.ndarray]:
    from llama_cpp import Llama
    llm = Llama(model_path=path, n_ctx=2048, logits_all=True, n_threads=THREADS,
                n_threads_batch=THREADS, verbose=False, **kw)
    out = {}
    for k, ids in seqs.items():
        llm.reset()
        llm.eval(list(ids))
        out[k] = np.array(llm.scores[:len(ids)], dtype=np.float32, copy=True)
    del llm
    return out


def specdec_logits_child(path: str, seqs: Dict[str, List[int]], env: Dict[str, str]
                         ) -> Dict[str, np.ndarray]:
    """runner_logits in a child process with `env` set (the runner reads it once per process)."""
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "in.json"
        write_file_atomic(str(spec), json.dumps({"path": path, "seqs": seqs}), "input")
        out = Path(tmp) / "out.npz"
        code = ("import json, sys, numpy as np; sys.path.insert(0, sys.argv[3]); "
                "from reference_vs_llamacpp import runner_logits; "
                "a = json.load(open(sys.argv[1])); "
                "np.savez(sys.argv[2], **{k: runner_logits(a['path'], v) "
                "for k, v in a['seqs'].items()})")
        subprocess.run([sys.executable, "-c", code, str(spec), str(out), str(ROOT / "bench")],
                       check=True, env={**os.environ, **env})
        with np.load(out) as z:
            return {k: z[k] for k in seqs}


def _line(label: str, o: Dict[str, object]) -> str:
    return (f"  {label:28s} {o['positions']:5d} pos  top-1 {o['argmax_agreement']:.4f} "
            f"(margin>0.1: {o.get('argmax_agreement_margin_gt_0.1', float('nan')):.4f})  "
            f"max|d| {o['max_abs_diff']:.3f}  rms rel {o['rms_rel_diff']:.5f}")


def run_model(name: str) -> Dict[str, object]:
    path = specdec.resolve_model(name)
    prompts = dict(PROMPTS)
    if name.startswith("gemma"):
        prompts["long"] = LONG
    tok = specdec.Tokenizer.from_file(path)
    seqs = {k: tok.encode(v) for k, v in prompts.items()}
    t0 = time.time()
    base = llamacpp_logits(path, seqs, n_batch=512, n_ubatch=512)
    others = {
        "llama.cpp ub1": lambda: llamacpp_logits(path, seqs, n_batch=1, n_ubatch=1),
        "llama.cpp fa": lambda: llamacpp_logits(path, seqs, n_batch=512, n_ubatch=512,
                                                flash_attn=True),
        "specdec": lambda: {k: runner_logits(path, v) for k, v in seqs.items()},
        "specdec q8_k": lambda: specdec_logits_child(path, seqs, {"SPECDEC_Q8K_ACTIVATIONS": "1"}),
    }
    entry: Dict[str, object] = {"model": name, "positions": {k: len(v) for k, v in seqs.items()},
                                "against": "llama.cpp n_ubatch=512", "runs": {}}
    print(name, flush=True)
    keys = list(seqs)
    for label, fn in others.items():
        logits = fn()
        per = {k: _summary(compare(base[k], logits[k])) for k in keys}
        overall = _summary(compare(np.concatenate([base[k] for k in keys]),
                                   np.concatenate([logits[k] for k in keys])))
        # without each text's first position (its logits follow the first token alone: attention
        # sinks with massive activations, where the engines' int8 rounding differs most)
        past = _summary(compare(np.concatenate([base[k][1:] for k in keys]),
                                np.concatenate([logits[k][1:] for k in keys])))
        entry["runs"][label] = {"overall": overall, "past_first_position": past, "prompts": per}
        print(_line(label, overall), flush=True)
        print(_line("  past the first position", past), flush=True)
    entry["seconds"] = round(time.time() - t0, 1)
    return entry


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", nargs="*", default=REAL_MODELS)
    ap.add_argument("--out", default=str(ROOT / "bench" / "out" / "agreement_llamacpp.json"))
    args = ap.parse_args(argv)
    default_folder = Path(args.out).resolve().parent == ROOT / "bench" / "out"
    check_output_file(args.out, "--out", create_folder=default_folder)
    report: Dict[str, object] = {"what": __doc__.split("\n\n")[0], "versions": _versions(),
                                 "threads": THREADS, "models": []}
    for name in args.models:
        report["models"].append(run_model(name))
        write_file_atomic(args.out, json.dumps(report, indent=1) + "\n", "--out")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
