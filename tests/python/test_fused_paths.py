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
kernels = set()
for step in steps:
    out = runner.step(step)
    digest.update(out.logits.tobytes())
    profile = ctx.take_profile()["kernels"]  # the last one: the decode step's launches
    kernels |= {k["kernel"] for k in profile}
decode = {k["kernel"]: k["launches"] for k in profile}
print(json.dumps({"digest": digest.hexdigest(), "kernels": sorted(kernels), "decode": decode}))
"""


def _run(path: str, fused: bool, fused_attn_quant: bool = True) -> dict:
    env = dict(os.environ, SPECDEC_FUSED_QKV="1" if fused else "0",
               SPECDEC_FUSED_ATTN_QUANT="1" if fused_attn_quant else "0")
    proc = subprocess.run([sys.executable, "-c", CHILD, path], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("arch,fmt,formats", [
    ("qwen2", "Q4_K", None), ("llama", "Q8_0", None), ("qwen2", "F32", None),
    # q | k stacked and v apart (a Q4_K_M file's Q6_K attn_v layers): two matmuls into one row
    ("qwen2", "Q4_K", {"attn_v.weight": "Q6_K"}), ("llama", "Q4_0", {"attn_v.weight": "Q8_0"})])
def test_fused_epilogue_is_bitwise_the_separate_kernels(tmp_path, arch, fmt, formats):
    path = write_random_model(tmp_path / f"{arch}.gguf", arch, fmt, tensor_formats=formats)
    fused, separate = _run(path, True), _run(path, False)
    assert "qkv_bias_rope_kv" in fused["kernels"], fused["kernels"]
    assert "qkv_bias_rope_kv" not in separate["kernels"]
    assert "rope" in separate["kernels"] and "rope" not in fused["kernels"]
    assert fused["digest"] == separate["digest"], "logits differ between the fused and separate paths"
    # a decode step: per layer the q | k | v matmul (two with v apart), attn_output, gate | up
    # and ffn_down, plus the head; no bias or RoPE launches of their own
    d = fused["decode"]
    layers = d["qkv_bias_rope_kv"]
    matmuls = sum(n for k, n in d.items() if k.startswith("matmul_"))
    assert matmuls == (5 if formats else 4) * layers + 1, d
    assert "add_bias" not in d and "rope" not in d, d
    assert sum(d.values()) < sum(separate["decode"].values())


@pytest.mark.parametrize("arch,fmt", [("qwen2", "Q4_K"), ("qwen3", "Q4_K"), ("gemma3", "Q4_0"),
                                      ("qwen2", "F32")])
def test_attention_writes_the_output_projection_input_quantised(tmp_path, arch, fmt):
    """OCL_FLASH also writes its output quantised for attn_output (one launch fewer per layer):
    bitwise the logits of a separate quantisation (SPECDEC_FUSED_ATTN_QUANT=0), on prefill,
    verify and decode steps; float weights (F32) take no int8 activations, so nothing changes.
    (With SPECDEC_Q8K_ACTIVATIONS=1 a K-quant attn_output takes one scale per 256 values, which
    heads below 256 cannot hold; the kernels' 256-value paths: attention_flash_test.)"""
    path = write_random_model(tmp_path / f"{arch}.gguf", arch, fmt)
    fused, separate = _run(path, True, True), _run(path, True, False)
    assert fused["digest"] == separate["digest"], "logits differ with the attention's quantisation"
    d, e = fused["decode"], separate["decode"]
    if fmt == "F32":
        assert d == e
    else:
        layers = sum(n for k, n in e.items() if k.startswith("flash_attn_split"))
        assert layers > 0, e  # OCL_FLASH serves these models
        assert e.get("quantize_activations", 0) - d.get("quantize_activations", 0) == layers, (d, e)
        assert sum(e.values()) - sum(d.values()) == layers



@pytest.mark.parametrize("arch,fmt,formats", [("qwen2", "Q4_K", {"attn_v.weight": "Q6_K"}),
                                              ("gemma3", "Q4_0", None)])
def test_huge_page_memory_gives_the_same_logits(tmp_path, arch, fmt, formats):
    """Weights carved out of shared huge-page chunks (device::Arena) and the KV cache in
    huge-page host memory give bitwise the logits of the runtime's own buffers
    (SPECDEC_HUGE_PAGES=0): a region at a wrong offset would read another matrix's bytes."""
    path = write_random_model(tmp_path / f"{arch}.gguf", arch, fmt, tensor_formats=formats)
    env = dict(os.environ, SPECDEC_HUGE_PAGES="0")
    proc = subprocess.run([sys.executable, "-c", CHILD, path], env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    plain = json.loads(proc.stdout.strip().splitlines()[-1])
    assert _run(path, True)["digest"] == plain["digest"]
