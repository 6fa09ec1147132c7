"""The native device on CPUs with less than this one: the library must run on any x86-64 CPU
without faulting, on the path that CPU's cpuid and XCR0 allow. QEMU's user-mode emulator
(`qemu-x86_64`, Debian's qemu-user; scripts/test.sh installs it) runs the same Python and the
same library as a Haswell (AVX2 + FMA + F16C, no AVX-512: TCG has none) and as a Nehalem (SSE4.2,
no AVX: the portable path). A kernel table, a static initialiser or an inline function compiled
for a higher path and reached on a lower one is an illegal instruction there, whatever CPU runs
the tests. The emulated AVX2 run must also give bitwise the logprobs this machine gives on the same
path (SPECDEC_CPU_ISA forces it here): the emulator runs the same instructions. The portable path
calls libm (exp, sin, cos), whose glibc builds differ by CPU (FMA on this one, SSE2 on a
Nehalem), so there the tokens must agree and the logprobs within 1e-4."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import specdec
from specdec.testing import write_random_model

from paths import STORIES_PATH as STORIES

QEMU = shutil.which("qemu-x86_64")
# Every kernel family of the native device: block formats with each decode scheme (4- and 5-bit
# with and without mins, K-quants of 2..6 bits, the IQ4 table, 8-bit) and the float formats.
FORMATS = ("Q4_K", "Q6_K", "Q5_K", "Q3_K", "Q2_K", "Q4_0", "Q5_1", "Q8_0", "IQ4_XS", "BF16", "F16")

RUN = r"""
import json, sys
import specdec
out = {"platform": specdec.Context("native").device.platform, "models": {}}
params = specdec.SamplingParams(max_tokens=5, temperature=0.0, logprobs=2)
for path in sys.argv[1:]:
    llm = specdec.LLM(path, progress=False, device="native", max_model_len=64)
    # one request (1-row steps), then three together (3-row steps); prompts are many-row prefills
    got = []
    for prompts in (["hello world, the quick brown fox"], ["once upon", "a time there was", "the cat"]):
        for r in llm.generate(prompts, params):
            o = r.outputs[0]
            got.append({"tokens": o.token_ids, "cumulative": o.cumulative_logprob.hex(),
                        "logprobs": [sorted((t, lp.logprob.hex()) for t, lp in pos.items())
                                     for pos in o.logprobs]})
    out["models"][path] = got
print("RESULT " + json.dumps(out))
"""


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> list:
    d = tmp_path_factory.mktemp("emulated")
    paths = [str(STORIES)]
    for fmt in FORMATS:
        paths.append(write_random_model(d / f"llama-{fmt}.gguf", "llama", fmt, seed=3))
    return paths


def _run(models: list, isa: str, qemu_cpu: str = "") -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECDEC_CPU")}
    env.update(SPECDEC_CPU_THREADS="2", SPECDEC_DEVICE="native")
    cmd = [sys.executable, "-c", RUN, *models]
    if qemu_cpu:
        cmd = [QEMU, "-cpu", qemu_cpu, *cmd]
    else:
        env["SPECDEC_CPU_ISA"] = isa
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, (
        f"{' '.join(cmd[:3])}: exit {p.returncode} (-4 or 132: an illegal instruction)\n{p.stderr[-3000:]}")
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    assert line, p.stdout[-2000:]
    out = json.loads(line[-1][len("RESULT "):])
    assert out["platform"] == f"specdec native ({isa})", out["platform"]
    return out


def _close(a: list, b: list, isa: str) -> bool:
    if isa == "avx2":
        return a == b
    if [r["tokens"] for r in a] != [r["tokens"] for r in b]:
        return False
    for ra, rb in zip(a, b):
        pa = [float.fromhex(v) for pos in ra["logprobs"] for _, v in pos]
        pb = [float.fromhex(v) for pos in rb["logprobs"] for _, v in pos]
        ta = [t for pos in ra["logprobs"] for t, _ in pos]
        tb = [t for pos in rb["logprobs"] for t, _ in pos]
        if ta != tb or any(abs(x - y) > 1e-4 for x, y in zip(pa, pb)):
            return False
    return True


@pytest.mark.skipif(QEMU is None, reason="qemu-x86_64 (Debian's qemu-user) is not installed; "
                                         "scripts/test.sh installs it")
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="an x86-64 host's Python")
@pytest.mark.parametrize("isa, qemu_cpu", [("avx2", "Haswell-v4"), ("portable", "Nehalem")])
def test_a_lower_cpu_runs_its_own_path(models, isa, qemu_cpu):
    if isa not in specdec._core.quant_isas(specdec._core.Context("native")):
        pytest.skip("this CPU has no AVX2 path to compare the emulated one with")
    emulated = _run(models, isa, qemu_cpu)
    here = _run(models, isa)
    for path in models:
        assert _close(emulated["models"][path], here["models"][path], isa), f"{Path(path).name} on {isa}"
