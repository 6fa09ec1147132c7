"""The fused q | k | v epilogue (one launch for bias, RoPE, the KV-cache write and q) gives the
model bitwise the logits of the separate kernels (SPECDEC_FUSED_QKV=0), on prefill, verify and
decode steps in a batch, and it is the path a default run takes (its kernel shows in the profile).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from specdec.testing import write_random_model

CHILD = r"""
import hashlib, json, os, sys
os.environ["SPECDEC_PROFILE"] = "1"
import specdec
from specdec import _core
ctx = specdec.Context()
runner = _core.ModelRunner(ctx, sys.argv[1], "", 256, 64 << 20)
digest = hashlib.sha256()
R = _core.StepRequest
steps = [[R("a", list(range(3, 23)), num_logits=20), R("b", [7, 8, 9], num_logits=3)],  # prefills
         [R("a", [5, 6, 7, 8, 9], num_computed_tokens=20, num_logits=5),              # a verify
          R("b", [11], num_computed_tokens=3)],                                        # beside a decode
         [R("a", [12], num_computed_tokens=25)]]
for step in steps:
    out = runner.step(step)
    digest.update(out.logits.tobytes())
kernels = sorted(k["kernel"] for k in ctx.take_profile()["kernels"])
print(json.dumps({"digest": digest.hexdigest(), "kernels": kernels}))
"""


def _run(path: str, fused: bool) -> dict:
    env = dict(os.environ, SPECDEC_FUSED_QKV="1" if fused else "0")
    proc = subprocess.run([sys.executable, "-c", CHILD, path], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("arch,fmt", [("qwen2", "Q4_K"), ("llama", "Q8_0"), ("qwen2", "F32")])
def test_fused_epilogue_is_bitwise_the_separate_kernels(tmp_path, arch, fmt):
    path = write_random_model(tmp_path / f"{arch}.gguf", arch, fmt)
    fused, separate = _run(path, True), _run(path, False)
    assert "qkv_bias_rope_kv" in fused["kernels"], fused["kernels"]
    assert "qkv_bias_rope_kv" not in separate["kernels"]
    assert "rope" in separate["kernels"] and "rope" not in fused["kernels"]
    assert fused["digest"] == separate["digest"], "logits differ between the fused and separate paths"
