"""Automatic prefix caching through the engine: outputs identical with and without it (plain,
speculative, sampled, under preemption, on hybrid sliding-window + global and chunked models),
hits and saved prefill reported, nothing leaked, rollback never corrupting a cached block."""

from __future__ import annotations

import pytest

import specdec
from specdec.testing import write_random_model
from spec_helpers import STORIES

BASE = ("Lily went to the park and saw a big red ball. She was very happy and wanted to play "
        "with it. Her mom said")
PROMPTS = [BASE + " yes", BASE + " no", BASE + " maybe so", "Once upon a time"]
GREEDY = specdec.SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)


def _run(path, prompts, params, **kw):
    """Token ids of two rounds over the prompts in one LLM (the second round hits the cache),
    then each prompt alone, and the LLM."""
    llm = specdec.LLM(path, progress=False, **kw)
    first = [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
    second = [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
    alone = [llm.generate(p, params)[0].outputs[0].token_ids for p in prompts]
    return first, second, alone, llm


def _all_free(llm):
    for runner in (llm.runner, llm.drafter):
        if runner is None:
            continue
        caps = [g.num_blocks - 1 for g in runner.kv_config.groups]
        assert runner.num_free_blocks() == caps


@pytest.mark.parametrize("spec", [None, {"method": "draft_model", "model": STORIES, "num_speculative_tokens": 3},
                                  {"method": "ngram", "num_speculative_tokens": 3},
                                  {"method": "layer_skip", "exit_layer": 2, "num_speculative_tokens": 2}],
                         ids=["plain", "draft_model", "ngram", "layer_skip"])
def test_greedy_identical_with_and_without(spec):
    off = _run(STORIES, PROMPTS, GREEDY, enable_prefix_caching=False, speculative_config=spec, block_size=4)
    on = _run(STORIES, PROMPTS, GREEDY, enable_prefix_caching=True, speculative_config=spec, block_size=4)
    assert on[:3] == off[:3]
    assert on[0] == on[1] == on[2]
    stats = on[3].prefix_cache_stats()
    assert stats["enabled"] and stats["hits"] > 0 and 0 < stats["hit_rate"] < 1
    assert not off[3].prefix_cache_stats()["enabled"] and off[3].prefix_cache_stats()["hits"] == 0
    if spec is not None and spec["method"] == "draft_model":  # the drafter's cache hits too
        assert stats["drafter"]["hits"] > 0
    _all_free(on[3])


def test_hits_save_prefill_and_are_reported_per_request():
    llm = specdec.LLM(STORIES, progress=False, block_size=4)
    llm.generate(PROMPTS[0], GREEDY)
    prefill_before = llm.engine.core.stats.prefill_tokens
    out = llm.generate(PROMPTS[1], GREEDY)[0]
    cached = out.metrics["num_cached_tokens"]
    n = len(out.prompt_token_ids)
    assert cached > 0 and cached % 4 == 0 and cached <= n - 1
    assert llm.engine.core.stats.prefill_tokens - prefill_before == n - cached  # saved
    assert llm.reset_prefix_cache() > 0
    assert llm.generate(PROMPTS[1], GREEDY)[0].metrics["num_cached_tokens"] == 0


def test_sampled_with_seed_identical_with_and_without():
    params = specdec.SamplingParams(temperature=0.9, top_p=0.95, seed=11, max_tokens=24, ignore_eos=True)
    spec = {"method": "draft_model", "model": STORIES, "num_speculative_tokens": 3}
    off = _run(STORIES, PROMPTS, params, enable_prefix_caching=False, speculative_config=spec, block_size=4)
    on = _run(STORIES, PROMPTS, params, enable_prefix_caching=True, speculative_config=spec, block_size=4)
    assert on[:3] == off[:3]


def test_under_kv_pressure_identical_and_nothing_leaks():
    spec = {"method": "draft_model", "model": STORIES, "num_speculative_tokens": 3}
    prompts = [f"{p} {i}" for i in range(4) for p in PROMPTS]
    kw = dict(speculative_config=spec, block_size=4, max_num_seqs=8, kv_cache_memory_bytes=2 * 40 * 4 * 720)
    off = _run(STORIES, prompts, GREEDY, enable_prefix_caching=False, **kw)
    on = _run(STORIES, prompts, GREEDY, enable_prefix_caching=True, **kw)
    assert on[3].engine.core.stats.num_preemptions > 0  # the budget really preempts
    assert on[:3] == off[:3]
    _all_free(on[3])


def test_prompt_logprobs_requests_compute_their_whole_prompt():
    llm = specdec.LLM(STORIES, progress=False, block_size=4)
    llm.generate(PROMPTS[0], GREEDY)
    p = specdec.SamplingParams(temperature=0, max_tokens=4, prompt_logprobs=1)
    out = llm.generate(PROMPTS[0], p)[0]
    assert out.metrics["num_cached_tokens"] == 0
    assert len(out.prompt_logprobs) == len(out.prompt_token_ids)
    ref = specdec.LLM(STORIES, progress=False, block_size=4, enable_prefix_caching=False)
    want = ref.generate(PROMPTS[0], p)[0]
    assert [None if x is None else sorted(x) for x in out.prompt_logprobs] == \
        [None if x is None else sorted(x) for x in want.prompt_logprobs]


@pytest.mark.parametrize("arch", ["gemma3", "llama-chunked"])
def test_sliding_and_chunked_groups_identical(tmp_path, arch):
    """gemma3: 5 sliding-window layers (window 16) + 1 global; llama-chunked: chunked-local
    attention: each group keeps only what its next query sees, and a hit must hold exactly that."""
    path = str(tmp_path / f"{arch}.gguf")
    write_random_model(path, arch, "F16", seed=3)
    shared = list(range(3, 3 + 45))
    prompts = [{"prompt_token_ids": shared + [60 + i] * (1 + i)} for i in range(4)]
    params = specdec.SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    off = _run(path, prompts, params, enable_prefix_caching=False, block_size=4, max_model_len=128)
    on = _run(path, prompts, params, enable_prefix_caching=True, block_size=4, max_model_len=128)
    assert on[:3] == off[:3]
    assert on[3].prefix_cache_stats()["hits"] >= 40
    _all_free(on[3])


def test_argument_checked():
    with pytest.raises(ValueError, match="enable_prefix_caching"):
        specdec.LLM(STORIES, progress=False, enable_prefix_caching="yes")


def test_dflash_context_is_cached_with_the_target_prefix():
    """A DFlash drafter's context is the target's hidden states: a prefix the target takes from
    its cache must be in the drafter's cache too, or the request would draft nothing."""
    from pathlib import Path
    drafter = str(Path(__file__).resolve().parents[2] / "data" / "dflash-stories260k")
    spec = {"method": "dflash", "model": drafter, "num_speculative_tokens": 5}
    off = _run(STORIES, PROMPTS, GREEDY, enable_prefix_caching=False, speculative_config=spec, block_size=4)
    on = _run(STORIES, PROMPTS, GREEDY, enable_prefix_caching=True, speculative_config=spec, block_size=4)
    assert on[:3] == off[:3]
    stats = on[3].prefix_cache_stats()
    assert stats["hits"] > 0 and stats["drafter"]["hits"] > 0
    _all_free(on[3])
    # requests that start after a cached prefix draft exactly as they do without the cache (the
    # drafter's cached context is what it would have computed)
    seq = PROMPTS + ["Once upon a time there was a little girl", "Once upon a time there was a little boy"]
    got = {}
    for pc in (False, True):
        llm = specdec.LLM(STORIES, progress=False, enable_prefix_caching=pc, speculative_config=spec, block_size=4)
        got[pc] = [llm.generate(p, GREEDY)[0] for p in seq]
    for a, b in zip(got[False], got[True]):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids
        assert (a.metrics["num_drafts"], a.metrics["num_accepted_tokens"]) == \
            (b.metrics["num_drafts"], b.metrics["num_accepted_tokens"])
    assert sum(o.metrics["num_cached_tokens"] > 0 for o in got[True]) >= 3
    last = got[True][-1].metrics
    assert last["num_cached_tokens"] > 0 and last["num_accepted_tokens"] / last["num_drafts"] >= 2
