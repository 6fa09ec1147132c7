#!/usr/bin/env python3
"""specdec's residual stream after every layer beside llama.cpp's, on the same tokens.

llama.cpp's `llama-eval-callback` (built from the pinned sdist's tree by
`bench/setup_peer_tools.sh`'s build folder: `cmake --build build/peer-llama.cpp/build --target
llama-eval-callback`) prints every tensor of a forward: for `l_out-N` (the residual stream after
layer N) the first and last three values of the first and last three rows, and the sum. specdec's
runner returns the same stream (`ModelRunner.step(hidden_layers=...)`). Per layer this reports the
largest difference over the values llama.cpp shows, relative to the layer's largest magnitude,
and both sums (llama.cpp computes only the output row in the last layer: its last layer is
compared on that row).

Run it on a quantized file and on its dequantized F32 twin (`bench/dequantized_twin.py`): on the
twin neither side quantizes activations, so what remains is the forward pass itself.

    .venv/bin/python bench/compare_layers_llamacpp.py MODEL.gguf [--prompt TEXT] [--bin DIR]

Writes bench/out/compare_layers_<model>.json. Not a test.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
import specdec  # noqa: E402
from specdec import _core  # noqa: E402
from specdec._files import write_file_atomic  # noqa: E402
from specdec.bench import machine_info  # noqa: E402

NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|nan|inf"


def parse_eval_callback(text: str) -> dict:
    """name -> (rows shown: [[first 3 ..., last 3]], sum, shape) for each tensor printed first."""
    out = {}
    for m in re.finditer(r"common_debug_cb_eval:\s+(\S+) = \(f32\)[^\n]*= \{([^}]*)\}\n(.*?)sum = (\S+)",
                         text, re.S):
        name = m.group(1)
        if name in out:
            continue
        rows = []
        for r in re.findall(r"\[([^\[\]]*)\]", m.group(3)):
            vals = [float(x) for x in re.findall(NUMBER, r)]
            if vals:
                rows.append(vals)
        out[name] = (rows, float(m.group(4)), [int(x) for x in m.group(2).split(",")])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--prompt", default="The history of the city began in the twelfth century, when")
    ap.add_argument("--bin", default=str(ROOT / "build" / "peer-llama.cpp" / "build" / "bin"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    exe = Path(a.bin) / "llama-eval-callback"
    if not exe.exists():
        print(f"{exe} not found: build it with cmake --build build/peer-llama.cpp/build "
              "--target llama-eval-callback (after bash bench/setup_peer_tools.sh)", file=sys.stderr)
        return 2
    # one micro-batch for the whole prompt (the default splits at 512 tokens), so every l_out-N
    # printed holds every row, as specdec's one prefill step does
    run = subprocess.run([str(exe), "-m", a.model, "-p", a.prompt, "-n", "1", "-t", str(a.threads),
                          "-c", "4096", "-b", "4096", "-ub", "4096"],
                         capture_output=True, text=True, timeout=600)
    peer = parse_eval_callback(run.stdout + run.stderr)
    ntok = re.search(r"number of input tokens = (\d+)", run.stdout + run.stderr)
    ctx = specdec.Context()
    ids = specdec.Tokenizer.from_file(a.model).encode(a.prompt, add_special=True)
    length = max(512, len(ids) + 16)  # one prefill step over every token, as llama.cpp's batch
    runner = _core.ModelRunner(ctx, a.model, "", length, 256 << 20, 16, "f32", length, 64, None)
    if ntok and int(ntok.group(1)) != len(ids):
        print(f"token counts differ: llama.cpp {ntok.group(1)}, specdec {len(ids)}", file=sys.stderr)
        return 1
    n_layers = runner.config.num_layers
    so = runner.step([_core.StepRequest("cmp", ids, num_computed_tokens=0, num_logits=1)],
                     list(range(n_layers)))
    rows_out = []
    t = len(ids)
    for layer in range(n_layers):
        h = np.asarray(so.hidden[layer], dtype=np.float64).reshape(t, -1)
        shown_rows, peer_sum, shape = peer[f"l_out-{layer}"]
        n_rows = shape[1]
        if n_rows == t:
            idx = [0, 1, 2, t - 3, t - 2, t - 1] if t > 6 else list(range(t))
        elif n_rows == 1 and layer == n_layers - 1:  # the last layer: only the output row
            idx = [t - 1]
            h_sum = h[t - 1].sum()
        else:
            print(f"l_out-{layer} has {n_rows} rows for {t} tokens: not one micro-batch", file=sys.stderr)
            return 1
        diffs = []
        for ri, vals in zip(idx, shown_rows):
            ours = np.concatenate([h[ri, :3], h[ri, -3:]]) if len(vals) == 6 else h[ri, :len(vals)]
            diffs.append(float(np.max(np.abs(ours - np.array(vals)))))
        scale = float(np.abs(h[idx]).max())
        rows_out.append({"layer": layer, "rows_compared": idx, "max_abs_diff_shown": max(diffs),
                         "relative": max(diffs) / scale if scale else 0.0, "max_magnitude": scale,
                         "sum_llama_cpp": peer_sum,
                         "sum_specdec": float(h.sum() if n_rows == t else h_sum)})
        r = rows_out[-1]
        print(f"layer {layer:2d}: max |diff| {r['max_abs_diff_shown']:10.4f} of |h| up to "
              f"{r['max_magnitude']:9.1f} (relative {r['relative']:.1e}); sums {peer_sum:12.3f} / "
              f"{r['sum_specdec']:12.3f}")
    report = {"machine": machine_info(ctx), "date": time.strftime("%Y-%m-%d"), "model": a.model,
              "prompt": a.prompt, "token_ids": ids, "layers": rows_out}
    out = a.out or str(ROOT / "bench" / "out" / f"compare_layers_{Path(a.model).stem}.json")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    write_file_atomic(out, json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
