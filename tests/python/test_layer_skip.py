"""Layer-skip self-drafting: the runner's early exit (the first L layers, the final norm and the
head) against the NumPy reference, its guard against reading layers it did not write, batch
invariance, and method layer_skip end to end: greedy output token for token equal to plain
decoding on stories260K and on random models of every attention layout, in batches and under
KV pressure (sampling: see test_spec.py's distribution test)."""

from __future__ import annotations

import numpy as np
import pytest

import specdec
from specdec import _core
from specdec._core import StepRequest
from specdec.testing import write_random_model

from reference.numpy_model import NumpyModel
from spec_helpers import GREEDY, PROMPTS, STORIES, plain


@pytest.fixture(scope="module")
def random_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("layer_skip_random")
    paths = {}
    for arch in ("llama", "qwen2", "gemma3", "deepseek2", "llama-chunked", "llama-kvshare"):
        p = d / f"{arch}.gguf"
        write_random_model(p, arch, "F32", seed=5)
        paths[arch] = str(p)
    return paths


# ---------------------------------------------------------------- the runner's early exit
@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3", "deepseek2", "llama-kvshare"])
def test_early_exit_matches_the_reference(context, random_dir, arch):
    path = random_dir[arch]
    ids = [int(t) for t in np.random.default_rng(3).integers(3, 300, size=30)]
    ref_model = NumpyModel(path)
    n = ref_model.config["num_layers"]
    r = _core.ModelRunner(context, path, "", 64, 64 << 20, kv_cache_dtype="f32",
                          max_num_batched_tokens=64, max_num_logits=64)
    full = r.step([StepRequest("f", ids, num_logits=len(ids))]).logits
    r.free("f")
    for layers in range(1, n + 1):
        out = r.step([StepRequest("e", ids, num_logits=len(ids))], num_layers=layers)
        ref = ref_model.forward(ids, num_layers=layers).logits
        rel = np.abs(out.logits - ref).max(axis=1) / np.abs(ref).max(axis=1)
        assert rel.max() < 1e-4, (layers, rel.max())
        assert (out.argmax == ref.argmax(axis=1)).all()
        if layers == n:
            assert np.array_equal(out.logits, full)  # every layer: the plain step, bitwise
        else:
            assert not np.allclose(out.logits, full)  # an exit really skips layers
        r.free("e")


def test_early_exit_positions_must_be_rolled_back_before_a_deeper_step(context):
    r = _core.ModelRunner(context, STORIES, "", 64, 8 << 20)
    ids = [1, 400, 30, 60, 90]
    r.step([StepRequest("a", ids, num_logits=1)])
    r.step([StepRequest("a", [7], num_computed_tokens=5, num_logits=1, num_committed_tokens=5)], num_layers=2)
    r.step([StepRequest("a", [8], num_computed_tokens=6, num_logits=1, num_committed_tokens=5)], num_layers=2)
    with pytest.raises(ValueError, match="truncate"):  # layers 2.. never saw positions 5, 6
        r.step([StepRequest("a", [9], num_computed_tokens=7)])
    with pytest.raises(ValueError, match="truncate"):  # nor a deeper early exit
        r.step([StepRequest("a", [9], num_computed_tokens=7)], num_layers=3)
    r.step([StepRequest("a", [9], num_computed_tokens=7)], num_layers=1)  # a shallower one may go on
    r.truncate("a", 6)
    with pytest.raises(ValueError, match="truncate"):  # position 5 is still partial
        r.step([StepRequest("a", [9], num_computed_tokens=6)])
    r.truncate("a", 5)
    got = r.step([StepRequest("a", [7], num_computed_tokens=5)]).logits
    r.free("a")
    want = r.step([StepRequest("b", ids + [7], num_logits=1)]).logits
    assert np.array_equal(got, want)  # the rewrite through every layer is the plain result
    for bad in (-1, r.config.num_layers + 1):
        with pytest.raises(ValueError, match="num_layers"):
            r.step([StepRequest("c", ids)], num_layers=bad)
    with pytest.raises(ValueError, match="hidden_layers"):  # a layer past the exit
        r.step([StepRequest("c", ids)], hidden_layers=[3], num_layers=2)
    assert not r.has_request("c")


def test_early_exit_is_batch_invariant(context):
    r = _core.ModelRunner(context, STORIES, "", 64, 8 << 20)
    a, b = [1, 400, 30, 60, 90, 12], [1, 77, 78, 79]
    alone = r.step([StepRequest("a", a, num_logits=2)], num_layers=3).logits
    r.free("a")
    together = r.step([StepRequest("b", b, num_logits=1), StepRequest("a", a, num_logits=2)], num_layers=3)
    assert np.array_equal(together.logits[1:3], alone)


# ---------------------------------------------------------------- method layer_skip
@pytest.mark.parametrize("exit_layer", [1, 3, 4, "auto"])
def test_layer_skip_is_lossless_on_stories(exit_layer):
    want = plain(STORIES, PROMPTS, GREEDY)
    llm = specdec.LLM(STORIES, progress=False, speculative_config={
        "method": "layer_skip", "num_speculative_tokens": 3, "exit_layer": exit_layer})
    free = llm.runner.num_free_blocks()
    outs = llm.generate(PROMPTS, GREEDY)
    assert [o.outputs[0].token_ids for o in outs] == want
    m = llm.last_metrics
    assert m["num_drafts"] > 0
    if exit_layer == 4:  # 4 of 5 layers: many drafts right
        assert m["num_accepted_tokens"] > m["num_draft_tokens"] // 5
    assert llm.runner.num_free_blocks() == free  # the drafts' positions were all rolled back
    assert llm.drafter is None  # no second model
    p = llm.engine.core.proposer
    assert p.name == "layer_skip" and p.is_auto == (exit_layer == "auto")
    stats = p.stats()
    if exit_layer == "auto":
        assert p.candidates == [2, 3, 4] and p.exit_layer in p.candidates
        assert all(s["drafts"] > 0 and s["step_seconds"] > 0 for s in stats)  # each one explored
    else:
        assert [s["exit_layer"] for s in stats] == [exit_layer] == [p.exit_layer]


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma3", "deepseek2", "llama-chunked", "llama-kvshare"])
def test_layer_skip_is_lossless_on_every_attention_layout(random_dir, arch):
    path = random_dir[arch]
    params = specdec.SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    prompts = [{"prompt_token_ids": list(range(3, 3 + n))} for n in (5, 17, 40)]
    want = plain(path, prompts, params, max_model_len=128)
    llm = specdec.LLM(path, progress=False, max_model_len=128, speculative_config={
        "method": "layer_skip", "num_speculative_tokens": 4, "exit_layer": 1})
    free = llm.runner.num_free_blocks()
    outs = llm.generate(prompts, params)
    assert [o.outputs[0].token_ids for o in outs] == want
    assert llm.last_metrics["num_drafts"] > 0
    assert llm.runner.num_free_blocks() == free


def test_layer_skip_under_kv_pressure_preempts_and_stays_lossless():
    prompts = [f"{p} {i}" for i in range(6) for p in PROMPTS]  # 18 requests
    params = specdec.SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    want = plain(STORIES, prompts, params, max_model_len=128, kv_cache_memory_bytes="8MiB")
    llm = specdec.LLM(STORIES, progress=False, max_model_len=128, kv_cache_memory_bytes=300_000,
                      max_num_seqs=32, speculative_config={
                          "method": "layer_skip", "num_speculative_tokens": 3, "exit_layer": 4})
    free = llm.runner.num_free_blocks()
    outs = llm.generate(prompts, params)
    assert [o.outputs[0].token_ids for o in outs] == want
    assert llm.last_metrics["num_preemptions"] > 0
    assert llm.runner.num_free_blocks() == free


@pytest.mark.parametrize("fields,message", [
    ({"method": "layer_skip", "num_speculative_tokens": 3, "exit_layer": 5}, r"exit_layer = 5.*\[1, 4\]"),
    ({"method": "layer_skip", "num_speculative_tokens": 3, "exit_layer": "half"}, r"exit_layer.*'auto'"),
    ({"method": "layer_skip", "num_speculative_tokens": 3, "exit_layer": 0}, r"exit_layer = 0.*'auto'"),
    ({"method": "layer_skip", "num_speculative_tokens": 3, "model": STORIES}, r"model.*layer_skip"),
    ({"method": "ngram", "num_speculative_tokens": 3, "exit_layer": 2}, r"exit_layer = 2.*only for method layer_skip"),
    ({"method": "layer_skip"}, r"num_speculative_tokens"),
])
def test_layer_skip_config_errors_name_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        specdec.LLM(STORIES, progress=False, speculative_config=fields)


def test_layer_skip_config_round_trip():
    c = specdec.SpeculativeConfig(method="layer_skip", num_speculative_tokens=2)
    assert c.exit_layer == "auto"
    c = specdec.SpeculativeConfig.from_json(c.to_json().replace('"auto"', "3"))
    assert c.exit_layer == 3 and c.method == "layer_skip"
    assert specdec.SpeculativeConfig(method="ngram", num_speculative_tokens=2).exit_layer is None


@pytest.mark.parametrize("backend", ["REFERENCE", "OCL_PAGED"])
def test_layer_skip_on_other_target_backends(backend):
    want = plain(STORIES, PROMPTS[:2], GREEDY, attention_backend=backend)
    llm = specdec.LLM(STORIES, progress=False, attention_backend=backend, speculative_config={
        "method": "layer_skip", "num_speculative_tokens": 3, "exit_layer": 4})
    assert set(llm.runner.attention_backends) == {backend}
    assert [o.outputs[0].token_ids for o in llm.generate(PROMPTS[:2], GREEDY)] == want


def test_layer_skip_and_dflash_on_a_real_model_with_flash_attention(real_model, tmp_path):
    """The Qwen2.5-Coder-0.5B (head size 64: OCL_FLASH is the target's backend) drafting for itself
    with its first 22 layers, and with a random DFlash drafter (non-causal: OCL_PAGED)."""
    from specdec.testing import write_random_dflash
    path = real_model("qwen2.5-coder-0.5b-instruct-q4_k_m")
    params = specdec.SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    prompts = ["def fibonacci(n):", "The capital of France is"]
    want = plain(path, prompts, params, max_model_len=256, kv_cache_memory_bytes="64MiB")
    llm = specdec.LLM(path, progress=False, max_model_len=256, kv_cache_memory_bytes="64MiB",
                      speculative_config={"method": "layer_skip", "num_speculative_tokens": 3, "exit_layer": 22})
    assert "OCL_FLASH" in set(llm.runner.attention_backends)
    assert [o.outputs[0].token_ids for o in llm.generate(prompts, params)] == want
    assert llm.last_metrics["num_accepted_tokens"] > 0
    d = write_random_dflash(tmp_path / "drafter", path, seed=3, block_size=4, head_dim=64)
    llm = specdec.LLM(path, progress=False, max_model_len=256, kv_cache_memory_bytes="64MiB",
                      speculative_config={"method": "dflash", "model": str(d), "num_speculative_tokens": 3})
    assert "OCL_FLASH" in set(llm.runner.attention_backends)
    assert set(llm.drafter.attention_backends) == {"OCL_PAGED"}
    assert [o.outputs[0].token_ids for o in llm.generate(prompts, params)] == want
