"""disable_hybrid_kv_cache_manager (vLLM's switch): every attention layer in one KV-cache group
managed as full attention, with one attention group per metadata builder inside it (sliding
windows, chunked-local virtual batches, full attention). The same greedy output as the hybrid
plan, plain and speculative (target and drafter), on Gemma 3 (real) and a random chunked-local +
full model; kv-plan shows the one group, its metadata and what it costs."""

from __future__ import annotations

import pytest

import specdec
from specdec import _core, cli
from specdec.testing import write_random_model

GEMMA = "gemma-3-270m-q4_k_m"


def _greedy(path, prompts, params, **kw):
    llm = specdec.LLM(path, progress=False, **kw)
    return [o.outputs[0].token_ids for o in llm.generate(prompts, params)], llm


@pytest.fixture(scope="module")
def chunked(tmp_path_factory):
    p = tmp_path_factory.mktemp("kv_switch") / "llama-chunked.gguf"
    write_random_model(p, "llama-chunked", "F16", seed=4)
    return str(p)


def _check_one_group(llm, kinds):
    kc = llm.runner.kv_config
    assert kc.disable_hybrid_kv_cache_manager
    assert len(kc.groups) == 1 and kc.groups[0].spec.kind == "full_attention"
    assert {s.kind for s in kc.groups[0].layer_specs} == kinds  # the layers keep their own specs
    explain = llm.runner.attention_explain()
    groups = [line for line in explain.splitlines() if line.startswith("attention group")]
    assert len(groups) == len(kinds) and all("(KV-cache group 0)" in g for g in groups)


def test_chunked_local_model_one_group_same_output(chunked):
    params = specdec.SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    prompts = [{"prompt_token_ids": list(range(3, 3 + n))} for n in (5, 23, 60)]  # past several chunks
    want, hybrid = _greedy(chunked, prompts, params, max_model_len=128)
    assert len(hybrid.runner.kv_config.groups) == 2
    got, llm = _greedy(chunked, prompts, params, max_model_len=128, disable_hybrid_kv_cache_manager=True)
    assert got == want
    _check_one_group(llm, {"chunked_local", "full_attention"})
    # speculative, the switch on in target and drafter (drafting for itself: every draft right)
    got, llm = _greedy(chunked, prompts, params, max_model_len=128, disable_hybrid_kv_cache_manager=True,
                       speculative_config={"method": "draft_model", "model": chunked, "num_speculative_tokens": 3,
                                           "disable_hybrid_kv_cache_manager": True})
    assert got == want
    assert len(llm.drafter.kv_config.groups) == 1 and llm.drafter.kv_config.disable_hybrid_kv_cache_manager
    assert llm.last_metrics["num_accepted_tokens"] == llm.last_metrics["num_draft_tokens"] > 0
    # the hybrid target with a one-group drafter, and layer_skip on a one-group target
    got, _ = _greedy(chunked, prompts, params, max_model_len=128, speculative_config={
        "method": "draft_model", "model": chunked, "num_speculative_tokens": 3,
        "disable_hybrid_kv_cache_manager": True})
    assert got == want
    got, _ = _greedy(chunked, prompts, params, max_model_len=128, disable_hybrid_kv_cache_manager=True,
                     speculative_config={"method": "layer_skip", "num_speculative_tokens": 3, "exit_layer": 2})
    assert got == want


def test_gemma3_one_group_same_output(real_model):
    path = real_model(GEMMA)
    params = specdec.SamplingParams(temperature=0, max_tokens=48, ignore_eos=True)
    long = "The history of the lighthouse on the northern cape begins " * 70  # past the 512-token window
    prompts = ["Write a haiku about the sea.", long]
    want, hybrid = _greedy(path, prompts, params, max_model_len=1024, kv_cache_memory_bytes="256MiB")
    assert len(hybrid.runner.kv_config.groups) == 2  # sliding + global
    got, llm = _greedy(path, prompts, params, max_model_len=1024, kv_cache_memory_bytes="256MiB",
                       disable_hybrid_kv_cache_manager=True)
    assert got == want
    _check_one_group(llm, {"sliding_window", "full_attention"})
    got, llm = _greedy(path, prompts, params, max_model_len=1024, kv_cache_memory_bytes="256MiB",
                       disable_hybrid_kv_cache_manager=True, speculative_config={
                           "method": "draft_model", "model": path, "num_speculative_tokens": 3,
                           "disable_hybrid_kv_cache_manager": True})
    assert got == want
    assert len(llm.drafter.kv_config.groups) == 1


def test_the_switch_costs_memory_and_sizing_counts_it(chunked):
    cfg = specdec.load_model_config(chunked)
    layers = cfg.layer_kv_specs(16, "f16", 128)
    # steps of at most 16 new tokens: a chunked layer then holds at most 2-3 of a request's 8 blocks
    hybrid = _core.min_kv_cache_bytes(layers, 128, 16)
    one = _core.min_kv_cache_bytes(layers, 128, 16, disable_hybrid_kv_cache_manager=True)
    assert one > 1.5 * hybrid  # chunked layers keep every block
    a = specdec.LLM(chunked, progress=False, max_model_len=128, max_num_seqs=4, max_num_batched_tokens=16)
    b = specdec.LLM(chunked, progress=False, max_model_len=128, max_num_seqs=4, max_num_batched_tokens=16,
                    disable_hybrid_kv_cache_manager=True)
    assert b.kv_sizing.request_bytes == one and a.kv_sizing.request_bytes == hybrid
    assert b.runner.kv_config.max_concurrent_requests >= 4  # sized for the requests asked
    with pytest.raises(ValueError, match="disable_hybrid_kv_cache_manager"):
        specdec.LLM(chunked, progress=False, disable_hybrid_kv_cache_manager="yes")
    with pytest.raises(ValueError, match=r"disable_hybrid_kv_cache_manager = true.*only for method draft_model"):
        specdec.LLM(chunked, progress=False, speculative_config={
            "method": "ngram", "num_speculative_tokens": 2, "disable_hybrid_kv_cache_manager": True})


def test_kv_plan_shows_the_group_its_metadata_and_the_cost(chunked, capsys):
    assert cli.main(["kv-plan", "--model", chunked, "--max-model-len", "128", "--budget", "8MiB",
                     "--disable-hybrid-kv-cache-manager"]) == 0
    out = capsys.readouterr().out
    assert "1 KV-cache group" in out and "hybrid KV-cache manager off" in out
    assert "metadata  chunked_local (chunk 16: virtual batches)" in out and "metadata  full_attention" in out
    assert "against the hybrid plan" in out
    assert cli.main(["kv-plan", "--model", chunked, "--max-model-len", "128", "--budget", "8MiB"]) == 0
    out = capsys.readouterr().out
    assert "2 KV-cache groups" in out and "hybrid KV-cache manager off" not in out
