"""The native CPU device (device="native", SPECDEC_DEVICE=native): the Context's description and
API, the runner on it, and speculative decoding on it lossless against plain decoding on it
(greedy token for token, seeded sampling the same draws), batch invariant."""

import re

import pytest

import specdec
from specdec import _core

from paths import STORIES

PROMPTS = ["Once upon a time", "The cat sat on", "A girl named Lily"]


@pytest.fixture(scope="module")
def plain():
    return specdec.LLM(STORIES, progress=False, device="native")


def test_the_context_describes_the_cpu_and_its_path():
    ctx = _core.Context("native")
    assert ctx.kind == "cpu"
    d = ctx.device
    assert d.type == "cpu" and d.compute_units >= 1 and d.global_mem_bytes > 0
    assert d.platform.startswith("specdec native (") and _core.quant_isa(ctx) in d.platform
    assert _core.quant_isa(ctx) in _core.quant_isas(ctx)
    assert d.as_dict()["kind"] == "cpu" and "specdec native" in d.summary()
    ctx.finish()
    assert isinstance(ctx.take_profile()["kernels"], list)
    with pytest.raises(specdec.UnsupportedError, match="Context.build is for OpenCL devices; this is a cpu"):
        ctx.build("x", "kernel void f() {}")


def test_a_path_without_kernels_of_its_own_names_those_it_runs():
    """amx_int8 has no tile kernels: its device says that the AVX-512 VNNI ones run, and a
    benchmark's machine facts carry the kernels measured."""
    from specdec.bench import machine_info

    ctx = _core.Context("native")
    isa, platform = _core.quant_isa(ctx), ctx.device.platform
    m = re.fullmatch(r"specdec native \((\w+)(?:, (\w+) kernels)?\)", platform)
    assert m is not None and m.group(1) == isa, platform
    kernels = m.group(2) or isa  # a lower path's, when this one has none (or was not compiled)
    paths = _core.quant_isas(ctx)
    assert kernels in paths and paths.index(kernels) <= paths.index(isa), (platform, paths)
    if isa == "amx_int8":
        assert kernels == "avx512_vnni", platform
    info = machine_info(ctx)
    assert info["quant_isa_path"] == isa and info["quant_kernels"] == kernels
    assert info["opencl_platform"] == platform


def test_the_profile_splits_the_pools_time_into_work_and_waiting():
    """SPECDEC_PROFILE=1 on the native device: per op times as on OpenCL, plus the pool's thread
    time and the part of it spent waiting (wake-up, barriers between ops, region end), and each
    op's share of the barrier waits."""
    import os
    import subprocess
    import sys

    code = f"""
import specdec
from specdec import _core
ctx = specdec.Context("native")
assert ctx.profiling
r = _core.ModelRunner(ctx, {STORIES!r}, "", 64, 1 << 20)
r.step([_core.StepRequest("a", [1, 2, 3])])
p = ctx.take_profile()
assert {{"rms_norm", "matmul", "argmax"}} <= {{k["kernel"] for k in p["kernels"]}}
pool = p["pool"]
assert pool["threads"] == ctx.device.compute_units and pool["regions"] >= 1, pool
assert pool["barriers"] >= len(p["kernels"]), pool
assert 0 <= pool["barrier_wait_us"] <= pool["wait_us"] < pool["thread_us"], pool
# per op, the threads' waits at the barrier after it: timed around the pool's own barrier wait
op_waits = [k["wait_us"] for k in p["kernels"]]
assert min(op_waits) >= 0 and sum(op_waits) < pool["thread_us"], (op_waits, pool)
assert sum(op_waits) >= 0.9 * pool["barrier_wait_us"], (sum(op_waits), pool)
again = ctx.take_profile()
assert again["kernels"] == [] and again["pool"]["regions"] == 0, again
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "SPECDEC_PROFILE": "1"},
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_auto_is_the_native_device_without_an_opencl_gpu(monkeypatch):
    """'auto' (the default without SPECDEC_DEVICE): the native device when no OpenCL GPU or
    accelerator is present and the CPU runs the AVX2 path or better, or when there is no OpenCL
    device; 'ocl:auto' still forces OpenCL."""
    devs = _core.devices()
    gpu = any(d.type in ("gpu", "accelerator") for d in devs)
    fast = any(p in _core.quant_isas(_core.Context("native")) for p in ("avx2", "avx_vnni", "avx512bw",
                                                                        "avx512_vnni", "amx_int8"))
    expected = not gpu and (fast or not devs)
    assert _core.auto_is_native() == expected
    want = "cpu" if expected else "opencl"
    assert _core.Context("auto").kind == want and _core.Context("AUTO").kind == want
    monkeypatch.delenv("SPECDEC_DEVICE", raising=False)
    assert _core.Context().kind == want
    assert specdec.LLM(STORIES, progress=False).context.kind == want
    assert _core.Context("ocl:auto").kind == "opencl"


def test_selectors_name_the_native_device(monkeypatch):
    assert _core.Context("NATIVE").kind == "cpu"
    assert _core.Context("ocl:auto").kind == "opencl"
    monkeypatch.setenv("SPECDEC_DEVICE", "native")
    assert _core.Context().kind == "cpu"
    assert _core.select_device("").name  # OpenCL's own default beside it: auto
    monkeypatch.delenv("SPECDEC_DEVICE")
    with pytest.raises(ValueError, match=r"device = 'nativ'.*use native \(specdec's own CPU device\)"):
        _core.Context("nativ")


def test_a_batch_gives_each_request_its_output_alone(plain):
    params = specdec.SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    batched = [o.outputs[0].token_ids for o in plain.generate(PROMPTS, params)]
    alone = [plain.generate([p], params)[0].outputs[0].token_ids for p in PROMPTS]
    assert batched == alone and all(len(t) == 24 for t in batched)


@pytest.mark.parametrize("spec", [
    {"method": "draft_model", "model": STORIES, "num_speculative_tokens": 3},
    {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3},
    {"method": "suffix", "num_speculative_tokens": 4},
    {"method": "layer_skip", "num_speculative_tokens": 3, "exit_layer": 3},
], ids=lambda s: s["method"])
def test_speculative_decoding_on_the_native_device_is_lossless(plain, spec):
    llm = specdec.LLM(STORIES, progress=False, device="native", speculative_config=spec)
    greedy = specdec.SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    want = [o.outputs[0].token_ids for o in plain.generate(PROMPTS, greedy)]
    assert [o.outputs[0].token_ids for o in llm.generate(PROMPTS, greedy)] == want
    seeded = specdec.SamplingParams(temperature=0.8, max_tokens=32, ignore_eos=True, seed=11)
    want = [o.outputs[0].token_ids for o in plain.generate(PROMPTS, seeded)]
    assert [o.outputs[0].token_ids for o in llm.generate(PROMPTS, seeded)] == want
    m = llm.last_metrics
    assert m["num_draft_tokens"] >= m["num_accepted_tokens"] >= 0


@pytest.mark.parametrize("target,drafter", [("native", "ocl:auto"), ("ocl:auto", "native")])
def test_a_draft_model_on_the_other_device(target, drafter):
    """speculative_config.device: the drafter on one device, the target on the other (only draft
    tokens cross, through the host); output token for token the target's own, plain or in a
    hybrid, and the drafter's runner really on its device."""
    plain = specdec.LLM(STORIES, progress=False, device=target)
    greedy = specdec.SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
    want = [o.outputs[0].token_ids for o in plain.generate(PROMPTS, greedy)]
    for spec in ({"method": "draft_model", "model": STORIES, "num_speculative_tokens": 3, "device": drafter},
                 {"method": "hybrid", "num_speculative_tokens": 3, "proposers": [
                     {"method": "suffix"}, {"method": "draft_model", "model": STORIES, "device": drafter}]}):
        llm = specdec.LLM(STORIES, progress=False, device=target, speculative_config=spec)
        assert llm.drafter_context.kind == ("cpu" if drafter == "native" else "opencl")
        assert llm.context.kind != llm.drafter_context.kind
        assert [o.outputs[0].token_ids for o in llm.generate(PROMPTS, greedy)] == want, spec["method"]
        assert llm.last_metrics["num_draft_tokens"] > 0


def test_a_native_drafter_beside_a_native_target_shares_its_device():
    llm = specdec.LLM(STORIES, progress=False, device="native", speculative_config={
        "method": "draft_model", "model": STORIES, "num_speculative_tokens": 2, "device": "NATIVE"})
    assert llm.drafter_context is llm.context


def test_the_drafters_device_is_checked():
    cfg = specdec.SpeculativeConfig(method="draft_model", model=STORIES, num_speculative_tokens=2, device=0)
    assert cfg.device == "0" and '"device":"0"' in cfg.to_json().replace(" ", "")
    assert specdec.SpeculativeConfig(method="draft_model", model=STORIES, num_speculative_tokens=2).device is None
    with pytest.raises(ValueError, match=r"speculative_config.device = '?native'?: .*only for method draft_model"):
        specdec.SpeculativeConfig(method="ngram", num_speculative_tokens=2, device="native")
    with pytest.raises(ValueError, match=r"speculative_config.device = '?native'?: .*hidden states"):
        specdec.SpeculativeConfig(method="dflash", model="x", num_speculative_tokens=2, device="native")
    with pytest.raises(ValueError, match=r"speculative_config.device = \[1\]"):
        specdec.SpeculativeConfig(method="draft_model", model=STORIES, num_speculative_tokens=2, device=[1])
    with pytest.raises(ValueError, match=r"^speculative_config.device = 'nativ': no such device.*native"):
        specdec.LLM(STORIES, progress=False, device="native", speculative_config={
            "method": "draft_model", "model": STORIES, "num_speculative_tokens": 2, "device": "nativ"})
