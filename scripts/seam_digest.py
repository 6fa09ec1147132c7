"""Golden digest for the device seam (docs/device_seam.md, section 3, "Proof of no behaviour change").

For each model and environment variant, runs a prefill, a verify beside a decode, and a decode
through `_core.ModelRunner` on the default OpenCL device (a child process per case, since the
SPECDEC_* switches are read when a context is made) and records the sha256 of the logits, the
argmax of every logit row and the launches per kernel of every step (SPECDEC_PROFILE). Equal
digests show the same bits; equal launch counts show that no launch was added or lost.

    python3 scripts/seam_digest.py --write bench/results/seam/digest.json   # take the baseline
    python3 scripts/seam_digest.py --check bench/results/seam/digest.json   # compare (exit 1 if not equal)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import hashlib, json, os, sys
os.environ["SPECDEC_PROFILE"] = "1"
import numpy as np
import specdec
from specdec import _core
ctx = specdec.Context()
runner = _core.ModelRunner(ctx, sys.argv[1], "", 128, 64 << 20)
R = _core.StepRequest
steps = [[R("a", list(range(3, 23)), num_logits=20), R("b", [7, 8, 9], num_logits=3)],  # prefills
         [R("a", [5, 6, 7, 8, 9], num_computed_tokens=20, num_logits=5),              # a verify
          R("b", [11], num_computed_tokens=3)],                                        # beside a decode
         [R("a", [12], num_computed_tokens=25)]]                                       # a decode
ctx.take_profile()  # drop the warm-up's launches
out = []
for step in steps:
    logits = np.asarray(runner.step(step).logits)
    profile = ctx.take_profile()
    out.append({"sha256": hashlib.sha256(logits.tobytes()).hexdigest(),
                "shape": list(logits.shape),
                "argmax": logits.reshape(-1, logits.shape[-1]).argmax(axis=-1).tolist(),
                "launches": {k["kernel"]: k["launches"] for k in profile["kernels"]}})
print(json.dumps(out))
"""

VARIANTS = {
    "default": {},
    "fused_qkv_0": {"SPECDEC_FUSED_QKV": "0"},
    "huge_pages_0": {"SPECDEC_HUGE_PAGES": "0"},
}


def models(tmp: Path) -> dict:
    found = {"stories260K": ROOT / "tests/data/models/stories260K.gguf"}
    from specdec import hub
    smol = hub.cached_path("smollm2-135m-instruct-q4_1")
    if smol.exists():
        found["smollm2-135m-instruct-q4_1"] = smol
    from specdec.testing import write_random_model
    for arch, fmt in [("qwen2", "Q4_K"), ("llama", "Q8_0"), ("qwen2", "F32"), ("llama", "Q4_0")]:
        found[f"random-{arch}-{fmt}"] = Path(write_random_model(tmp / f"{arch}-{fmt}.gguf", arch, fmt))
    return found


def run_case(path: Path, env_extra: dict) -> list:
    env = dict(os.environ, **env_extra)
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path)], env=env, capture_output=True,
                          text=True, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"{path.name} {env_extra}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", type=Path, help="write the digest to this JSON file")
    group.add_argument("--check", type=Path, help="compare with this JSON file; exit 1 on a difference")
    args = parser.parse_args()
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in models(Path(tmp)).items():
            for variant, env in VARIANTS.items():
                key = f"{name}/{variant}"
                result[key] = run_case(path, env)
                print(f"{key}: {[s['sha256'][:12] for s in result[key]]}", file=sys.stderr)
    if args.write:
        args.write.parent.mkdir(parents=True, exist_ok=True)
        args.write.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
        print(f"wrote {args.write}")
        return 0
    golden = json.loads(args.check.read_text())
    bad = [k for k in sorted(set(golden) | set(result)) if golden.get(k) != result.get(k)]
    for k in bad:
        print(f"DIFFERS: {k}")
    print("digest equal" if not bad else f"{len(bad)} of {len(golden)} cases differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
