"""The OpenCL forward (ModelRunner) against the NumPy reference (tests/python/reference, weights
dequantized by the `gguf` package): teacher-forced logits on stories260K, on random models of every
architecture and weight format, and on the four real models.

Tolerances: logits are compared per position relative to the position's largest |logit|. F32/F16/
BF16 weights multiply f32 activations (tight bound, against the exact reference); block formats
multiply int8 activations (one scale per 32 values, per 256 in front of K-quants, as llama.cpp
does), so they are compared with the reference that rounds its matmul inputs the same way
(``NumpyModel(int8_activations=True)``): what is left is summation order and the rounding flips it
causes, and argmax may flip only at near-ties."""

from __future__ import annotations


import numpy as np
import pytest

import specdec
from specdec import _core
from specdec._core import StepRequest
from specdec.testing import WEIGHT_FORMATS, write_random_model, write_twin

from reference.numpy_model import NumpyModel

from paths import STORIES  # noqa: E402
FLOAT_FORMATS = ("F32", "F16", "BF16")
RUNNER_ARCHS = ("llama", "qwen2", "qwen3", "gemma3", "llama-chunked", "llama-kvshare", "deepseek2",
                "deepseek2-kvb", "llama3", "mistral", "qwen2-yarn", "qwen3-yarn", "phi3")
TEXTS = [
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n"
    "        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who went out "
    "every morning before the sun rose. One day he caught a fish that could speak.",
    "The mitochondria is the powerhouse of the cell. Photosynthesis converts light energy into "
    "chemical energy, which plants store as glucose; animals then eat the plants.",
    "SELECT name, COUNT(*) FROM users WHERE created_at > '2024-01-01' GROUP BY name ORDER BY 2 "
    "DESC LIMIT 10; -- the ten most common names among recent users",
]


def _runner_logits(context, path, tokens, max_model_len, kv_cache_dtype="f16"):
    return _runner_logits_each(context, path, [tokens], max_model_len, kv_cache_dtype)[0]


def _runner_logits_each(context, path, seqs, max_model_len, kv_cache_dtype="f16"):
    """Logits of every position of each sequence, prefilled alone, one after the other, by one
    runner (a real model loads once, not once per sequence)."""
    r = _core.ModelRunner(context, path, "", max_model_len, 64 << 20, kv_cache_dtype=kv_cache_dtype,
                          max_num_batched_tokens=256, max_num_logits=256)
    outs = []
    for tokens in seqs:
        outs.append(r.step([StepRequest("t", list(tokens), num_logits=len(tokens))]).logits)
        r.free("t")
    return outs


def _compare(ours, ref):
    scale = np.abs(ref).max(axis=1)
    rel = np.abs(ours - ref).max(axis=1) / scale
    srt = np.sort(ref, axis=1)
    margin = (srt[:, -1] - srt[:, -2]) / scale
    flips = np.where(ours.argmax(1) != ref.argmax(1))[0]
    return rel, margin, flips


def test_stories260k_matches_reference(context):
    tok = specdec.Tokenizer.from_file(STORIES)
    ids = tok.encode("Once upon a time, there was a little girl named Lily. She loved to play")
    ref = NumpyModel(STORIES).logits(ids)
    rel, _, flips = _compare(_runner_logits(context, STORIES, ids, 128, "f32"), ref)
    assert rel.max() < 1e-4, rel.max()  # F32 weights and cache: rounding only
    assert len(flips) == 0
    rel, _, flips = _compare(_runner_logits(context, STORIES, ids, 128, "f16"), ref)
    assert rel.max() < 3e-3, rel.max()  # K/V rounded to f16 in the cache
    assert len(flips) == 0


@pytest.fixture(scope="module")
def random_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("runner_random_models")


@pytest.mark.parametrize("fmt", WEIGHT_FORMATS)
@pytest.mark.parametrize("arch", RUNNER_ARCHS)
def test_random_models_match_reference(context, random_dir, arch, fmt):
    path = str(random_dir / f"{arch}-{fmt}.gguf")
    write_random_model(path, arch, fmt, seed=3)
    rng = np.random.default_rng(7)
    ids = [int(t) for t in rng.integers(3, 300, size=40)]  # longer than the 16-token windows
    exact = fmt in FLOAT_FORMATS
    ours = _runner_logits(context, path, ids, 64, "f32" if exact else "f16")
    # phi3: past its 32 original tokens: long factors
    ref = NumpyModel(path, n_ctx=64, int8_activations=not exact).logits(ids)
    rel, margin, flips = _compare(ours, ref)
    # (Measured for block formats against the int8 reference: rel max <= 0.069 (MLA, whose
    # reference absorbs k_b / v_b in f32), <= 0.05 elsewhere; at most 4 flips, each at a relative
    # margin <= 0.027. Against the exact reference: rel max 0.077 and up to 7 flips.)
    bound = 1e-4 if exact else 0.1
    assert rel.max() < bound, (rel.max(), np.median(rel))
    # Greedy tokens equal except at near-ties of the reference.
    assert all(margin[i] < 0.03 for i in flips), [(i, margin[i]) for i in flips]
    assert len(flips) <= 6


@pytest.mark.parametrize("name", ["smollm2-135m-instruct-q4_1", "gemma-3-270m-q4_k_m",
                                  "qwen2.5-coder-0.5b-instruct-q4_k_m",
                                  "qwen2.5-coder-1.5b-instruct-q4_k_m"])
def test_real_models_match_reference(context, real_model, name):
    path = real_model(name)
    tok = specdec.Tokenizer.from_file(path)
    seqs = [tok.encode(t) for t in TEXTS]
    ref_model = NumpyModel(path, int8_activations=True)  # specdec's arithmetic, as defined
    refs = [o.logits for o in ref_model.forward_batch(seqs)]
    total = agree = clear = clear_agree = 0
    rels, flip_margins = [], []
    for ids, ref, ours in zip(seqs, refs, _runner_logits_each(context, path, seqs, 512)):
        rel, margin, flips = _compare(ours, ref)
        srt = np.sort(ref, axis=1)
        not_tie = (srt[:, -1] - srt[:, -2]) > 0.1  # absolute logits, as bench/reference_vs_llamacpp
        same = ours.argmax(1) == ref.argmax(1)
        total += len(ids)
        agree += int(same.sum())
        clear += int(not_tie.sum())
        clear_agree += int((same & not_tie).sum())
        rels.append(rel)
        flip_margins += [float(margin[i]) for i in flips]
    rel = np.concatenate(rels)
    # Measured (2026-11-27): agreement 0.970-0.974 of all positions, 0.975-1.000 where the top-2
    # margin exceeds 0.1 (Gemma 3 lowest), rel median <= 0.046, max <= 0.11, flips at relative
    # margins <= 0.016. llama.cpp agrees with itself at 0.950-0.992 of all positions and
    # 0.983-0.997 past a 0.1 margin when only its micro-batch size or attention kernel changes
    # (bench/results/issue24/agreement_llamacpp.json): the flips are near-ties of the float order.
    # On a Zen 3 (PoCL's haswell target, 2026-11-29) Gemma 3 agreed at 161 / 168 = 0.958 of all
    # positions: the bound on all positions is llama.cpp's own lower figure; the sharp checks are
    # the clear positions and the flips' margins.
    assert clear_agree / clear >= 0.97, (clear_agree, clear, flip_margins)
    assert agree / total >= 0.95, (agree, total, flip_margins)
    assert np.median(rel) < 0.05 and rel.max() < 0.25, (np.median(rel), rel.max())
    assert all(m < 0.03 for m in flip_margins), flip_margins


@pytest.mark.parametrize("name", ["smollm2-135m-instruct-q4_1", "gemma-3-270m-q4_k_m",
                                  "qwen2.5-coder-0.5b-instruct-q4_k_m"])
def test_real_models_dequantized_twins_match_reference(context, real_model, tmp_path, name):
    """The forward pass itself on the real architectures: on the model's F16 twin (the real
    weights dequantized, so no int8 activation rounding) specdec and the reference agree at every
    position within float rounding (measured on the F32 twins: 100 % argmax, max rel 6e-6)."""
    path = real_model(name)
    twin = write_twin(path, tmp_path / "twin.gguf", "F16")
    tok = specdec.Tokenizer.from_file(path)
    seqs = [tok.encode(t) for t in TEXTS]
    refs = [o.logits for o in NumpyModel(twin).forward_batch(seqs)]
    total = agree = 0
    for ids, ref, ours in zip(seqs, refs, _runner_logits_each(context, twin, seqs, 512, "f32")):
        rel, margin, flips = _compare(ours, ref)
        assert rel.max() < 1e-4, (rel.max(), np.median(rel))
        assert all(margin[i] < 1e-4 for i in flips), [(i, margin[i]) for i in flips]
        total += len(ids)
        agree += len(ids) - len(flips)
    assert agree / total >= 0.99, (agree, total)


def _runner_logits_decoding(context, path, tokens, prefill, max_model_len):
    """Logits of every token: a prefill of `prefill` tokens, then one decode step per token."""
    r = _core.ModelRunner(context, path, "", max_model_len, 64 << 20,
                          max_num_batched_tokens=256, max_num_logits=256)
    rows = [r.step([StepRequest("t", list(tokens[:prefill]), num_logits=prefill)]).logits]
    for i in range(prefill, len(tokens)):
        rows.append(r.step([StepRequest("t", [tokens[i]], num_computed_tokens=i)]).logits)
    r.free("t")
    return np.concatenate(rows)


# Mixed weight types inside one layer, as Q4_K_M files have them: q | k stacked with v apart (two
# matmuls writing one q | k | v row, then the fused epilogue, or the unfused path with QK norm),
# or q, k and v all apart.
@pytest.mark.parametrize("arch,fmt,formats", [
    ("qwen2", "Q4_K", {"attn_v.weight": "Q6_K"}),   # wqk + wv, biases, fused epilogue
    ("llama", "Q4_K", {"attn_v.weight": "Q8_0"}),   # wqk + wv, no biases
    ("qwen3", "Q4_K", {"attn_v.weight": "Q6_K"}),   # wqk + wv with QK norm (unfused path)
    ("gemma3", "Q4_0", {"attn_v.weight": "Q8_0"}),  # wqk + wv, QK norm, sliding windows
    ("qwen2", "Q4_K", {"attn_k.weight": "Q8_0"}),   # q, k, v apart
    ("llama-kvshare", "Q4_K", {"attn_v.weight": "Q6_K"}),  # wqk + wv, and layers reading them
    ("llama-chunked", "Q4_K", {"attn_v.weight": "Q6_K"}),  # wqk + wv, chunked-local layers
])
def test_mixed_qkv_types_match_reference(context, tmp_path, arch, fmt, formats):
    path = str(tmp_path / f"{arch}-mixed.gguf")
    write_random_model(path, arch, fmt, seed=5, tensor_formats=formats)
    rng = np.random.default_rng(11)
    ids = [int(t) for t in rng.integers(3, 300, size=40)]
    ref = NumpyModel(path).logits(ids)
    for ours in (_runner_logits(context, path, ids, 64),                  # prefill (t = 40)
                 _runner_logits_decoding(context, path, ids, 30, 64)):    # then decodes (t = 1)
        rel, margin, flips = _compare(ours, ref)
        assert rel.max() < 0.12, (rel.max(), np.median(rel))
        assert all(margin[i] < 0.03 for i in flips), [(i, margin[i]) for i in flips]
        assert len(flips) <= 6


def test_tensor_formats_are_checked(tmp_path):
    """A test asking for a format gets it or an error: never a silent fallback or a no-op."""
    with pytest.raises(ValueError, match="cannot hold"):  # rows of 128 in a Q8_0 model
        write_random_model(str(tmp_path / "a.gguf"), "qwen2", "Q8_0",
                           tensor_formats={"attn_k.weight": "Q4_K"})
    with pytest.raises(ValueError, match="no tensor"):
        write_random_model(str(tmp_path / "b.gguf"), "qwen2", "Q4_K",
                           tensor_formats={"attn_qkv.weight": "Q8_0"})
    with pytest.raises(ValueError, match="expected one of"):
        write_random_model(str(tmp_path / "c.gguf"), "qwen2", "Q4_K",
                           tensor_formats={"attn_v.weight": "Q7_K"})


def test_rope_scaling_the_runner_cannot_apply_is_refused(context, tmp_path):
    """YaRN where its cos / sin scale meets partial rotation (MLA) or Gemma 3's local bases is an
    UnsupportedError at load (inspect describes the file and says why); an unknown scaling type
    is one from the config, naming the supported types."""
    yarn = lambda a: {f"{a}.rope.scaling.type": "yarn", f"{a}.rope.scaling.factor": 4.0,  # noqa: E731
                      f"{a}.rope.scaling.original_context_length": 512}
    for arch, match in (("deepseek2", "partial rotation"), ("gemma3", "local layers")):
        path = write_random_model(str(tmp_path / f"{arch}.gguf"), arch, "F32", metadata=yarn(arch))
        with pytest.raises(specdec.UnsupportedError, match=match):
            _core.ModelRunner(context, path, "", 64, 64 << 20)
        info = specdec.inspect_model(path, progress=False)
        assert not info["runnable"] and match in info["unsupported"]
    path = write_random_model(str(tmp_path / "kvshare-fused.gguf"), "llama-kvshare", "F32",
                              extra_tensors={"blk.0.attn_qkv.weight": np.zeros((256, 128), np.float32)})
    with pytest.raises(specdec.UnsupportedError, match="reads another layer's KV but holds a fused"):
        _core.ModelRunner(context, path, "", 64, 64 << 20)
    path = write_random_model(str(tmp_path / "dynamic.gguf"), "qwen2", "F32",
                              metadata={"qwen2.rope.scaling.type": "dynamic"})
    with pytest.raises(specdec.UnsupportedError, match="'dynamic' is not supported; supported: "
                                                       "none, linear, yarn, longrope"):
        specdec.load_model_config(path, progress=False)
    path = write_random_model(str(tmp_path / "longrope.gguf"), "qwen2", "F32",
                              metadata={"qwen2.rope.scaling.type": "longrope"})
    with pytest.raises(specdec.FormatError, match="needs the rope_factors_long and rope_factors_short"):
        specdec.load_model_config(path, progress=False)


def test_inspect_shows_rope_scaling(random_dir):
    """inspect names the scaling each variant runs with."""
    expected = {"llama": ("rope          norm, dim 32, base 10000", None),
                "llama3": ("scaling llama3 (per-pair divisors: the rope_freqs tensor)", None),
                "qwen2-yarn": ("scaling yarn x4 from 32768 tokens (pairs <= 5 unscaled, >= 10 / 4",
                               "cos/sin x1.139"),
                "qwen3-yarn": ("scaling yarn x4 from 32768 tokens (pairs <= 11 unscaled, >= 20 / 4",
                               "cos/sin x1.139"),
                "phi3": ("scaling longrope (rope_factors_long when max_model_len > 32, "
                         "rope_factors_short otherwise)", "cos/sin x1.483")}
    for arch, (text, mscale) in expected.items():
        path = write_random_model(str(random_dir / f"inspect-{arch}.gguf"), arch, "Q8_0")
        shown = specdec.format_inspect(specdec.inspect_model(path, progress=False))
        rope_line = next(l for l in shown.splitlines() if l.strip().startswith("rope"))
        assert text in rope_line, rope_line
        assert ("cos/sin" in rope_line) == (mscale is not None), rope_line
        assert mscale is None or mscale in rope_line, rope_line
        if arch == "llama":
            assert "scaling" not in rope_line, rope_line
    mistral = write_random_model(str(random_dir / "inspect-mistral.gguf"), "mistral", "Q8_0")
    assert "sliding 16: layers.0-1" in specdec.format_inspect(specdec.inspect_model(mistral, progress=False))


@pytest.mark.parametrize("fmt", ["F32", "Q8_0"])
def test_phi3_longrope_short_and_long_factors(context, tmp_path, fmt):
    """Phi-3's LongRoPE as llama.cpp picks it: the short factors while the context (the runner's
    max_model_len) is within the original 32 tokens, the long ones past it; the two differ."""
    path = write_random_model(str(tmp_path / "phi3.gguf"), "phi3", fmt, seed=4)
    ids = [int(t) for t in np.random.default_rng(5).integers(3, 300, size=30)]
    exact = fmt == "F32"
    for n_ctx in (32, 48):
        ours = _runner_logits(context, path, ids, n_ctx, "f32" if exact else "f16")
        ref = NumpyModel(path, n_ctx=n_ctx).logits(ids)
        rel, margin, flips = _compare(ours, ref)
        assert rel.max() < (1e-4 if exact else 0.12), (n_ctx, rel.max())
        assert all(margin[i] < 0.03 for i in flips), [(i, margin[i]) for i in flips]
        other = NumpyModel(path, n_ctx=80 - n_ctx).logits(ids)
        assert _compare(other, ref)[0].max() > 0.05  # the other factor set: clearly different


@pytest.mark.parametrize("fmt", ["Q5_1", "Q2_K", "Q3_K", "IQ4_NL", "IQ4_XS"])
def test_random_model_generates_reference_greedy_tokens(random_dir, fmt):
    """A GGUF of each format added in issue 24 runs end to end (specdec.LLM: prefill, then one
    decode step per token): every greedy token is the largest logit of the reference forward over
    the same tokens, or within a near-tie of it (int8 activations, as above)."""
    path = str(random_dir / f"qwen2-generate-{fmt}.gguf")
    write_random_model(path, "qwen2", fmt, seed=5)
    prompt = [int(t) for t in np.random.default_rng(11).integers(3, 300, size=12)]
    params = specdec.SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    llm = specdec.LLM(path, progress=False, max_model_len=64)
    gen = list(llm.generate([{"prompt_token_ids": prompt}], params)[0].outputs[0].token_ids)
    assert len(gen) == 24
    ref = NumpyModel(path).logits(prompt + gen[:-1])[len(prompt) - 1:]  # [24, vocab]
    picked = ref[np.arange(len(gen)), gen]
    gap = (ref.max(axis=1) - picked) / np.abs(ref).max(axis=1)
    assert np.all(gap < 0.03), gap
    assert np.sum(gap > 0) <= 3, gap
