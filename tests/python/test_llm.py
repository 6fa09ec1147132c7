"""specdec.LLM / SamplingParams / outputs (vLLM's names and shapes) and `specdec generate`."""

import re
import math

import numpy as np
import pytest

import specdec
from specdec import cli
from specdec._core import StepRequest

from paths import STORIES  # noqa: E402


@pytest.fixture(scope="module")
def llm():
    return specdec.LLM(STORIES, max_model_len=128, kv_cache_memory_bytes="16MiB", progress=False)


def test_greedy_generate_shapes(llm):
    params = specdec.SamplingParams(temperature=0, max_tokens=20)
    outs = llm.generate(["Once upon a time", {"prompt_token_ids": [1, 365, 213]}], params)
    assert len(outs) == 2
    o = outs[0]
    assert o.prompt == "Once upon a time" and o.prompt_token_ids[0] == 1
    c = o.outputs[0]
    assert len(c.token_ids) == 20 and c.finish_reason == "length"
    assert c.text == llm.tokenizer.decode(c.token_ids)
    assert c.text.startswith(",") and math.isfinite(c.cumulative_logprob)
    assert outs[1].prompt is None and outs[1].prompt_token_ids == [1, 365, 213]
    # The same prompt alone gives the same tokens (batched with another above).
    again = llm.generate("Once upon a time", params)[0].outputs[0]
    assert again.token_ids == c.token_ids


def test_greedy_matches_argmax_of_runner_logits(llm):
    ids = llm.tokenizer.encode("Once upon a time")
    out = llm.generate({"prompt_token_ids": ids}, specdec.SamplingParams(temperature=0, max_tokens=5))
    toks = out[0].outputs[0].token_ids
    r = llm.runner
    logits = r.step([StepRequest("chk", ids + toks[:4], num_logits=5)]).logits
    r.free("chk")
    # Prefill logits are deterministic, not necessarily bitwise equal to decode: compare argmax.
    assert [int(np.argmax(row)) for row in logits] == toks


def test_sampling_is_seeded(llm):
    p = specdec.SamplingParams(temperature=0.9, top_p=0.95, seed=42, max_tokens=15)
    a = llm.generate("The cat", p)[0].outputs[0].token_ids
    b = llm.generate("The cat", p)[0].outputs[0].token_ids
    c = llm.generate("The cat", specdec.SamplingParams(temperature=0.9, top_p=0.95, seed=43,
                                                       max_tokens=15))[0].outputs[0].token_ids
    assert a == b and a != c


def test_stop_strings_and_token_ids(llm):
    base = llm.generate("Once upon a time", specdec.SamplingParams(temperature=0, max_tokens=30))[0]
    text, ids = base.outputs[0].text, base.outputs[0].token_ids
    stop = text.split()[3]
    o = llm.generate("Once upon a time", specdec.SamplingParams(temperature=0, max_tokens=30,
                                                               stop=stop))[0].outputs[0]
    assert o.finish_reason == "stop" and o.stop_reason == stop
    assert stop not in o.text and text.startswith(o.text)
    o = llm.generate("Once upon a time", specdec.SamplingParams(temperature=0, max_tokens=30,
                                                               stop_token_ids=[ids[5]]))[0].outputs[0]
    assert o.finish_reason == "stop" and o.stop_reason == ids[5] and o.token_ids == ids[:6]


def test_logprobs_and_prompt_logprobs(llm):
    p = specdec.SamplingParams(temperature=0, max_tokens=4, logprobs=3, prompt_logprobs=2)
    o = llm.generate("Once upon a time", p)[0]
    pl = o.prompt_logprobs
    assert len(pl) == len(o.prompt_token_ids) and pl[0] is None
    for i in range(1, len(pl)):
        assert o.prompt_token_ids[i] in pl[i]
        assert len(pl[i]) in (2, 3)
        ranks = sorted(lp.rank for lp in pl[i].values())
        assert ranks[:2] == [1, 2]
        assert all(lp.logprob <= 0 for lp in pl[i].values())
    c = o.outputs[0]
    assert len(c.logprobs) == 4
    for tid, pos in zip(c.token_ids, c.logprobs):
        assert pos[tid].rank == 1  # greedy picks the top token
        assert len(pos) == 3
    assert c.cumulative_logprob == pytest.approx(sum(pos[t].logprob for t, pos in zip(c.token_ids, c.logprobs)))
    # prompt logprobs agree with the runner's own logits.
    r = llm.runner
    n = len(o.prompt_token_ids)
    logits = r.step([StepRequest("lp", o.prompt_token_ids, num_logits=n)]).logits
    r.free("lp")
    row = logits[0].astype(np.float64)
    lse = row.max() + np.log(np.exp(row - row.max()).sum())
    t1 = o.prompt_token_ids[1]
    assert pl[1][t1].logprob == pytest.approx(row[t1] - lse, abs=1e-5)


def test_bad_params_and_prompts(llm):
    for kw, field in [({"temperature": -1}, "temperature"), ({"top_p": 0}, "top_p"),
                      ({"top_k": -5}, "top_k"), ({"max_tokens": 0}, "max_tokens"),
                      ({"min_p": 2}, "min_p"), ({"logprobs": -1}, "logprobs"), ({"n": 2}, "n"),
                      ({"stop": [""]}, "stop[0]")]:
        with pytest.raises(ValueError, match=re.escape(f"SamplingParams.{field} =")):
            specdec.SamplingParams(**kw)
    with pytest.raises(ValueError, match=r"prompt_token_ids'\]\[1\] = 9999: a token id in"):
        llm.generate({"prompt_token_ids": [1, 9999]})
    with pytest.raises(ValueError, match="max_model_len"):
        llm.generate({"prompt_token_ids": [1] * 200})
    with pytest.raises(ValueError, match="a string or"):
        llm.generate([42])
    with pytest.raises(ValueError, match="known names"):
        specdec.LLM("no-such-model", progress=False)


def test_generate_cli(capsys):
    assert cli.main(["generate", "--model", STORIES, "--prompt", "Once upon a time",
                     "--max-tokens", "12", "--max-model-len", "128"]) == 0
    cap = capsys.readouterr()
    assert cap.out.startswith("Once upon a time,")
    assert "tokens/s" in cap.err and "decode 11 tokens" in cap.err


def test_chat_generation_real_model(real_model):
    llm = specdec.LLM(real_model("qwen2.5-coder-0.5b-instruct-q4_k_m"), max_model_len=512,
                      kv_cache_memory_bytes="64MiB", progress=False)
    messages = [{"role": "user", "content": "Write a Python function that adds two numbers."}]
    o = llm.chat(messages, specdec.SamplingParams(temperature=0, max_tokens=120))[0].outputs[0]
    assert "def " in o.text and "return" in o.text and "+" in o.text
    # the rendered template as a raw prompt, opted in, is the same request
    raw = llm.generate(llm.tokenizer.apply_chat_template(messages),
                       specdec.SamplingParams(temperature=0, max_tokens=120), parse_special=True)
    assert raw[0].outputs[0].token_ids == o.token_ids


def test_full_kv_cache_preempts_and_recomputes():
    """More requests than the cache holds: the scheduler preempts the newest (vLLM's recompute
    preemption) instead of failing, and every output equals the request run alone."""
    small = specdec.LLM(STORIES, max_model_len=128, kv_cache_memory_bytes=200_000, progress=False)
    free = small.runner.num_free_blocks()
    assert len(free) == 1 and 10 <= free[0] <= 30, free
    prompts = ["Once upon a time", "The dog", "Lily went to the park", "Tom had a red ball",
               "One day, a little bird", "The sun was"]
    params = specdec.SamplingParams(temperature=0, max_tokens=70, ignore_eos=True)
    outs = small.generate(prompts, params)
    assert small.last_metrics["num_preemptions"] > 0
    alone = specdec.LLM(STORIES, max_model_len=128, kv_cache_memory_bytes="4MiB", progress=False)
    for p, o in zip(prompts, outs):
        want = alone.generate(p, params)[0].outputs[0]
        assert o.outputs[0].token_ids == want.token_ids, p
        assert o.outputs[0].finish_reason == "length"
    assert small.runner.num_free_blocks() == free  # everything returned
    # prompt logprobs survive a preemption (not duplicated)
    lp = specdec.SamplingParams(temperature=0, max_tokens=70, ignore_eos=True, prompt_logprobs=1)
    outs = small.generate(prompts, lp)
    for o in outs:
        assert len(o.prompt_logprobs) == len(o.prompt_token_ids)


def test_kv_cache_too_small_for_one_request_is_a_clear_error():
    with pytest.raises(ValueError, match="kv_cache_memory_bytes"):
        specdec.LLM(STORIES, max_model_len=128, kv_cache_memory_bytes=20_000, progress=False)


def test_prompt_logprobs_of_long_prompts_share_the_logit_rows_of_a_step(llm):
    """Two 100-token prompts with prompt logprobs and a plain one: more prompt rows than one step's
    128 logit rows; the scheduler splits them instead of failing."""
    ids = llm.tokenizer.encode("Once upon a time there was a little dog. " * 12)[:100]
    assert len(ids) == 100
    prompts = [{"prompt_token_ids": ids}, "The cat", {"prompt_token_ids": ids[::-1]}]
    params = [specdec.SamplingParams(temperature=0, max_tokens=3, prompt_logprobs=2),
              specdec.SamplingParams(temperature=0, max_tokens=3),
              specdec.SamplingParams(temperature=0, max_tokens=3, prompt_logprobs=1)]
    outs = llm.generate(prompts, params)
    assert len(outs[0].prompt_logprobs) == 100 and len(outs[2].prompt_logprobs) == 100
    assert outs[1].prompt_logprobs is None
    alone = llm.generate({"prompt_token_ids": ids}, params[0])[0]
    assert [None if d is None else sorted(d) for d in alone.prompt_logprobs] == \
        [None if d is None else sorted(d) for d in outs[0].prompt_logprobs]
