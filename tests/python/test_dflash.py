"""method dflash: z-lab's block-diffusion drafter. Its block forward against the NumPy reference
(tests/python/reference/dflash_model.py) with the context written on the device by the target's
steps; the checkpoint reader's errors; greedy output token for token equal to plain decoding on
stories260K and on random qwen2 / qwen3 / gemma3 / MLA targets, in batches and under KV pressure;
the non-causal backend choice and its explanation (sampling: test_spec.py's χ² test)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import specdec
from specdec import _core, cli
from specdec._core import StepRequest
from specdec.testing import write_random_dflash, write_random_model
from specdec.testing.dflash import dflash_config, random_dflash_weights, write_dflash_checkpoint

from reference.dflash_model import dflash_block_logits
from reference.numpy_model import NumpyModel
from spec_helpers import GREEDY, PROMPTS, STORIES, plain


@pytest.mark.parametrize("dtype,sliding", [("F32", False), ("BF16", False), ("F32", True)])
def test_block_forward_matches_the_reference(context, tmp_path, dtype, sliding):
    cfg = dflash_config(STORIES, num_layers=2, target_layer_ids=[0, 2, 3], block_size=5)
    if sliding:  # layer 0 slides (causal, window 6: the block sees only the last context rows)
        cfg.update(layer_types=["sliding_attention", "full_attention"], sliding_window=6)
    w = random_dflash_weights(cfg, seed=3, scale=1.0)
    if dtype == "BF16":
        from specdec.testing.dflash import bf16_round
        w = {k: bf16_round(v) for k, v in w.items()}
    d = write_dflash_checkpoint(tmp_path / "drafter", cfg, w, dtype)
    target = _core.ModelRunner(context, STORIES, "", 128, 8 << 20, kv_cache_dtype="f32")
    drafter = _core.ModelRunner(context, str(d), "", 128, 8 << 20, kv_cache_dtype="f32")
    assert drafter.config.is_dflash and drafter.config.dflash_target_layers == [0, 2, 3]
    assert set(drafter.attention_backends) == {"OCL_PAGED"}  # non-causal: OCL_FLASH rejected
    assert "non-causal" in drafter.attention_explain()
    if sliding:  # one KV-cache group managed as full attention: the sliding layer keeps its K/V
        kc = drafter.kv_config
        assert len(kc.groups) == 1 and kc.disable_hybrid_kv_cache_manager
        assert [s.kind for s in kc.groups[0].layer_specs] == ["sliding_window", "full_attention"]
        assert ", causal" in drafter.attention_explain()
    proposer = _core.spec_decode.DFlashProposer(target, drafter)
    tok = specdec.Tokenizer.from_file(STORIES)
    ids = tok.encode("Once upon a time, there was a little girl named Lily. She")
    ctx, last = ids[:-1], ids[-1]
    mask = cfg["dflash_config"]["mask_token_id"]
    block = [last] + [mask] * 4
    # two target steps (a chunked prefill): each writes its rows' context into the drafter
    target.step([StepRequest("r", ctx[:7], num_logits=1)])
    target.step([StepRequest("r", ctx[7:], num_computed_tokens=7, num_logits=1)])
    assert drafter.num_cached_tokens("r") == len(ctx)
    out = drafter.step([StepRequest("r", block, num_computed_tokens=len(ctx), num_logits=len(block))])
    ref = dflash_block_logits(NumpyModel(STORIES), cfg, w, ctx, block)
    rel = np.abs(out.logits - ref).max(axis=1) / np.abs(ref).max(axis=1)
    assert rel.max() < 2e-4, rel
    assert (out.argmax == ref.argmax(axis=1)).all()
    # a rolled-back target rewrites the drafter's context from there
    drafter.truncate("r", len(ctx))
    target.truncate("r", 5)
    target.step([StepRequest("r", ctx[5:], num_computed_tokens=5, num_logits=1)])
    again = drafter.step([StepRequest("r", block, num_computed_tokens=len(ctx), num_logits=len(block))])
    assert np.array_equal(again.logits, out.logits)
    del proposer


def test_checkpoint_errors_name_the_field(tmp_path):
    cfg = dflash_config(STORIES)
    w = random_dflash_weights(cfg)
    bad = dict(cfg, dflash_config=dict(cfg["dflash_config"], mask_token_id=10**6))
    write_dflash_checkpoint(tmp_path / "a", bad, w)
    with pytest.raises(ValueError, match=r"mask_token_id = 1000000.*vocab_size"):
        specdec.load_model_config(str(tmp_path / "a"))
    odd = dict(cfg, layer_types=["linear_attention"])
    write_dflash_checkpoint(tmp_path / "b", odd, w)
    with pytest.raises(ValueError, match=r"layer_types\[0\] = \"linear_attention\".*'sliding_attention'"):
        specdec.load_model_config(str(tmp_path / "b"))
    no_window = dict(cfg, layer_types=["sliding_attention"])
    write_dflash_checkpoint(tmp_path / "b2", no_window, w)
    with pytest.raises(ValueError, match="sliding_window"):
        specdec.load_model_config(str(tmp_path / "b2"))
    missing = {k: v for k, v in w.items() if k != "fc.weight"}
    write_dflash_checkpoint(tmp_path / "c", cfg, missing)
    with pytest.raises(ValueError, match="fc.weight"):
        specdec.load_model_config(str(tmp_path / "c"))
    with pytest.raises(ValueError, match=r"speculative_config.model = .*DFlash drafter directory"):
        specdec.LLM(STORIES, progress=False, speculative_config={
            "method": "dflash", "model": str(tmp_path / "nothing"), "num_speculative_tokens": 2})
    write_dflash_checkpoint(tmp_path / "d", cfg, w)
    with pytest.raises(ValueError, match=r"num_speculative_tokens = 5: at most the DFlash drafter's block_size - 1 = 3"):
        specdec.LLM(STORIES, progress=False, speculative_config={
            "method": "dflash", "model": str(tmp_path / "d"), "num_speculative_tokens": 5})
    with pytest.raises(ValueError, match="draft_vocab_size"):
        specdec.LLM(STORIES, progress=False, speculative_config={
            "method": "dflash", "model": str(tmp_path / "d"), "num_speculative_tokens": 2, "draft_vocab_size": 8})


@pytest.mark.parametrize("sliding", [False, True])
def test_lossless_greedy_on_stories_in_a_batch(tmp_path, sliding):
    cfg = dflash_config(STORIES, num_layers=2, block_size=5)
    if sliding:
        cfg.update(layer_types=["sliding_attention", "full_attention"], sliding_window=8)
    d = write_dflash_checkpoint(tmp_path / "drafter", cfg, random_dflash_weights(cfg, seed=1))
    want = plain(STORIES, PROMPTS, GREEDY)
    # steps of 16 tokens: a hybrid plan would free the sliding layer's old blocks, the drafter's
    # whole-K/V plan does not, and the KV sizing counts it (4 requests fit in both models)
    llm = specdec.LLM(STORIES, progress=False, max_num_seqs=4, max_num_batched_tokens=16, speculative_config={
        "method": "dflash", "model": str(d), "num_speculative_tokens": 4})
    assert llm.drafter.kv_config.max_concurrent_requests >= 4
    free = (llm.runner.num_free_blocks(), llm.drafter.num_free_blocks())
    outs = llm.generate(PROMPTS, GREEDY)
    assert [o.outputs[0].token_ids for o in outs] == want
    assert llm.last_metrics["num_drafts"] > 0
    assert (llm.runner.num_free_blocks(), llm.drafter.num_free_blocks()) == free


@pytest.mark.parametrize("arch", ["qwen2", "qwen3", "gemma3", "deepseek2"])
def test_lossless_greedy_on_random_targets(tmp_path, arch):
    t = tmp_path / f"{arch}.gguf"
    write_random_model(t, arch, "F16", seed=6)
    d = write_random_dflash(tmp_path / "drafter", str(t), seed=2, block_size=4)
    params = specdec.SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    prompts = [{"prompt_token_ids": list(range(3, 3 + n))} for n in (5, 17, 40)]
    want = plain(str(t), prompts, params, max_model_len=128)
    llm = specdec.LLM(str(t), progress=False, max_model_len=128, speculative_config={
        "method": "dflash", "model": str(d), "num_speculative_tokens": 3})
    assert [o.outputs[0].token_ids for o in llm.generate(prompts, params)] == want
    assert llm.last_metrics["num_drafts"] > 0


def test_lossless_under_kv_pressure(tmp_path):
    d = write_random_dflash(tmp_path / "drafter", STORIES, seed=1, block_size=4)
    prompts = [f"{p} {i}" for i in range(6) for p in PROMPTS]
    params = specdec.SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    want = plain(STORIES, prompts, params, max_model_len=128, kv_cache_memory_bytes="8MiB")
    llm = specdec.LLM(STORIES, progress=False, max_model_len=128, kv_cache_memory_bytes=400_000,
                      max_num_seqs=32, speculative_config={
                          "method": "dflash", "model": str(d), "num_speculative_tokens": 3})
    free = (llm.runner.num_free_blocks(), llm.drafter.num_free_blocks())
    outs = llm.generate(prompts, params)
    assert [o.outputs[0].token_ids for o in outs] == want
    assert llm.last_metrics["num_preemptions"] > 0
    assert (llm.runner.num_free_blocks(), llm.drafter.num_free_blocks()) == free


def test_cli_generate_and_backends_explain_the_non_causal_choice(tmp_path, capsys):
    d = write_random_dflash(tmp_path / "drafter", STORIES, seed=1, block_size=4)
    cfg = json.dumps({"method": "dflash", "model": str(d), "num_speculative_tokens": 3})
    assert cli.main(["generate", "--model", STORIES, "--prompt", "Once upon a time", "--max-tokens", "16",
                     "--speculative-config", cfg]) == 0
    err = capsys.readouterr().err
    assert "[speculative: dflash, k = 3, drafter qwen3" in err and "speculative: " in err
    assert cli.main(["backends", "--model", STORIES, "--speculative-config", cfg]) == 0
    out = capsys.readouterr().out
    assert "non-causal" in out and "OCL_FLASH: rejected" in out


def test_sampled_distribution_equals_the_targets(tmp_path):
    """As test_spec.py's χ² test: tokens 2..4 of sampled continuations under DFlash drafting
    (sampled drafts with their probabilities) have the target's own distribution."""
    from test_spec import _chi2_z, _reference_sample
    d = write_random_dflash(tmp_path / "drafter", STORIES, seed=4, block_size=4)
    n = 800
    params = [specdec.SamplingParams(temperature=1.0, top_k=6, max_tokens=4, ignore_eos=True, seed=s)
              for s in range(n)]
    prompt = "Tom had a toy. Tom had a"
    ref = _reference_sample(prompt)
    llm = specdec.LLM(STORIES, progress=False, max_num_seqs=64, speculative_config={
        "method": "dflash", "model": str(d), "num_speculative_tokens": 3})
    toks = np.array([o.outputs[0].token_ids for o in llm.generate([prompt] * n, params)])
    for pos in (1, 2, 3):
        assert _chi2_z(toks[:, pos], ref[:, pos]) < 4.0, pos
    assert llm.last_metrics["num_draft_tokens"] > 0


TRAINED = str(Path(__file__).resolve().parents[2] / "data" / "dflash-stories260k")


def test_the_drafter_trained_here_drafts_well_and_stays_lossless():
    """data/dflash-stories260k (scripts/train_dflash.py): a context path that wrote the wrong
    rows, positions or layers would show as acceptance near zero."""
    prompts = ["Once upon a time", "Lily and Ben went to the park", "The little dog was sad because"]
    params = specdec.SamplingParams(temperature=0, max_tokens=64, ignore_eos=True)
    want = plain(STORIES, prompts, params)
    llm = specdec.LLM(STORIES, progress=False, speculative_config={
        "method": "dflash", "model": TRAINED, "num_speculative_tokens": 7})
    outs = llm.generate(prompts, params)
    assert [o.outputs[0].token_ids for o in outs] == want
    m = llm.last_metrics
    assert m["num_accepted_tokens"] >= 2 * m["num_drafts"]  # measured: 4.3 per draft of 7
    assert m["acceptance_rate_per_pos"][0] > 0.6


def test_the_drafters_backend_is_chosen_for_non_causal_attention(tmp_path):
    d = write_random_dflash(tmp_path / "drafter", STORIES, seed=1, block_size=4)
    with pytest.raises(ValueError, match="non-causal"):  # OCL_FLASH is causal only
        specdec.LLM(STORIES, progress=False, speculative_config={
            "method": "dflash", "model": str(d), "num_speculative_tokens": 3, "attention_backend": "OCL_FLASH"})
    want = plain(STORIES, PROMPTS[:2], GREEDY)
    llm = specdec.LLM(STORIES, progress=False, attention_backend="OCL_PAGED", speculative_config={
        "method": "dflash", "model": str(d), "num_speculative_tokens": 3, "attention_backend": "REFERENCE"})
    assert set(llm.drafter.attention_backends) == {"REFERENCE"}
    assert [o.outputs[0].token_ids for o in llm.generate(PROMPTS[:2], GREEDY)] == want


def test_review_findings_attachment_block_size_and_cli(context, tmp_path, capsys):
    # block_size at the top level of config.json (not in dflash_config) is read, not defaulted
    cfg = dflash_config(STORIES, block_size=4)
    cfg["block_size"] = cfg["dflash_config"].pop("block_size")
    d = write_dflash_checkpoint(tmp_path / "top", cfg, random_dflash_weights(cfg))
    assert specdec.load_model_config(str(d)).dflash_block_size == 4
    # one drafter per target; a drafter whose steps are shorter than the target's is refused
    target = _core.ModelRunner(context, STORIES, "", 128, 8 << 20, max_num_batched_tokens=64)
    first = _core.spec_decode.DFlashProposer(target, _core.ModelRunner(context, str(d), "", 128, 8 << 20,
                                                                       max_num_batched_tokens=64))
    with pytest.raises(ValueError, match="one drafter per target"):
        _core.spec_decode.DFlashProposer(target, _core.ModelRunner(context, str(d), "", 128, 8 << 20,
                                                                   max_num_batched_tokens=64))
    del first  # its sink goes with it: another proposer may attach
    second = _core.spec_decode.DFlashProposer(target, _core.ModelRunner(context, str(d), "", 128, 8 << 20,
                                                                        max_num_batched_tokens=64))
    del second
    short = _core.ModelRunner(context, str(d), "", 128, 8 << 20, max_num_batched_tokens=16)
    with pytest.raises(ValueError, match="max_num_batched_tokens = 16: at least the target's 64"):
        _core.spec_decode.DFlashProposer(target, short)
    # kv-plan and backends read the drafter directory; backends explains a non-causal choice
    sc = json.dumps({"method": "dflash", "model": str(d), "num_speculative_tokens": 3})
    assert cli.main(["kv-plan", "--model", STORIES, "--budget", "8MiB", "--speculative-config", sc]) == 0
    assert "[drafter]" in capsys.readouterr().out
    assert cli.main(["backends", "--model", STORIES, "--speculative-config", sc]) == 0
    out = capsys.readouterr().out
    drafter_part = out[out.index("[drafter]"):]
    assert "non-causal" in drafter_part.splitlines()[0] and "OCL_FLASH: rejected" in drafter_part
