"""ModelRunner: batch invariance (a token's logits bitwise the same alone, among k+1 verify tokens
of its request, and inside a ragged batch of others), rollback, and backends agreeing."""

import re

import numpy as np
import pytest

import specdec
from specdec import _core
from specdec._core import StepRequest

from paths import STORIES  # noqa: E402


def _runner(context, path, backend="", max_model_len=128, **kw):
    return _core.ModelRunner(context, path, backend, max_model_len, 64 << 20, **kw)


def _greedy_decode(runner, rid, prompt, steps):
    """Prefill, then one token per step; returns (tokens, logits rows of each decode input)."""
    out = runner.step([StepRequest(rid, prompt)])
    tokens, rows = [int(np.argmax(out.logits[0]))], []
    for _ in range(steps):
        n = len(prompt) + len(tokens) - 1
        out = runner.step([StepRequest(rid, [tokens[-1]], num_computed_tokens=n)])
        rows.append(out.logits[0].copy())
        tokens.append(int(np.argmax(out.logits[0])))
    return tokens, np.stack(rows)


def _check_invariance(context, path, prompt, other_prompt, steps=6, backend=""):
    r = _runner(context, path, backend)
    tokens, decode_rows = _greedy_decode(r, "a", prompt, steps)
    r.free("a")
    n = len(prompt)
    # Verify: the k+1 tokens of one request in one step give the decode rows bitwise.
    r.step([StepRequest("b", prompt)])
    out = r.step([StepRequest("b", tokens[:steps], num_computed_tokens=n, num_logits=steps)])
    np.testing.assert_array_equal(out.logits, decode_rows)
    # Rollback: back to n + 2, recompute the rest: the same rows again.
    r.truncate("b", n + 2)
    out = r.step([StepRequest("b", tokens[2:steps], num_computed_tokens=n + 2,
                              num_logits=steps - 2)])
    np.testing.assert_array_equal(out.logits, decode_rows[2:])
    r.free("b")
    # Ragged batch: the verify tokens of c next to another request's prefill and a decode.
    r.step([StepRequest("c", prompt), StepRequest("d", other_prompt)])
    out = r.step([StepRequest("d", [5], num_computed_tokens=len(other_prompt)),
                  StepRequest("c", tokens[:steps], num_computed_tokens=n, num_logits=steps),
                  StepRequest("e", other_prompt[:3])])
    start = out.logits_start
    assert list(start) == [0, 1, 1 + steps, 2 + steps]
    np.testing.assert_array_equal(out.logits[1:1 + steps], decode_rows)
    return tokens


def test_invariance_stories260k(context):
    tok = specdec.Tokenizer.from_file(STORIES)
    tokens = _check_invariance(context, STORIES, tok.encode("Once upon a time"),
                               tok.encode("The dog ran to the park and"))
    assert tok.decode(tokens).startswith(",")


@pytest.mark.parametrize("name", ["qwen2.5-coder-0.5b-instruct-q4_k_m", "gemma-3-270m-q4_k_m",
                                  "smollm2-135m-instruct-q4_1"])
def test_invariance_real_models(context, real_model, name):
    path = real_model(name)
    tok = specdec.Tokenizer.from_file(path)
    _check_invariance(context, path, tok.encode("def fibonacci(n):\n    "),
                      tok.encode("The quick brown fox jumps over the lazy dog."), steps=5)


@pytest.mark.parametrize("arch", ["deepseek2", "deepseek2-kvb", "llama-chunked", "llama-kvshare",
                                  "phi3", "qwen2-yarn"])
def test_invariance_random_models(context, tmp_path, arch):
    """Architectures without a small real model: MLA (both kv_b forms) through OCL_MLA, chunked
    local attention, KV-sharing layers, Phi-3's fused tensors and LongRoPE, YaRN."""
    from specdec.testing import write_random_model
    path = str(tmp_path / f"{arch}.gguf")
    write_random_model(path, arch, "Q4_K", seed=5)
    r = _runner(context, path)
    if arch.startswith("deepseek2"):
        assert set(r.attention_backends) == {"OCL_MLA"}
        assert [g.spec.kind for g in r.kv_config.groups] == ["mla"]
    rng = np.random.default_rng(2)
    _check_invariance(context, path, [int(t) for t in rng.integers(3, 300, 21)],
                      [int(t) for t in rng.integers(3, 300, 9)], steps=5)


def test_mla_backends_agree(context, tmp_path):
    from specdec.testing import write_random_model
    path = str(tmp_path / "mla.gguf")
    write_random_model(path, "deepseek2", "Q8_0", seed=6)
    prompt = [int(t) for t in np.random.default_rng(3).integers(3, 300, 30)]
    results = {}
    for backend in ("OCL_MLA", "REFERENCE"):
        r = _runner(context, path, backend)
        assert set(r.attention_backends) == {backend}
        results[backend] = _greedy_decode(r, "x", prompt, 12)
    assert results["OCL_MLA"][0] == results["REFERENCE"][0]
    np.testing.assert_allclose(results["OCL_MLA"][1], results["REFERENCE"][1], rtol=0, atol=1e-3)


def test_moe_layers_are_refused_clearly(context, tmp_path):
    from specdec.testing import write_random_model
    path = str(tmp_path / "moe.gguf")
    write_random_model(path, "deepseek2", "Q8_0", seed=1,
                       extra_tensors={"blk.1.ffn_gate_inp.weight": np.zeros((4, 128), np.float32)})
    with pytest.raises(specdec.UnsupportedError, match="layer 1 .* mixture-of-experts"):
        _runner(context, path)


def test_backends_agree_on_greedy_tokens(context, real_model):
    path = real_model("qwen2.5-coder-0.5b-instruct-q4_k_m")
    prompt = specdec.Tokenizer.from_file(path).encode("import numpy as np\n\ndef softmax(x):")
    results = {}
    for backend in ("OCL_FLASH", "OCL_PAGED", "REFERENCE"):
        r = _runner(context, path, backend, max_model_len=128)
        assert set(r.attention_backends) == {backend}
        results[backend] = _greedy_decode(r, "x", prompt, 12)[0]
    assert results["OCL_FLASH"] == results["OCL_PAGED"] == results["REFERENCE"]


def test_gemma_prompt_longer_than_window_frees_blocks(context, real_model):
    path = real_model("gemma-3-270m-q4_k_m")
    tok = specdec.Tokenizer.from_file(path)
    text = " ".join(f"Item {i} is a {['red', 'green', 'blue'][i % 3]} box." for i in range(120))
    prompt = tok.encode(text)
    assert len(prompt) > 600
    r = _core.ModelRunner(context, path, "", 2048, 64 << 20, max_num_batched_tokens=256)
    kv = r.kv_config
    assert [g.spec.kind for g in kv.groups] == ["sliding_window", "full_attention"]
    done = 0
    while done < len(prompt):  # chunked prefill across the window
        chunk = prompt[done:done + 256]
        out = r.step([StepRequest("g", chunk, num_computed_tokens=done)])
        done += len(chunk)
    assert np.isfinite(out.logits).all()
    # Continuing in one step or in chunks must agree bitwise for the decode path.
    t = int(np.argmax(out.logits[0]))
    a = r.step([StepRequest("g", [t], num_computed_tokens=done)]).logits[0].copy()
    r.truncate("g", done)
    b = r.step([StepRequest("g", [t], num_computed_tokens=done)]).logits[0]
    np.testing.assert_array_equal(a, b)


def test_bad_requests_name_the_field(context):
    r = _runner(context, STORIES, max_model_len=64)
    with pytest.raises(ValueError, match="token = 600"):
        r.step([StepRequest("a", [1, 600])])
    with pytest.raises(ValueError, match="num_computed_tokens = 3"):
        r.step([StepRequest("a", [1, 2], num_computed_tokens=3)])
    with pytest.raises(ValueError, match="max_model_len = 64"):
        r.step([StepRequest("a", list(range(1, 70)))])
    with pytest.raises(ValueError, match="num_logits = 3"):
        r.step([StepRequest("a", [1, 2], num_logits=3)])
    with pytest.raises(ValueError, match="unique"):
        r.step([StepRequest("a", [1]), StepRequest("a", [2])])
    r.step([StepRequest("a", [1, 2])])
    with pytest.raises(ValueError, match="num_tokens = 5"):
        r.truncate("a", 5)
    with pytest.raises(ValueError, match="request_id = zz"):
        r.free("zz")


def test_device_argmax_and_logprob_match_the_logits(context, real_model):
    path = real_model("qwen2.5-coder-0.5b-instruct-q4_k_m")
    prompt = specdec.Tokenizer.from_file(path).encode("import numpy as np\n\ndef softmax(x):")
    r = _runner(context, path)
    full = r.step([StepRequest("a", prompt, num_logits=len(prompt))])
    logits = full.logits.astype(np.float64)
    np.testing.assert_array_equal(full.argmax, logits.argmax(1))
    m = logits.max(1)
    lse = m + np.log(np.exp(logits - m[:, None]).sum(1))
    np.testing.assert_allclose(full.argmax_logprob, m - lse, rtol=0, atol=2e-4)
    r.truncate("a", len(prompt) - 3)
    lean = r.step([StepRequest("a", prompt[-3:], num_computed_tokens=len(prompt) - 3, num_logits=3)],
                  return_logits=False)
    assert lean.logits.shape == (0, logits.shape[1])
    np.testing.assert_array_equal(lean.argmax, full.argmax[-3:])


def test_profiling_times_every_launch(context):
    import os
    import subprocess
    import sys
    assert not context.profiling and context.take_profile()["kernels"] == []
    code = f"""
import specdec
from specdec import _core
ctx = specdec.Context()
assert ctx.profiling
r = _core.ModelRunner(ctx, {STORIES!r}, "", 64, 1 << 20)
r.step([_core.StepRequest("a", [1, 2, 3])])
p = ctx.take_profile()
names = {{k["kernel"] for k in p["kernels"]}}
assert {{"rms_norm", "embedding_lookup", "argmax"}} <= names, names
assert all(k["launches"] >= 1 and k["device_us"] >= 0 for k in p["kernels"])
assert p["span_us"] >= max(k["device_us"] for k in p["kernels"]) and p["dropped"] == 0
assert ctx.take_profile()["kernels"] == []
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "SPECDEC_PROFILE": "1"},
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


# ---------------------------------------------------------------- reduced logit vocabulary
def _lse(x):
    x = np.asarray(x, np.float64)
    m = x.max(1)
    return m + np.log(np.exp(x - m[:, None]).sum(1))


def test_logit_token_ids_give_the_same_logits_for_fewer_columns(context):
    full = _core.ModelRunner(context, STORIES, "", 128, 16 << 20)
    ids = [0, 3, 7, 50, 100, 200, 311, 400, 511]
    red = _core.ModelRunner(context, STORIES, "", 128, 16 << 20, logit_token_ids=ids)
    assert red.num_logit_columns == len(ids) and full.num_logit_columns == 512
    assert red.logit_token_ids == ids and red.extra_logit_tokens == []
    prompt = [1, 50, 100, 7, 3, 9, 42]
    a = full.step([StepRequest("r", prompt, num_logits=4)])
    b = red.step([StepRequest("r", prompt, num_logits=4)])
    assert b.logits.shape == (4, len(ids))
    np.testing.assert_array_equal(b.logits, a.logits[:, ids])  # bitwise: rows are independent
    np.testing.assert_array_equal(b.argmax, np.array(ids)[b.logits.argmax(1)])  # token ids
    np.testing.assert_allclose(b.argmax_logprob, b.logits.max(1) - _lse(b.logits), atol=2e-5)
    # grown by extra tokens (a drafter's context): their columns follow, argmax / logprob cover both
    extra = [1, 2, 310, 500]
    red.set_extra_logit_tokens(extra)
    assert red.num_logit_columns == len(ids) + len(extra) and red.extra_logit_tokens == extra
    c = red.step([StepRequest("s", prompt, num_logits=4)], return_logits=True)
    cols = ids + extra
    np.testing.assert_array_equal(c.logits, a.logits[:, cols])
    np.testing.assert_array_equal(c.argmax, np.array(cols)[c.logits.argmax(1)])
    np.testing.assert_allclose(c.argmax_logprob, c.logits.max(1) - _lse(c.logits), atol=2e-5)
    lean = red.step([StepRequest("t", prompt, num_logits=4)], return_logits=False)
    np.testing.assert_array_equal(lean.argmax, c.argmax)
    # the whole vocabulary as extra tokens: the full model's greedy choice again
    red.set_extra_logit_tokens([i for i in range(512) if i not in ids])
    d = red.step([StepRequest("u", prompt, num_logits=4)], return_logits=False)
    np.testing.assert_array_equal(d.argmax, a.argmax)
    np.testing.assert_allclose(d.argmax_logprob, a.argmax_logprob, atol=2e-5)
    red.set_extra_logit_tokens([])
    assert red.num_logit_columns == len(ids)


@pytest.mark.parametrize("ids,message", [
    ([5, 5], "logit_token_ids[1] = 5: token ids in [0, 512), strictly increasing"),
    ([3, 1], "logit_token_ids[1] = 1"),
    ([-1], "logit_token_ids[0] = -1"),
    ([512], "logit_token_ids[0] = 512"),
])
def test_bad_logit_token_ids_name_the_index(context, ids, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        _core.ModelRunner(context, STORIES, "", 128, 16 << 20, logit_token_ids=ids)


def test_bad_extra_logit_tokens_are_refused_and_change_nothing(context):
    red = _core.ModelRunner(context, STORIES, "", 128, 16 << 20, logit_token_ids=[3, 7])
    red.set_extra_logit_tokens([9])
    for bad, message in (([3], "extra logit token [0] = 3"), ([1, 1], "extra logit token [1] = 1"),
                         ([5, 2], "extra logit token [1] = 2"),
                         ([600], "extra logit token [0] = 600"),
                         (list(range(8, 8 + 8193)), "at most 8192")):
        with pytest.raises(ValueError, match=re.escape(message)):
            red.set_extra_logit_tokens(bad)
        assert red.extra_logit_tokens == [9]
    full = _core.ModelRunner(context, STORIES, "", 128, 16 << 20)
    with pytest.raises(ValueError, match="none unless the runner has logit_token_ids"):
        full.set_extra_logit_tokens([1])
    empty = red.step([])  # an empty step runs nothing
    assert empty.logits_start == [0] and len(empty.argmax) == 0


def test_proposers_sharing_a_reduced_drafter_each_see_their_own_columns(context):
    """Two draft_model proposers on one reduced-vocabulary runner, sampling: each sets its own
    extra tokens before drafting, so column ids always match the logits."""
    red = _core.ModelRunner(context, STORIES, "", 128, 16 << 20, logit_token_ids=list(range(0, 512, 8)))
    a = _core.spec_decode.DraftModelProposer(red, 512)
    b = _core.spec_decode.DraftModelProposer(red, 512)
    llm = specdec.LLM(STORIES, progress=False)
    params = specdec.SamplingParams(temperature=1.0, max_tokens=12, seed=3)
    from specdec.engine import EngineCore, LLMEngine
    outs = []
    for prop, prompt in ((a, [1, 2, 3, 4, 5]), (b, [1, 9, 17, 33, 300, 301]), (a, [1, 7, 7, 7])):
        core = EngineCore(llm.runner, llm.tokenizer, prop, 3, 0, 1, 512, 8)
        engine = LLMEngine(core)
        req = llm._make_request({"prompt_token_ids": prompt}, params)
        sink = engine.add_request(req)
        for item in engine.iterate(sink, [req.request_id]):
            if item.finished:
                outs.append(item.output)
    assert all(len(o.outputs[0].token_ids) == 12 for o in outs)


def test_step_block_budget_reserves_what_num_blocks_needed_says(context):
    """The scheduler's per-step block budget (C++): takes reserve the runner's own per-request
    need, refuse (reserving nothing) what does not fit, and largest_chunk is the longest prefill
    chunk that fits."""
    runner = _core.ModelRunner(context, STORIES, "", 128, 2 * 92160, block_size=16)  # 16 blocks
    free = runner.num_free_blocks()
    budget = _core.StepBlockBudget(runner)
    assert budget.free == free and budget.reserved == [0] * len(free)
    need = runner.num_blocks_needed("a", 0, 100)
    assert budget.take("a", 0, 100) and budget.reserved == need == [7]
    assert budget.take("x", 0, 120) and budget.reserved == [15]
    left = free[0] - 15
    assert 1 <= left <= 4
    # the longest chunk for "b" is what the blocks left hold, and no more
    assert budget.largest_chunk("b", 0, 128) == 16 * left
    assert budget.largest_chunk("b", 0, 10) == 10
    assert budget.reserved == [15]  # largest_chunk reserves nothing
    assert not budget.take("b", 0, 16 * left + 1) and budget.reserved == [15]
    assert budget.take("b", 0, 16 * left) and not budget.overdrawn()
    assert budget.largest_chunk("c", 0, 100) == 0 and not budget.take("c", 0, 1)
    with pytest.raises(ValueError, match="n >= 0"):
        budget.take("c", 0, -1)
    with pytest.raises(ValueError, match=r"0 \+ 1000: must be <= max_model_len"):
        budget.largest_chunk("c", 0, 1000)  # the error names the caller's chunk
    # blocks taken behind the budget's back (a prefix claim does that) show after refresh()
    assert runner.step([StepRequest("y", list(range(1, 17)), num_computed_tokens=0, num_logits=1)])
    budget.refresh()
    assert budget.free == [free[0] - 1] and budget.overdrawn()
