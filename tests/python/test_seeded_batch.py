"""Seeded sampling is a function of the seed and the position alone (counter-based draws, coupled
verification): a seeded request gets the same tokens alone and batched, under a tiny step budget
(drafts cut or dropped), with prefix caching on or off, after preemption, with every method — and
the tokens plain decoding gives for that seed."""

from __future__ import annotations

from pathlib import Path

import pytest

import specdec
from paths import STORIES

DFLASH = str(Path(__file__).resolve().parents[2] / "data" / "dflash-stories260k")
METHODS = {
    "plain": None,
    "draft_model": {"method": "draft_model", "model": STORIES, "num_speculative_tokens": 4},
    "ngram": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 2},
    "suffix": {"method": "suffix", "num_speculative_tokens": 4},
    "layer_skip": {"method": "layer_skip", "num_speculative_tokens": 3, "exit_layer": 3},
    "dflash": {"method": "dflash", "model": DFLASH, "num_speculative_tokens": 7},
    "hybrid": {"method": "hybrid", "num_speculative_tokens": 3, "proposers": [
        {"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 2},
        {"method": "draft_model", "model": STORIES}]},
}
PROMPTS = ["Once upon a time", "The dog", "Lily went to the park and saw a big red ball. She",
           "Tom had a toy. Tom had a", "Once upon a time, there was a little"]


def _params(i: int) -> specdec.SamplingParams:
    return specdec.SamplingParams(temperature=0.9 + 0.1 * (i % 3), top_k=(0, 8, 20)[i % 3],
                                  top_p=(1.0, 0.95, 0.9)[i % 3], max_tokens=24, ignore_eos=True,
                                  seed=1000 + i)


def _prompts():
    return [PROMPTS[i % len(PROMPTS)] + " " * (i // len(PROMPTS)) for i in range(12)]


@pytest.fixture(scope="module")
def plain_alone():
    llm = specdec.LLM(STORIES, progress=False)
    return [llm.generate([p], _params(i))[0].outputs[0].token_ids for i, p in enumerate(_prompts())]


@pytest.mark.parametrize("prefix_caching", [False, True], ids=["no_prefix_cache", "prefix_cache"])
@pytest.mark.parametrize("method", list(METHODS))
def test_seeded_requests_alone_and_batched_equal_plain(method, prefix_caching, plain_alone):
    prompts = _prompts()
    alone = specdec.LLM(STORIES, progress=False, speculative_config=METHODS[method],
                        enable_prefix_caching=prefix_caching)
    solo = [alone.generate([p], _params(i))[0].outputs[0].token_ids for i, p in enumerate(prompts[:4])]
    batched = specdec.LLM(STORIES, progress=False, speculative_config=METHODS[method],
                          enable_prefix_caching=prefix_caching, max_num_batched_tokens=16,
                          max_num_seqs=12)
    outs = batched.generate(prompts, [_params(i) for i in range(len(prompts))])
    got = [o.outputs[0].token_ids for o in outs]
    assert got[:4] == solo
    assert got == plain_alone
    if METHODS[method] is not None:
        assert batched.last_metrics["num_draft_tokens"] > 0


def test_seeded_requests_survive_preemption(plain_alone):
    """A KV cache too small for every request at once: preempted requests are recomputed and
    still draw the same tokens."""
    prompts = _prompts()
    llm = specdec.LLM(STORIES, progress=False, max_model_len=64, kv_cache_memory_bytes=200_000,
                      max_num_seqs=12, speculative_config=METHODS["draft_model"])
    outs = llm.generate(prompts, [_params(i) for i in range(len(prompts))])
    assert [o.outputs[0].token_ids for o in outs] == plain_alone
    assert sum(o.metrics["num_preemptions"] for o in outs) > 0


def test_unseeded_requests_differ_and_seeds_matter():
    """The test above has teeth: other seeds give other tokens."""
    llm = specdec.LLM(STORIES, progress=False)
    a = llm.generate([PROMPTS[0]], _params(0))[0].outputs[0].token_ids
    other = specdec.SamplingParams(temperature=0.9, max_tokens=24, ignore_eos=True, seed=77)
    b = llm.generate([PROMPTS[0]], other)[0].outputs[0].token_ids
    c = llm.generate([PROMPTS[0]], specdec.SamplingParams(temperature=0.9, max_tokens=24,
                                                          ignore_eos=True))[0].outputs[0].token_ids
    assert a != b and a != c
