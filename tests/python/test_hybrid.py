"""method hybrid: several proposers, the best draft per request and step. Greedy output token for
token equal to plain decoding (stories260K, random models, batches, KV pressure), the sampled
distribution (test_spec.py's χ² test runs it too), the choice following measured acceptance,
config errors naming the part's field, and its `specdec bench` row."""

from __future__ import annotations

import json

import pytest

import specdec
from specdec import cli
from specdec.testing import write_random_model

from spec_helpers import GREEDY, PROMPTS, STORIES, plain


@pytest.mark.parametrize("parts", [
    [{"method": "suffix"}, {"method": "draft_model", "model": STORIES}],
    [{"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 2},
     {"method": "layer_skip", "exit_layer": 4}],
    [{"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 2, "num_speculative_tokens": 2},
     {"method": "suffix"}, {"method": "draft_model", "model": STORIES, "draft_vocab_size": 48}],
], ids=["suffix+draft_model", "ngram+layer_skip", "three_parts"])
def test_hybrid_is_lossless_and_takes_drafts_from_its_parts(parts):
    want = plain(STORIES, PROMPTS, GREEDY)
    llm = specdec.LLM(STORIES, progress=False, speculative_config={
        "method": "hybrid", "num_speculative_tokens": 4, "proposers": parts})
    free = (llm.runner.num_free_blocks(), llm.drafter.num_free_blocks() if llm.drafter else None)
    outs = llm.generate(PROMPTS, GREEDY)
    assert [o.outputs[0].token_ids for o in outs] == want
    assert llm.last_metrics["num_drafts"] > 0
    p = llm.engine.core.proposer
    assert p.name == "hybrid" and [q.name for q in p.parts] == [c["method"] for c in parts]
    stats = p.stats()
    assert sum(s["taken"] for s in stats) == llm.last_metrics["num_drafts"]
    assert all(s["calls"] > 0 for s in stats)  # every part ran (measured) at least once
    assert (llm.runner.num_free_blocks(), llm.drafter.num_free_blocks() if llm.drafter else None) == free


def test_hybrid_measures_each_part_on_the_tokens_the_request_got():
    # a draft model drafting for itself is always right; a 1-gram lookup mostly wrong. Which one
    # is taken also depends on cost (here the drafter costs as much as the target: it is run
    # where the lookup's draft in hand is weak); the choice itself is tested in C++
    # (HybridProposer.* in tests/cpp/spec_test.cpp) with scripted parts and costs.
    llm = specdec.LLM(STORIES, progress=False, speculative_config={
        "method": "hybrid", "num_speculative_tokens": 3, "proposers": [
            {"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 1},
            {"method": "draft_model", "model": STORIES}]})
    params = specdec.SamplingParams(temperature=0, max_tokens=80, ignore_eos=True)
    llm.generate(PROMPTS[:1], params)
    ngram, draft = llm.engine.core.proposer.stats()
    assert draft["acceptance_per_pos"][0] > 0.8 > ngram["acceptance_per_pos"][0]
    assert draft["taken"] > 0 and ngram["calls"] > 0
    assert draft["seconds_per_call"] > ngram["seconds_per_call"] > 0 and llm.engine.core.proposer.verify_seconds > 0


@pytest.fixture(scope="module")
def random_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("hybrid_random")
    paths = {}
    for arch in ("llama", "gemma3", "deepseek2"):
        p = d / f"{arch}.gguf"
        write_random_model(p, arch, "F16", seed=2)
        paths[arch] = str(p)
    return paths


@pytest.mark.parametrize("target,drafter", [("gemma3", "llama"), ("deepseek2", "gemma3"), ("llama", "deepseek2")])
def test_hybrid_is_lossless_on_random_models(random_dir, target, drafter):
    t, d = random_dir[target], random_dir[drafter]
    params = specdec.SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    prompts = [{"prompt_token_ids": [3 + (i % 7) for i in range(n)]} for n in (5, 17, 40)]  # repetitive
    want = plain(t, prompts, params, max_model_len=128)
    llm = specdec.LLM(t, progress=False, max_model_len=128, speculative_config={
        "method": "hybrid", "num_speculative_tokens": 3, "proposers": [
            {"method": "suffix"}, {"method": "draft_model", "model": d},
            {"method": "layer_skip", "exit_layer": 1}]})
    assert [o.outputs[0].token_ids for o in llm.generate(prompts, params)] == want


def test_hybrid_under_kv_pressure_preempts_and_stays_lossless():
    prompts = [f"{p} {i}" for i in range(6) for p in PROMPTS]
    params = specdec.SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    want = plain(STORIES, prompts, params, max_model_len=128, kv_cache_memory_bytes="8MiB")
    llm = specdec.LLM(STORIES, progress=False, max_model_len=128, kv_cache_memory_bytes=400_000,
                      max_num_seqs=32, speculative_config={
                          "method": "hybrid", "num_speculative_tokens": 3, "proposers": [
                              {"method": "suffix"}, {"method": "draft_model", "model": STORIES}]})
    free = (llm.runner.num_free_blocks(), llm.drafter.num_free_blocks())
    outs = llm.generate(prompts, params)
    assert [o.outputs[0].token_ids for o in outs] == want
    assert llm.last_metrics["num_preemptions"] > 0
    assert (llm.runner.num_free_blocks(), llm.drafter.num_free_blocks()) == free


@pytest.mark.parametrize("cfg,message", [
    ({"method": "hybrid", "num_speculative_tokens": 3, "proposers": [{"method": "suffix"}]},
     r"proposers = 1: at least two"),
    ({"method": "hybrid", "num_speculative_tokens": 3, "proposers": []}, r"proposers = \[\]"),
    ({"method": "hybrid", "num_speculative_tokens": 3, "proposers": [{"method": "suffix"}] * 1000},
     r"proposers = 1000 configs: at most 8 configs for method hybrid"),
    ({"method": "hybrid", "num_speculative_tokens": 3, "proposers": [{"method": "ngram"}] * 9},
     r"proposers = 9 configs: at most 8"),
    ({"method": "hybrid", "num_speculative_tokens": 3, "proposers": [{"method": "suffix"}, 3]},
     r"proposers\[1\] = 3"),
    ({"method": "hybrid", "num_speculative_tokens": 3,
      "proposers": [{"method": "suffix"}, {"method": "hybrid", "proposers": [{"method": "suffix"}]}]},
     r"proposers\[1\]\.proposers = 1"),
    ({"method": "hybrid", "num_speculative_tokens": 3,
      "proposers": [{"method": "suffix"}, {"method": "draft_model", "model": STORIES, "kv_cache_dtype": "f8"}]},
     r"proposers\[1\]\.kv_cache_dtype = 'f8'"),
    ({"method": "hybrid", "num_speculative_tokens": 3,
      "proposers": [{"method": "suffix"}, {"method": "ngram", "adaptive": True}]},
     r"proposers\[1\]\.adaptive.*set adaptive on the hybrid"),
    ({"method": "hybrid", "num_speculative_tokens": 3,
      "proposers": [{"method": "draft_model", "model": STORIES}, {"method": "draft_model", "model": STORIES}]},
     r"at most one draft_model part"),
    ({"method": "hybrid", "num_speculative_tokens": 3, "model": STORIES,
      "proposers": [{"method": "suffix"}, {"method": "ngram"}]}, r"model = .*draft_model part"),
    ({"method": "ngram", "num_speculative_tokens": 3, "proposers": [{"method": "suffix"}, {"method": "ngram"}]},
     r"proposers = 2 configs: None \(only for method hybrid\)"),
    ({"method": "hybrid", "proposers": [{"method": "ngram"}, {"method": "layer_skip"}]},
     r"proposers\[0\]\.num_speculative_tokens"),
    ({"method": "hybrid", "num_speculative_tokens": 3,
      "proposers": [{"method": "suffix"}, {"method": "layer_skip", "exit_layer": 9}]},
     r"exit_layer = 9"),
])
def test_hybrid_config_errors_name_the_part(cfg, message):
    with pytest.raises(ValueError, match=message):
        specdec.LLM(STORIES, progress=False, speculative_config=cfg)


def test_hybrid_config_round_trip_and_drafter_fields():
    c = specdec.SpeculativeConfig.from_json(json.dumps({
        "method": "hybrid", "proposers": [
            {"method": "suffix", "num_speculative_tokens": 5},
            {"method": "draft_model", "model": STORIES, "num_speculative_tokens": 3,
             "draft_kv_cache_fraction": 0.25}]}))
    assert c.num_speculative_tokens == 5  # the longest part's when not given
    assert c.uses_drafter() and c.drafter_config().model == STORIES
    assert c.drafter_config().draft_kv_cache_fraction == 0.25
    again = specdec.SpeculativeConfig.from_json(c.to_json())
    assert again.to_json() == c.to_json() and [p.method for p in again.proposers] == ["suffix", "draft_model"]
    llm = specdec.LLM(STORIES, progress=False, speculative_config=c)
    assert llm.drafter is not None and llm.kv_split["drafter_bytes"] > 0  # the part's KV share


def test_bench_hybrid_and_layer_skip_rows(tmp_path):
    out = tmp_path / "out"
    rc = cli.main(["bench", "--model", STORIES, "--drafter", STORIES, "--max-tokens", "12",
                   "--ks", "2", "--methods", "hybrid,layer_skip", "--categories", "chat", "--no-adaptive",
                   "--peer", "off", "--no-plots", "--out", str(out)])
    assert rc == 0
    data = json.loads((out / "bench.json").read_text())
    rows = {r["method"]: r for r in data["specdec"]}
    assert set(rows) == {"plain", "hybrid (suffix + draft_model) k=2", "layer_skip k=2"}
    h = rows["hybrid (suffix + draft_model) k=2"]
    assert h["lossless"] and [p["name"] for p in h["hybrid_parts"]] == ["suffix", "draft_model"]
    ls = rows["layer_skip k=2"]
    assert ls["lossless"] and ls["exit_layer"] in (2, 3, 4) and len(ls["exit_layer_stats"]) == 3


def test_hybrid_on_the_reference_backend():
    want = plain(STORIES, PROMPTS[:2], GREEDY, attention_backend="REFERENCE")
    llm = specdec.LLM(STORIES, progress=False, attention_backend="REFERENCE", speculative_config={
        "method": "hybrid", "num_speculative_tokens": 3, "proposers": [
            {"method": "suffix"}, {"method": "draft_model", "model": STORIES, "attention_backend": "OCL_PAGED"}]})
    assert set(llm.runner.attention_backends) == {"REFERENCE"}
    assert set(llm.drafter.attention_backends) == {"OCL_PAGED"}
    assert [o.outputs[0].token_ids for o in llm.generate(PROMPTS[:2], GREEDY)] == want
