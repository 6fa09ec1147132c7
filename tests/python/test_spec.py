"""Speculative decoding: SpeculativeConfig, proposers, the rejection sampler (alone and end to
end), losslessness against plain decoding for every method x backend, multi-group drafters,
pressure, threads."""

from __future__ import annotations

import json
import os
import re
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import specdec
from specdec import _core
from specdec.engine import EngineCore, LLMEngine
from specdec.testing import write_random_model

spec = _core.spec_decode
ROOT = Path(__file__).resolve().parents[2]
from paths import STORIES  # noqa: E402
GREEDY = specdec.SamplingParams(temperature=0, max_tokens=32, ignore_eos=True)
PROMPTS = ["Once upon a time", "The dog", "Lily went to the park and saw a big red ball. She",
           "Tom had a toy. Tom had a toy. Tom had a"]


# ---------------------------------------------------------------- SpeculativeConfig
def test_config_defaults_and_forms():
    c = specdec.SpeculativeConfig(method="ngram", num_speculative_tokens=4)
    assert (c.method, c.prompt_lookup_min, c.prompt_lookup_max) == ("ngram", 5, 5)
    c = spec.SpeculativeConfig.from_json('{"model": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": 3}')
    assert (c.method, c.prompt_lookup_min, c.prompt_lookup_max) == ("ngram", 3, 3)
    c = specdec.SpeculativeConfig(model="x.gguf", num_speculative_tokens=3, attention_backend="auto")
    assert c.method == "draft_model" and c.attention_backend is None
    assert specdec.SpeculativeConfig(model="x.gguf", num_speculative_tokens=3,
                                     attention_backend="ocl_paged").attention_backend == "OCL_PAGED"
    c = specdec.SpeculativeConfig(method="suffix")
    assert c.num_speculative_tokens == 24 and c.suffix_decoding_max_tree_depth == 24
    c = specdec.SpeculativeConfig(model="x", num_speculative_tokens=3, draft_kv_cache_memory_bytes="64MiB")
    assert c.draft_kv_cache_memory_bytes == 64 << 20


BAD_CONFIGS = [
    ({}, "speculative_config.method"),
    ({"method": "medusa", "num_speculative_tokens": 2}, "method = medusa"),
    ({"method": "ngram"}, "num_speculative_tokens = None"),
    ({"method": "ngram", "num_speculative_tokens": 0}, "num_speculative_tokens = 0"),
    ({"method": "ngram", "num_speculative_tokens": 33}, r"\[1, 32\]"),
    ({"method": "ngram", "num_speculative_tokens": 2.5}, "num_speculative_tokens = 2.5"),
    ({"method": "ngram", "num_speculative_tokens": True}, "num_speculative_tokens = true"),
    ({"method": "ngram", "num_speculative_tokens": "4"}, "num_speculative_tokens"),
    ({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4, "prompt_lookup_max": 2},
     "prompt_lookup_min = 4: <= prompt_lookup_max = 2"),
    ({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 0}, "prompt_lookup_min = 0"),
    ({"method": "draft_model", "num_speculative_tokens": 2}, "model = None"),
    ({"model": "d", "num_speculative_tokens": 2, "attention_backend": "FLASHINFER"},
     "attention_backend = FLASHINFER: None, 'auto' or one of"),
    ({"method": "ngram", "num_speculative_tokens": 2, "attention_backend": "OCL_PAGED"},
     "only for method draft_model"),
    ({"model": "d", "num_speculative_tokens": 2, "prompt_lookup_min": 2}, "only for method ngram"),
    ({"method": "suffix", "suffix_decoding_min_token_prob": 1.5}, "suffix_decoding_min_token_prob = 1.5"),
    ({"method": "suffix", "suffix_decoding_max_spec_factor": 0}, "suffix_decoding_max_spec_factor"),
    ({"method": "suffix", "suffix_decoding_max_tree_depth": 0}, "suffix_decoding_max_tree_depth = 0"),
    ({"method": "suffix", "model": "m"}, "model = m: None for method suffix"),
    ({"model": "d", "num_speculative_tokens": 2, "max_model_len": 1}, "max_model_len = 1"),
    ({"model": "d", "num_speculative_tokens": 2, "max_model_len": 64, "draft_max_model_len": 64},
     "alias"),
    ({"model": "d", "num_speculative_tokens": 2, "draft_kv_cache_memory_bytes": "lots"},
     "draft_kv_cache_memory_bytes = lots"),
    ({"model": "d", "num_speculative_tokens": 2, "draft_kv_cache_fraction": 1.0}, r"\(0, 1\)"),
    ({"model": "d", "num_speculative_tokens": 2, "draft_kv_cache_fraction": 0.5,
      "draft_kv_cache_memory_bytes": 1000}, "one of the two"),
    ({"model": "d", "num_speculative_tokens": 2, "kv_cache_dtype": "fp8"}, "kv_cache_dtype"),
    ({"method": "ngram", "num_speculative_tokens": 2, "disable_by_batch_size": 0}, "disable_by_batch_size = 0"),
    ({"method": "ngram", "num_speculative_tokens": 2, "k": 3}, "speculative_config.k = 3: a known field"),
    ({"method": "ngram", "num_speculative_tokens": 2, "draft_vocab_size": 64},
     r"draft_vocab_size = 64: None \(only for method draft_model\)"),
    ({"model": "d", "num_speculative_tokens": 2, "draft_vocab_size": -1}, "draft_vocab_size = -1"),
    ({"model": "d", "num_speculative_tokens": 2, "draft_vocab_file": "f.json"},
     "draft_vocab_file = f.json: None unless draft_vocab_size is given"),
    ({"method": "ngram", "num_speculative_tokens": 2, "draft_vocab_file": "f.json"},
     r"draft_vocab_file = f.json: None \(only for method draft_model\)"),
    ({"method": "ngram", "num_speculative_tokens": 2, "tensor_parallel_size": 2}, "one device"),
    ({"method": "custom", "num_speculative_tokens": 2}, "model = None"),
    ({"method": "custom", "num_speculative_tokens": 2, "model": "no_such_module:Thing"}, "no_such_module"),
    ({"method": "ngram", "num_speculative_tokens": 2, "proposer": object()}, "proposer"),
]


@pytest.mark.parametrize("fields,message", BAD_CONFIGS)
def test_config_errors_name_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        specdec.speculative.build_speculation(fields)


def test_config_errors_from_json_and_llm():
    with pytest.raises(ValueError, match="a JSON object"):
        specdec.speculative.build_speculation('{"method": "ngram"')
    with pytest.raises(ValueError, match="an object of fields"):
        specdec.speculative.build_speculation("[1, 2]")
    with pytest.raises(ValueError, match="speculative_config = 5"):
        specdec.LLM(STORIES, speculative_config=5, progress=False)
    # checked before anything loads: a missing drafter file is named
    with pytest.raises(ValueError):
        specdec.LLM(STORIES, speculative_config={"model": "/no/such/drafter.gguf",
                                                 "num_speculative_tokens": 2}, progress=False)


# ---------------------------------------------------------------- proposers alone
@pytest.mark.parametrize("tokens,lo,hi,k,want", [
    ([1, 2, 3, 4, 1, 2, 3], 2, 2, 3, [4, 1, 2]),
    ([1, 2, 3, 4, 1, 2, 3], 1, 1, 2, [4, 1]),
    ([1, 2, 3, 4, 1, 2, 3], 4, 4, 2, []),
    ([1, 2, 3, 4, 1, 2, 3], 3, 4, 2, [4, 1]),
    ([2, 3, 4, 5, 1, 2, 3, 4, 1, 2, 3, 4], 3, 4, 2, [1, 2]),
    ([1, 2, 3, 100, 1, 2, 3, 200, 1, 2, 3, 300, 1, 2, 3], 3, 3, 2, [100, 1]),
    ([1, 3, 6, 2, 3, 4, 1, 2, 3], 1, 1, 2, [6, 2]),
    ([1, 2, 3, 4, 1, 2, 3, 5, 6], 2, 2, 2, []),
])
def test_ngram_lookup_matches_vllm(tokens, lo, hi, k, want):
    assert spec.ngram_lookup(tokens, lo, hi, k) == want
    p = spec.NgramProposer(lo, hi)
    d = p.propose([spec.ProposeRequest(spec.Sequence("r", tokens), k)])
    assert list(d[0].tokens) == want and not d[0].has_probs


def test_ngram_respects_max_model_len():
    assert spec.ngram_lookup([1, 2, 3, 1, 2], 2, 2, 5, max_model_len=6) == [3]
    assert spec.ngram_lookup([1, 2, 3, 1, 2], 2, 2, 5, max_model_len=5) == []


def test_suffix_proposer_follows_repeated_text_and_global_cache():
    p = spec.SuffixProposer(max_tree_depth=8, max_cached_requests=2, max_spec_factor=2.0,
                            min_token_prob=0.1)
    seq = spec.Sequence("a", [5, 6, 7, 8, 9, 1, 2, 5, 6, 7])
    d = p.propose([spec.ProposeRequest(seq, 4)])[0]
    assert list(d.tokens) == [8, 9, 1, 2]  # match "5 6 7" (3 tokens) -> up to 6 drafted, k=4
    # no repeated suffix: nothing drafted
    assert list(p.propose([spec.ProposeRequest(spec.Sequence("b", [1, 2, 3, 4]), 4)])[0].tokens) == []
    # a finished request's output joins the global tree and drafts for a new request
    done = spec.Sequence("c", [100])
    done.append([40, 41, 42, 43, 44, 45])
    p.finish(done)
    assert p.num_cached_requests == 1
    d = p.propose([spec.ProposeRequest(spec.Sequence("d", [7, 40, 41, 42]), 3)])[0]
    assert list(d.tokens) == [43, 44, 45]
    for i in range(3):  # eviction keeps at most max_cached_requests
        s = spec.Sequence(f"e{i}", [1])
        s.append([60 + i, 61, 62])
        p.finish(s)
    assert p.num_cached_requests == 2
    assert list(p.propose([spec.ProposeRequest(spec.Sequence("f", [40, 41, 42]), 3)])[0].tokens) == []


# ---------------------------------------------------------------- rejection sampler alone
def test_greedy_verification_matches_vllm_cases():
    assert spec.verify_greedy([1, 2, 3], np.array([1, 2, 3, 4], np.int32)) == ([1, 2, 3, 4], 3)
    assert spec.verify_greedy([1, 2, 3], np.array([1, 5, 3, 4], np.int32)) == ([1, 5], 1)
    assert spec.verify_greedy([], np.array([7], np.int32)) == ([7], 0)
    with pytest.raises(ValueError, match="target_argmax"):
        spec.verify_greedy([1, 2], np.array([1, 2], np.int32))


def _tv(counts: np.ndarray, p: np.ndarray) -> float:
    return 0.5 * float(np.abs(counts / counts.sum() - p).sum())


@pytest.mark.parametrize("coupled", [False, True], ids=["rejection", "coupled"])
@pytest.mark.parametrize("kind", ["point_mass", "draft_probs"])
def test_stochastic_verification_reproduces_the_target_distribution(kind, coupled):
    """Synthetic 6-token distributions: the first output token of speculative sampling is
    distributed as the target's p, whatever the draft; the second one (after an accepted first
    draft) as p of row 1."""
    rng = np.random.default_rng(0)
    V, n = 6, 20000
    logits = rng.normal(size=(3, V)).astype(np.float32) * 1.5
    p = np.exp(logits - logits.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    q = rng.dirichlet(np.ones(V), size=2).astype(np.float32)
    gen = _core.SamplingGenerator(123, coupled=coupled)
    first = np.zeros(V)
    drafted = np.zeros(V)
    for i in range(n):
        if kind == "point_mass":
            d0 = int(rng.integers(V))
            draft = spec.Draft([d0, int(rng.integers(V))])
        else:
            d0 = int(rng.choice(V, p=q[0] / q[0].sum()))
            d1 = int(rng.choice(V, p=q[1] / q[1].sum()))
            draft = _draft_with_probs([d0, d1], q)
        tokens, acc = spec.verify_sampled(draft, logits, 1.0, generator=gen, first_position=3 * i)
        first[tokens[0]] += 1
        assert len(tokens) == acc + 1 and acc <= 2
        drafted[d0] += 1
    assert _tv(first, p[0]) < 0.015, (first / n, p[0])
    if kind == "point_mass":  # the drafts were uniform, far from p: the test has teeth
        assert _tv(drafted, p[0]) > 0.1


def _draft_with_probs(tokens, q):
    """A Draft carrying draft probabilities q[i] for its tokens."""
    return spec.Draft(tokens, np.ascontiguousarray(q[:len(tokens)]))


def test_stochastic_verification_respects_top_k_and_temperature():
    logits = np.array([[3.0, 2.0, 1.0, 0.0, -1.0]] * 2, np.float32)
    gen = _core.SamplingGenerator(5)
    seen = set()
    for i in range(3000):
        toks, _ = spec.verify_sampled(spec.Draft([4]), logits, 0.7, top_k=2, generator=gen,
                                      first_position=i)
        seen.add(toks[0])
    assert seen == {0, 1}  # the draft (outside the top 2) is never accepted


# ---------------------------------------------------------------- lossless end to end
def _plain(path: str, prompts, params, **kw):
    kw.setdefault("progress", False)
    llm = specdec.LLM(path, **kw)
    return [o.outputs[0].token_ids for o in llm.generate(prompts, params)]


@pytest.fixture(scope="module")
def stories_plain():
    return {b: _plain(STORIES, PROMPTS, GREEDY, attention_backend=b) for b in ("OCL_PAGED", "REFERENCE")}


METHODS = [
    {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3},
    {"method": "suffix", "num_speculative_tokens": 5},
    {"method": "draft_model", "model": STORIES, "num_speculative_tokens": 3},
    {"method": "draft_model", "model": STORIES, "num_speculative_tokens": 4, "attention_backend": "REFERENCE"},
    {"method": "draft_model", "model": STORIES, "num_speculative_tokens": 5, "adaptive": True},
    {"method": "draft_model", "model": STORIES, "num_speculative_tokens": 3, "draft_vocab_size": 48},
    {"method": "ngram", "num_speculative_tokens": 6, "prompt_lookup_min": 1, "prompt_lookup_max": 3,
     "adaptive": True},
]


class BadProposer(specdec.Proposer):
    """Drafts deliberately wrong tokens (the next id after the last one)."""

    def propose(self, requests):
        return [[(r.token_ids[-1] + 1 + i) % 512 for i in range(r.num_speculative_tokens)]
                for r in requests]


class EchoProposer(specdec.Proposer):
    """Drafts the last token again: right sometimes."""

    def propose(self, requests):
        return [[r.token_ids[-1]] * r.num_speculative_tokens for r in requests]


CASES = ([("OCL_PAGED", c) for c in METHODS + ["bad", "echo"]]
         + [("REFERENCE", METHODS[2]), ("REFERENCE", "bad")])  # the host reference target is slow


@pytest.mark.parametrize("target_backend,cfg", CASES, ids=lambda c: c if isinstance(c, str) else
                         f"{c['method']}-{c.get('attention_backend', 'auto')}"
                         f"{'-adaptive' if c.get('adaptive') else ''}"
                         f"{'-vocab' if c.get('draft_vocab_size') else ''}")
def test_lossless_greedy_stories(stories_plain, target_backend, cfg):
    if isinstance(cfg, str):
        cfg = {"method": "custom", "num_speculative_tokens": 3,
               "proposer": BadProposer() if cfg == "bad" else EchoProposer()}
    llm = specdec.LLM(STORIES, attention_backend=target_backend, progress=False, speculative_config=cfg)
    free = (llm.runner.num_free_blocks(), llm.drafter.num_free_blocks() if llm.drafter else None)
    outs = llm.generate(PROMPTS, GREEDY)
    assert [o.outputs[0].token_ids for o in outs] == stories_plain[target_backend]
    m = llm.last_metrics
    assert m["num_drafts"] > 0 and m["num_draft_tokens"] >= m["num_drafts"]
    per = outs[0].metrics
    assert per["mean_acceptance_length"] == pytest.approx(1 + per["num_accepted_tokens"] / max(per["num_drafts"], 1))
    if cfg["method"] == "draft_model" and not cfg.get("draft_vocab_size"):
        assert m["num_accepted_tokens"] == m["num_draft_tokens"]  # the same model drafting itself
    if cfg.get("draft_vocab_size"):  # drafts only from the 48 ids + the prompts' tokens
        assert llm.drafter.num_logit_columns >= 48 and 0 < m["num_accepted_tokens"] < m["num_draft_tokens"]
    if cfg.get("proposer").__class__ is BadProposer:
        assert m["num_accepted_tokens"] < m["num_draft_tokens"] // 2
    # every block of target and drafter is back
    assert (llm.runner.num_free_blocks(), llm.drafter.num_free_blocks() if llm.drafter else None) == free


class SlowProposer(specdec.Proposer):
    """Always wrong and slow (20 ms a call): adaptive speculation must turn it off."""

    def propose(self, requests):
        time.sleep(0.02)
        return [[(r.token_ids[-1] + 1 + i) % 512 for i in range(r.num_speculative_tokens)]
                for r in requests]


def test_adaptive_turns_off_a_losing_proposer_and_stays_lossless(stories_plain):
    llm = specdec.LLM(STORIES, progress=False, speculative_config={
        "method": "custom", "num_speculative_tokens": 4, "adaptive": True, "proposer": SlowProposer()})
    params = specdec.SamplingParams(temperature=0, max_tokens=60, ignore_eos=True)
    outs = llm.generate(PROMPTS[:1], params)
    want = _plain(STORIES, PROMPTS[:1], params)
    assert [o.outputs[0].token_ids for o in outs] == want
    m = llm.last_metrics
    ad = llm.engine.core.adaptive
    assert ad is not None and ad.num_off_steps > 30  # most of the 60 steps ran plain
    assert 2 <= m["num_drafts"] <= 12  # two to explore, a few probes
    assert llm.speculative_config.adaptive is True


def test_adaptive_keeps_speculating_when_drafts_are_right():
    llm = specdec.LLM(STORIES, progress=False, speculative_config={
        "method": "draft_model", "model": STORIES, "num_speculative_tokens": 4, "adaptive": True})
    params = specdec.SamplingParams(temperature=0, max_tokens=60, ignore_eos=True)
    llm.generate(PROMPTS[:1], params)
    m = llm.last_metrics
    # the same model drafting: every draft is accepted; on the tiny model a drafter step costs
    # about as much as a target step, so k may be anything, but acceptance stays perfect
    assert m["num_accepted_tokens"] == m["num_draft_tokens"]


def test_drafter_backend_is_chosen_independently():
    llm = specdec.LLM(STORIES, attention_backend="REFERENCE", progress=False,
                      speculative_config={"model": STORIES, "num_speculative_tokens": 2})
    assert set(llm.runner.attention_backends) == {"REFERENCE"}
    assert "REFERENCE" not in llm.drafter.attention_backends  # auto: never inherited
    # the default KV cache: 16 requests of the whole context in both models, split between them
    total = llm.kv_split["target_bytes"] + llm.kv_split["drafter_bytes"]
    assert total == llm.kv_sizing.kv_cache_memory_bytes == 16 * llm.kv_sizing.request_bytes
    assert llm.kv_split["drafter_bytes"] > 0 and llm.kv_split["rule"]
    with pytest.raises(ValueError, match="OCL_MLA"):  # a named backend that does not fit: reasons
        specdec.LLM(STORIES, progress=False, speculative_config={
            "model": STORIES, "num_speculative_tokens": 2, "attention_backend": "OCL_MLA"})


@pytest.fixture(scope="module")
def random_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("spec_random")
    paths = {}
    for arch in ("llama", "deepseek2", "gemma3", "llama-chunked", "llama-kvshare"):
        p = d / f"{arch}.gguf"
        write_random_model(p, arch, "F16", seed=1)
        paths[arch] = str(p)
    return paths


@pytest.mark.parametrize("target,drafter,drafter_backend", [
    ("deepseek2", "llama", None),          # MLA target, GQA drafter
    ("llama", "deepseek2", None),          # GQA target, MLA drafter
    ("llama", "gemma3", "REFERENCE"),      # a drafter with two KV groups on another backend
    ("gemma3", "llama", "OCL_PAGED"),
    ("llama-chunked", "llama-kvshare", None),  # chunked-local virtual batches; a KV-sharing drafter
    ("llama-kvshare", "llama-chunked", "OCL_PAGED"),
])
def test_lossless_greedy_random_models(random_dir, target, drafter, drafter_backend):
    t, d = random_dir[target], random_dir[drafter]
    params = specdec.SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    prompts = [{"prompt_token_ids": list(range(3, 3 + n))} for n in (5, 17, 40)]
    want = _plain(t, prompts, params, max_model_len=128)
    cfg = {"model": d, "num_speculative_tokens": 3, "attention_backend": drafter_backend}
    llm = specdec.LLM(t, progress=False, max_model_len=128, speculative_config=cfg)
    assert [o.outputs[0].token_ids for o in llm.generate(prompts, params)] == want
    if drafter_backend:
        assert set(llm.drafter.attention_backends) == {drafter_backend}
    # self-drafting: the target's own model as drafter accepts everything
    llm = specdec.LLM(t, progress=False, max_model_len=128,
                      speculative_config={"model": t, "num_speculative_tokens": 3})
    outs = llm.generate(prompts, params)
    assert [o.outputs[0].token_ids for o in outs] == want
    assert llm.last_metrics["num_accepted_tokens"] == llm.last_metrics["num_draft_tokens"] > 0


# ---------------------------------------------------------------- sampling end to end
@pytest.mark.parametrize("cfg", [
    None,
    {"method": "draft_model", "model": STORIES, "num_speculative_tokens": 3},
    {"method": "draft_model", "model": STORIES, "num_speculative_tokens": 3, "draft_vocab_size": 24},
    {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 2},
    {"method": "layer_skip", "num_speculative_tokens": 3, "exit_layer": 3},
    {"method": "hybrid", "num_speculative_tokens": 3, "proposers": [
        {"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 2},
        {"method": "draft_model", "model": STORIES, "draft_vocab_size": 24}]},
    "bad",
], ids=["plain", "draft_model", "draft_model_reduced_vocab", "ngram", "layer_skip", "hybrid", "bad_custom"])
def test_speculative_sampling_distribution_equals_target(cfg, request):
    """Tokens 2..4 of a sampled continuation come from one verify step; their marginals under
    speculation match plain sampling (total variation against a large plain sample). Seeded
    requests: coupled verification."""
    _check_sampling_distribution(cfg, seeded=True)


@pytest.mark.parametrize("cfg", [
    {"method": "draft_model", "model": STORIES, "num_speculative_tokens": 3},
    {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 2},
    {"method": "hybrid", "num_speculative_tokens": 3, "proposers": [
        {"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 2},
        {"method": "draft_model", "model": STORIES, "draft_vocab_size": 24}]},
], ids=["draft_model", "ngram", "hybrid"])
def test_unseeded_speculative_sampling_distribution_equals_target(cfg):
    """The same without seeds: rejection sampling (accept with min(1, p/q), residual draws)."""
    _check_sampling_distribution(cfg, seeded=False)


def _check_sampling_distribution(cfg, seeded: bool) -> None:
    if cfg == "bad":
        cfg = {"method": "custom", "num_speculative_tokens": 3, "proposer": BadProposer()}
    n = 800
    params = [specdec.SamplingParams(temperature=1.0, top_k=6, max_tokens=4, ignore_eos=True,
                                     seed=s if seeded else None) for s in range(n)]
    prompt = "Tom had a toy. Tom had a"
    ref = _reference_sample(prompt)
    llm = specdec.LLM(STORIES, progress=False, max_num_seqs=64, speculative_config=cfg)
    outs = llm.generate([prompt] * n, params)
    toks = np.array([o.outputs[0].token_ids for o in outs])
    for pos in (1, 2, 3):
        z = _chi2_z(toks[:, pos], ref[:, pos])
        assert z < 4.0, (pos, z)  # z = 4: p ~ 3e-5 under equal distributions
    if cfg is not None:
        assert llm.last_metrics["num_draft_tokens"] > 0


_REF = {}


def _reference_sample(prompt):
    if prompt not in _REF:
        n = 2400
        params = [specdec.SamplingParams(temperature=1.0, top_k=6, max_tokens=4, ignore_eos=True,
                                         seed=10**6 + s) for s in range(n)]
        llm = specdec.LLM(STORIES, progress=False, max_num_seqs=64)
        _REF[prompt] = np.array([o.outputs[0].token_ids for o in llm.generate([prompt] * n, params)])
    return _REF[prompt]


def _chi2_z(a, b) -> float:
    """Two-sample chi-square test of homogeneity (categories with fewer than 10 samples in all
    pooled), as a z-score by the Wilson-Hilferty approximation: large when a and b differ."""
    keys, counts = np.unique(np.concatenate([a, b]), return_counts=True)
    ca = np.array([(a == k).sum() for k in keys], float)
    cb = np.array([(b == k).sum() for k in keys], float)
    small = counts < 10
    if small.any():
        ca = np.append(ca[~small], ca[small].sum())
        cb = np.append(cb[~small], cb[small].sum())
    table = np.stack([ca, cb])
    table = table[:, table.sum(0) > 0]
    expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / table.sum()
    chi2 = float(((table - expected) ** 2 / expected).sum())
    df = table.shape[1] - 1
    if df < 1:
        return 0.0
    return ((chi2 / df) ** (1 / 3) - (1 - 2 / (9 * df))) / np.sqrt(2 / (9 * df))


def test_chi2_check_has_teeth():
    rng = np.random.default_rng(1)
    p = np.array([0.4, 0.3, 0.2, 0.1])
    a, b = rng.choice(4, 800, p=p), rng.choice(4, 2400, p=p)
    assert _chi2_z(a, b) < 4
    c = rng.choice(4, 800, p=[0.3, 0.3, 0.25, 0.15])  # TV 0.1 away
    assert _chi2_z(c, b) > 4


# ---------------------------------------------------------------- pressure, threads, abort
def test_pressure_waits_and_preempts_with_speculation():
    prompts = [f"{p} {i}" for i in range(6) for p in PROMPTS]  # 24 requests
    params = specdec.SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    want = _plain(STORIES, prompts, params, max_model_len=128, kv_cache_memory_bytes="8MiB")
    llm = specdec.LLM(STORIES, progress=False, max_model_len=128, kv_cache_memory_bytes=400_000,
                      max_num_seqs=32,
                      speculative_config={"model": STORIES, "num_speculative_tokens": 3})
    free_t, free_d = llm.runner.num_free_blocks(), llm.drafter.num_free_blocks()
    assert free_t[0] < 24 * 3  # not every request fits at once
    outs = llm.generate(prompts, params)
    assert [o.outputs[0].token_ids for o in outs] == want
    assert llm.last_metrics["num_preemptions"] > 0
    assert llm.runner.num_free_blocks() == free_t and llm.drafter.num_free_blocks() == free_d


def test_threads_stream_and_abort_join_one_loop():
    llm = specdec.LLM(STORIES, progress=False,
                      speculative_config={"method": "suffix", "num_speculative_tokens": 4})
    params = specdec.SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    want = _plain(STORIES, PROMPTS, params)
    results, errors = {}, []

    def run(i):
        try:
            text, ids = "", []
            for item in llm.stream(PROMPTS[i], params):
                text += item.new_text
                ids += item.new_token_ids
                if item.finished:
                    results[i] = (ids, text, item.output)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    # a long request aborted from this thread while the others run
    long = specdec.SamplingParams(temperature=0, max_tokens=10_000, ignore_eos=True)
    stream = llm.stream("Once upon a time", long)
    first = next(stream)
    llm.abort(first.request_id)
    last = list(stream)[-1]
    assert last.finished and last.output.outputs[0].finish_reason == "abort"
    for t in threads:
        t.join(120)
    assert not errors and all(not t.is_alive() for t in threads)
    for i in range(len(PROMPTS)):
        ids, text, out = results[i]
        assert ids == want[i] == out.outputs[0].token_ids
        assert text == out.outputs[0].text
    assert not llm.runner.has_request(first.request_id)


def test_custom_proposer_errors_are_clear():
    class Wrong(specdec.Proposer):
        def propose(self, requests):
            return [[10**6] for _ in requests]
    llm = specdec.LLM(STORIES, progress=False, speculative_config={
        "method": "custom", "num_speculative_tokens": 2, "proposer": Wrong()})
    with pytest.raises(ValueError, match="draft token 1000000"):
        llm.generate("Once", specdec.SamplingParams(temperature=0, max_tokens=5))
    # the engine is usable afterwards (the failed requests were ended)
    assert not llm.engine.has_unfinished_requests()


def test_plain_engine_is_the_same_step_without_proposer():
    llm = specdec.LLM(STORIES, progress=False)
    assert llm.engine.core.proposer is None and llm.engine.core.k == 0
    eng = llm.engine
    r = llm._make_request("Once upon a time", GREEDY)
    sink = eng.add_request(r)
    while eng.has_unfinished_requests():
        eng.step()
    items = []
    while not sink.empty():
        items.append(sink.get())
    assert items[-1].finished
    assert sum((i.new_token_ids for i in items), []) == _plain(STORIES, ["Once upon a time"], GREEDY)[0]


def test_sliding_window_rollback_past_committed_blocks():
    """A drafter's window blocks are freed only from the committed length: rolling back the
    draft tokens works; freeing from the computed length would have refused it (Gemma 3: a
    512-token window, 16-token blocks)."""
    def manager():
        layers = specdec.example_model_layers("gemma3-270m", 16)
        return specdec.KvCacheManager(specdec.plan_kv_cache(layers, 0, 4096, num_blocks_override=200))
    m = manager()
    assert m.allocate_slots("r", 0, 1020).ok
    for pos in range(1020, 1025):  # draft tokens past the committed 1020
        assert m.allocate_slots("r", pos, 1, num_committed_tokens=1020).ok
    m.truncate("r", 1021)  # one draft accepted: the query at 1021 still sees token 510
    assert m.num_freed_blocks("r", 0) == 31
    m2 = manager()
    assert m2.allocate_slots("r", 0, 1020).ok
    for pos in range(1020, 1025):
        assert m2.allocate_slots("r", pos, 1).ok
    assert m2.num_freed_blocks("r", 0) == 32
    with pytest.raises(ValueError, match="already freed"):
        m2.truncate("r", 1021)


# ---------------------------------------------------------------- real models
QWEN_T, QWEN_D = "qwen2.5-coder-1.5b-instruct-q4_k_m", "qwen2.5-coder-0.5b-instruct-q4_k_m"
CODE_PROMPTS = [
    "def fibonacci(n):",
    "# Rewrite this function to use a list comprehension.\ndef squares(xs):\n    out = []\n"
    "    for x in xs:\n        out.append(x * x)\n    return out\n\n# Rewritten:\ndef squares(xs):",
    "Write a short story about a robot who learns to paint.",
]


def test_lossless_greedy_real_qwen_pair(real_model, tmp_path):
    """The 1.5B target with the methods that run a model on the device (the 0.5B drafter as the
    main job runs it; layer_skip with the target's own first 26 layers; a random DFlash drafter
    on its hidden states; the hybrid of suffix and the 0.5B), a batch of prompts of different
    lengths: token for token the target's own greedy output. Every method, the host-only n-gram
    and suffix drafters included, runs on this pair on the native device (the next test)."""
    from specdec.testing import write_random_dflash
    target, drafter = real_model(QWEN_T), real_model(QWEN_D)
    dflash = str(write_random_dflash(tmp_path / "dflash", target, seed=5, block_size=5, dtype="BF16"))
    params = specdec.SamplingParams(temperature=0, max_tokens=24)
    kw = dict(max_model_len=512, kv_cache_memory_bytes="96MiB", progress=False)
    want = _plain(target, CODE_PROMPTS, params, **kw)
    for cfg in (# the main job's drafter: reduced vocabulary from the committed ranking, adaptive k
                {"method": "draft_model", "model": drafter, "num_speculative_tokens": 4, "adaptive": True,
                 "draft_vocab_size": 16384,
                 "draft_vocab_file": str(ROOT / "data" / "draft_vocab_qwen2.5-coder.json")},
                {"method": "layer_skip", "num_speculative_tokens": 3, "exit_layer": 26},
                {"method": "dflash", "model": dflash, "num_speculative_tokens": 4},
                {"method": "hybrid", "num_speculative_tokens": 4, "proposers": [
                    {"method": "suffix"}, {"method": "draft_model", "model": drafter}]}):
        llm = specdec.LLM(target, speculative_config=cfg, **kw)
        outs = llm.generate(CODE_PROMPTS, params)
        assert [o.outputs[0].token_ids for o in outs] == want, cfg
        m = llm.last_metrics
        if cfg["method"] in ("draft_model", "layer_skip", "hybrid"):  # drafts that agree (DFlash: random)
            assert m["num_draft_tokens"] > 0 and m["acceptance_rate"] > 0.4, (cfg["method"], m)
        elif cfg["method"] == "dflash":
            assert m["num_draft_tokens"] > 0, m
        del llm


def test_lossless_greedy_real_qwen_pair_on_the_native_device(real_model, tmp_path):
    """The same pair on specdec's own CPU device (device="native"): every method token for token
    the target's own greedy output on that device, and the 0.5B drafting from the other device
    (PoCL) for the target on this one."""
    from specdec.testing import write_random_dflash
    target, drafter = real_model(QWEN_T), real_model(QWEN_D)
    dflash = str(write_random_dflash(tmp_path / "dflash", target, seed=5, block_size=5, dtype="BF16"))
    params = specdec.SamplingParams(temperature=0, max_tokens=16)
    prompts = CODE_PROMPTS[:2]
    kw = dict(max_model_len=512, kv_cache_memory_bytes="96MiB", progress=False, device="native")
    want = _plain(target, prompts, params, **kw)
    for cfg in ({"method": "draft_model", "model": drafter, "num_speculative_tokens": 4},
                {"method": "draft_model", "model": drafter, "num_speculative_tokens": 4, "device": "ocl:auto"},
                {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2, "prompt_lookup_max": 4},
                {"method": "suffix", "num_speculative_tokens": 6},
                {"method": "layer_skip", "num_speculative_tokens": 3, "exit_layer": 26},
                {"method": "dflash", "model": dflash, "num_speculative_tokens": 4},
                {"method": "hybrid", "num_speculative_tokens": 4, "proposers": [
                    {"method": "suffix"}, {"method": "draft_model", "model": drafter}]}):
        llm = specdec.LLM(target, speculative_config=cfg, **kw)
        assert llm.context.kind == "cpu"
        outs = llm.generate(prompts, params)
        assert [o.outputs[0].token_ids for o in outs] == want, cfg
        m = llm.last_metrics
        if cfg["method"] in ("draft_model", "layer_skip", "hybrid"):
            assert m["num_draft_tokens"] > 0 and m["acceptance_rate"] > 0.4, (cfg, m)
        del llm


def test_gemma_drafting_for_itself_two_kv_groups(real_model):
    """Gemma-3-270M drafts for itself: the drafter has two KV-cache groups (5 sliding + 1 global
    layers); the prompt is longer than the 512-token window, so window blocks are freed while
    drafts are rolled back. Same backend as the target: every draft token accepted. Another
    backend: output still equal to plain decoding, acceptance >= 99 %."""
    path = real_model("gemma-3-270m-q4_k_m")
    story = ("The old lighthouse keeper climbed the stairs every evening to light the lamp. "
             "He counted the steps, one hundred and twelve, and listened to the sea below. ")
    prompt = story * 22 + "One night, the lamp would not light, and"
    params = specdec.SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    kw = dict(max_model_len=1024, kv_cache_memory_bytes="64MiB", progress=False)
    plain = specdec.LLM(path, **kw)
    n_prompt = len(plain.tokenizer.encode(prompt, add_special=True))
    assert n_prompt > 600
    assert len(plain.runner.kv_config.groups) == 2
    want = plain.generate(prompt, params)[0].outputs[0].token_ids
    del plain
    # (not the REFERENCE backend too: 36 of the test's 51 s; a two-group drafter on it:
    # test_lossless_greedy_random_models[llama-gemma3-REFERENCE])
    for backend in (None, "OCL_PAGED"):
        llm = specdec.LLM(path, speculative_config={"model": path, "num_speculative_tokens": 4,
                                                    "attention_backend": backend}, **kw)
        assert len(llm.drafter.kv_config.groups) == 2
        free = llm.drafter.num_free_blocks()
        out = llm.generate(prompt, params)[0]
        assert out.outputs[0].token_ids == want, backend
        m = out.metrics
        rate = m["num_accepted_tokens"] / m["num_draft_tokens"]
        if backend is None:
            assert set(llm.drafter.attention_backends) == set(llm.runner.attention_backends)
            assert rate == 1.0, (backend, m)
        else:  # really another backend than the target's, or this case checks nothing new
            assert set(llm.drafter.attention_backends) != set(llm.runner.attention_backends)
            assert rate >= 0.99, (backend, m)
        assert llm.drafter.num_free_blocks() == free
        del llm


# ---------------------------------------------------------------- CLI
def _cli(*args):
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "specdec", *args], capture_output=True, text=True)


@pytest.mark.parametrize("cfg", [
    '{"method": "draft_model", "model": "%s", "num_speculative_tokens": 3}' % STORIES,
    '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3}',
    '{"method": "suffix"}',
])
def test_cli_generate_prints_text_then_metrics(cfg):
    base = _cli("generate", "--model", STORIES, "--prompt", "Once upon a time", "--max-tokens", "30")
    out = _cli("generate", "--model", STORIES, "--prompt", "Once upon a time", "--max-tokens", "30",
               "--speculative-config", cfg, "--json-metrics")
    assert out.returncode == 0, out.stderr
    assert out.stdout == base.stdout  # the same text as plain decoding
    assert "speculative:" in out.stderr and "mean acceptance length" in out.stderr
    assert "time: draft" in out.stderr
    metrics = json.loads(out.stderr.strip().splitlines()[-1])
    assert metrics["num_draft_tokens"] >= metrics["num_accepted_tokens"] >= 0
    assert len(metrics["acceptance_rate_per_pos"]) >= 1


def test_cli_generate_compare_plain_prints_the_side_by_side_table():
    cfg = '{"method": "draft_model", "model": "%s", "num_speculative_tokens": 4, "adaptive": true}' % STORIES
    out = _cli("generate", "--model", STORIES, "--prompt", "Once upon a time", "--max-tokens", "24",
               "--speculative-config", cfg, "--compare-plain")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("decoding"))
    assert "tokens/s" in lines[head] and "acceptance" in lines[head] and "speedup" in lines[head]
    assert lines[head + 1].startswith("plain") and lines[head + 1].rstrip().endswith("1.00x")
    assert lines[head + 2].startswith("draft_model stories260K.gguf k=4 adaptive")
    assert " 24 " in lines[head + 1] and " 24 " in lines[head + 2]
    assert lines[head + 3] == "identical output (greedy, lossless): yes"
    bad = _cli("generate", "--model", STORIES, "--prompt", "x", "--compare-plain")
    assert bad.returncode != 0 and "--compare-plain" in bad.stderr and "--speculative-config" in bad.stderr


def test_cli_speculative_config_errors_are_one_line_before_loading():
    out = _cli("generate", "--model", STORIES, "--prompt", "x",
               "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 99}')
    assert out.returncode == 2
    assert out.stderr.strip() == ("specdec: error: --speculative-config: "
                                  "speculative_config.num_speculative_tokens = 99: an integer in [1, 32]")
    assert "loading weights" not in out.stderr


def test_cli_kv_plan_and_backends_show_target_and_drafter():
    cfg = '{"model": "%s", "num_speculative_tokens": 3, "attention_backend": "REFERENCE"}' % STORIES
    out = _cli("kv-plan", "--model", STORIES, "--budget", "64MiB", "--speculative-config", cfg)
    assert out.returncode == 0, out.stderr
    assert "[target]" in out.stdout and "[drafter]" in out.stdout and "proportional" in out.stdout
    out = _cli("backends", "--model", STORIES, "--speculative-config", cfg)
    assert out.returncode == 0, out.stderr
    assert "[target]" in out.stdout and "[drafter]" in out.stdout
    assert "REFERENCE: chosen (requested)" in out.stdout


def test_stopping_a_stream_early_aborts_and_frees_at_once():
    llm = specdec.LLM(STORIES, progress=False,
                      speculative_config={"model": STORIES, "num_speculative_tokens": 3})
    free = (llm.runner.num_free_blocks(), llm.drafter.num_free_blocks())
    stream = llm.stream("Once upon a time", specdec.SamplingParams(temperature=0, max_tokens=500,
                                                                   ignore_eos=True))
    for i, _ in enumerate(stream):
        if i == 3:
            break
    stream.close()
    assert not llm.engine.has_unfinished_requests()
    assert (llm.runner.num_free_blocks(), llm.drafter.num_free_blocks()) == free

    def boom(rid, text):
        raise KeyError("callback failed")
    with pytest.raises(KeyError):
        llm.generate(PROMPTS, GREEDY, on_token=boom)
    assert not llm.engine.has_unfinished_requests()
    assert (llm.runner.num_free_blocks(), llm.drafter.num_free_blocks()) == free


def test_review_findings_custom_proposers_and_aborts():
    # drafts from Python are point masses even when they carry probabilities
    class WithProbs(specdec.Proposer):
        def propose(self, requests):
            return [spec.Draft([268], np.full((1, 512), 1 / 512, np.float32)) for _ in requests]
    llm = specdec.LLM(STORIES, progress=False, speculative_config={
        "method": "custom", "num_speculative_tokens": 1, "proposer": WithProbs()})
    r = llm._make_request("Once", GREEDY)
    checked = llm.engine.core._check_custom(WithProbs().propose([r]), [(r, 1)])
    assert list(checked[0].tokens) == [268] and not checked[0].has_probs
    # an unknown id aborted now does not end a later request that gets that id
    llm.abort(str(llm._next_id))
    out = llm.generate("Once", specdec.SamplingParams(temperature=0, max_tokens=5))[0]
    assert out.outputs[0].finish_reason == "length"
    # generate from inside propose is refused, not a hang
    class Reenter(specdec.Proposer):
        def propose(self, requests):
            return [list(llm2.generate("x", GREEDY)[0].outputs[0].token_ids)[:1] for _ in requests]
    llm2 = specdec.LLM(STORIES, progress=False, speculative_config={
        "method": "custom", "num_speculative_tokens": 1, "proposer": Reenter()})
    with pytest.raises(RuntimeError, match="inside its own step"):
        llm2.generate("Once", specdec.SamplingParams(temperature=0, max_tokens=4))
    assert not llm2.engine.has_unfinished_requests()


@pytest.mark.parametrize("fields,message", [
    ({"method": "custom", "num_speculative_tokens": 2, "model": "os:getcwd"}, "not a class"),
    ({"method": "custom", "num_speculative_tokens": 2, "model": "specdec:LLM"},
     "not a subclass of specdec.Proposer"),
    ({"method": "custom", "num_speculative_tokens": 2, "model": "specdec.proposers:Proposer"},
     "abstract"),
    ({"method": "custom", "num_speculative_tokens": 2, "proposer": EchoProposer}, "not the class"),
    ({"method": "suffix", "suffix_decoding_min_token_prob": float("nan")}, "suffix_decoding_min_token_prob"),
    ({"method": "suffix", "suffix_decoding_max_tree_depth": 65}, r"\[1, 64\]"),
    ({"model": "d", "num_speculative_tokens": 2, "draft_kv_cache_memory_bytes": "1.2.3MiB"}, "1.2.3MiB"),
])
def test_review_findings_config(fields, message):
    with pytest.raises(ValueError, match=message):
        specdec.speculative.build_speculation(fields)
    assert specdec.speculative.build_speculation(
        {"method": "ngram", "num_speculative_tokens": np.int64(3)}).config.num_speculative_tokens == 3


# ---------------------------------------------------------------- reduced draft vocabulary
def test_draft_vocab_file_from_the_cli_ranks_the_drafters_vocabulary(tmp_path, capsys):
    from specdec import cli
    from specdec.draft_vocab import draft_vocab_ids, read_ranking
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text("Tom had a toy. Tom had a ball. The ball was red.\n" * 20)
    (corpus / "b.md").write_text("Lily saw a cat. The cat was big.\n" * 5)
    (corpus / "skip.bin").write_bytes(b"\x00\x01")
    out = tmp_path / "vocab.json"
    assert cli.main(["draft-vocab", STORIES, str(corpus), "--out", str(out), "--quiet"]) == 0
    text = capsys.readouterr().out
    assert "2 files" in text and "ids seen" in text
    doc = json.loads(out.read_text())
    assert doc["format"] == "specdec-draft-vocab/1" and doc["vocab_size"] == 512 and doc["num_files"] == 2
    counts = [c for _, c in doc["token_counts"]]
    assert counts == sorted(counts, reverse=True) and sum(counts) == doc["num_tokens"] > 0
    tok = specdec.Tokenizer.from_file(STORIES)
    top = doc["token_counts"][0][0]
    assert top in tok.encode("Tom had a toy. Tom had a ball.", add_special=False)
    ranking = read_ranking(str(out), 512)
    ids = draft_vocab_ids(16, 512, tok.eos_token_ids, ranking)
    assert len(ids) == 16 and ids == sorted(ids) and set(tok.eos_token_ids) <= set(ids)
    assert set(ranking[:16 - len(tok.eos_token_ids)]) <= set(ids)
    # used by speculative_config: lossless, drafts only from the ranked ids and the prompts' own
    cfg = {"method": "draft_model", "model": STORIES, "num_speculative_tokens": 3,
           "draft_vocab_size": 16, "draft_vocab_file": str(out)}
    llm = specdec.LLM(STORIES, progress=False, speculative_config=cfg)
    assert llm.drafter.logit_token_ids == ids
    outs = llm.generate(PROMPTS, GREEDY)
    assert [o.outputs[0].token_ids for o in outs] == _plain(STORIES, PROMPTS, GREEDY)
    extra = set(llm.drafter.extra_logit_tokens)  # the prompts' and outputs' ids outside the 16
    assert extra and not extra & set(ids)
    assert extra <= {t for o in outs for t in o.prompt_token_ids + o.outputs[0].token_ids}
    # finished requests give their extra ids back (seen at the next draft)
    one = llm.generate(["Lily"], GREEDY)[0]
    assert set(llm.drafter.extra_logit_tokens) <= set(one.prompt_token_ids + one.outputs[0].token_ids)
    # a bad file or size: one clear error before the target runs
    bad = tmp_path / "bad.json"
    for content, message in (("{", "a JSON file written by `specdec draft-vocab`"),
                             ('{"format": "x"}', "format 'specdec-draft-vocab/1'"),
                             (json.dumps({**doc, "vocab_size": 1000}), "another tokenizer"),
                             (json.dumps({**doc, "token_counts": [[600, 1]]}), "found [600, 1]"),
                             (json.dumps({**doc, "token_counts": [[True, 1]]}), "found [True, 1]"),
                             (json.dumps({**doc, "token_counts": None}), "a 'token_counts' list")):
        bad.write_text(content)
        with pytest.raises(ValueError, match=re.escape(message)):
            specdec.LLM(STORIES, progress=False, speculative_config={**cfg, "draft_vocab_file": str(bad)})
    with pytest.raises(ValueError, match="draft_vocab_file = .*an existing file"):
        specdec.LLM(STORIES, progress=False, speculative_config={**cfg, "draft_vocab_file": str(tmp_path / "no")})
    with pytest.raises(ValueError, match=r"draft_vocab_size = 512: less than the drafter's vocabulary of 512"):
        specdec.LLM(STORIES, progress=False, speculative_config={**cfg, "draft_vocab_size": 512})
    (tmp_path / "empty").mkdir()
    assert cli.main(["draft-vocab", STORIES, str(tmp_path / "empty"), "--out", str(out)]) != 0
    assert "no text files" in capsys.readouterr().err
    assert cli.main(["draft-vocab", STORIES, str(tmp_path / "nothing"), "--out", str(out)]) != 0
    assert "an existing file or folder" in capsys.readouterr().err


# ---------------------------------------------------------------- "model": "module:Class" (issue 20.8)
PLANTED = '''
import pathlib
import specdec
_here = pathlib.Path(__file__).parent
(_here / "{name}.imported").write_text("yes")

class NotAProposer:
    def __init__(self):
        (_here / "{name}.instantiated").write_text("yes")
    def propose(self, requests):
        return [[] for _ in requests]

class NeedsArgs(specdec.Proposer):
    def __init__(self, x):
        pass
    def propose(self, requests):
        return [[] for _ in requests]

class Fine(specdec.Proposer):
    def propose(self, requests):
        return [[] for _ in requests]
'''


def _planted(folder: Path, name: str) -> Path:
    """A module `name` in `folder` that leaves `name.imported` on import and
    `name.instantiated` when its NotAProposer is constructed."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(PLANTED.format(name=name))
    return folder


def _custom(model: str) -> dict:
    return {"method": "custom", "model": model, "num_speculative_tokens": 2}


def test_custom_class_must_be_a_proposer_and_is_refused_before_it_is_built(tmp_path, monkeypatch):
    from specdec.speculative import build_speculation
    _planted(tmp_path, "planted_refused")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(ValueError, match=r"^speculative_config.model = 'planted_refused:NotAProposer': "
                                             r".*not a subclass of specdec.Proposer") as err:
            build_speculation(_custom("planted_refused:NotAProposer"))
        assert "\n" not in str(err.value)
        assert not (tmp_path / "planted_refused.instantiated").exists()
        with pytest.raises(ValueError, match=r"speculative_config.model = .*NeedsArgs.*no arguments"):
            build_speculation(_custom("planted_refused:NeedsArgs"))
        assert isinstance(build_speculation(_custom("planted_refused.Fine")).custom, specdec.Proposer)
    finally:
        sys.modules.pop("planted_refused", None)

    class Duck:  # has propose, but is not a specdec.Proposer
        def propose(self, requests):
            return [[] for _ in requests]
    with pytest.raises(ValueError, match=r"^speculative_config.proposer = .*specdec.Proposer"):
        build_speculation({"method": "custom", "num_speculative_tokens": 2, "proposer": Duck()})
    # a SpeculativeConfig naming a class is checked the same way
    with pytest.raises(ValueError, match="not a subclass of specdec.Proposer"):
        build_speculation(specdec.SpeculativeConfig(method="custom", model="specdec:LLM",
                                                    num_speculative_tokens=2))


def test_planning_never_imports_a_custom_proposer(tmp_path, monkeypatch):
    from specdec.speculative import build_speculation
    mods = _planted(tmp_path / "mods", "planted_plan")
    monkeypatch.syspath_prepend(str(mods))
    sp = build_speculation(_custom("planted_plan:NotAProposer"), load=False)
    assert sp.config.method == "custom" and sp.custom is None
    for bad in ("no colon", "mod:", ":Cls", "a b:C", "m:C.D", "m:1x"):
        with pytest.raises(ValueError, match=f"^speculative_config.model = {re.escape(repr(bad))}"):
            build_speculation(_custom(bad), load=False)
    assert not (mods / "planted_plan.imported").exists()
    # the planning commands: kv-plan and backends read the config only
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(mods)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    config = json.dumps(_custom("planted_plan:NotAProposer"))
    for args in (["kv-plan", "--model", STORIES, "--speculative-config", config],
                 ["backends", "--speculative-config", config]):
        proc = subprocess.run([sys.executable, "-m", "specdec", *args], capture_output=True,
                              text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert "method custom" in proc.stdout
        assert not (mods / "planted_plan.imported").exists(), args


def test_python_m_specdec_does_not_import_from_the_working_directory(tmp_path):
    _planted(tmp_path, "planted_cwd")
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, "-m", "specdec", "generate", "--model", STORIES,
                           "--prompt", "Once", "--max-tokens", "2", "--max-model-len", "64",
                           "--speculative-config", json.dumps(_custom("planted_cwd:Fine"))],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert not (tmp_path / "planted_cwd.imported").exists()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "speculative_config.model = 'planted_cwd:Fine'" in proc.stderr
    assert "No module named 'planted_cwd'" in proc.stderr
