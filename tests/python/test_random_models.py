"""Random test models (specdec.testing) for every architecture and weight format, and the NumPy
reference forward (reference/numpy_model.py) on them and on stories260K.

These tests need only NumPy and the ``gguf`` package; llama.cpp is compared in
bench/reference_vs_llamacpp.py (docs/reference_model.md)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

import gguf  # noqa: F401  (a test dependency: scripts/setup.sh installs it; never skipped)

import specdec  # noqa: E402
from specdec.testing import ARCHITECTURES, WEIGHT_FORMATS, write_random_model  # noqa: E402
from specdec.testing.random_model import llama3_rope_factors  # noqa: E402
from specdec.testing.quantize import block_size, quantize  # noqa: E402

from reference.numpy_model import (NumpyModel, attention_mask, rope, rope_yarn,  # noqa: E402
                                   yarn_attn_factor, yarn_corr_dims)

from paths import STORIES_PATH as STORIES  # noqa: E402
TEXT = "hello world, the quick brown fox jumps over the lazy dog and the cat sat on a mat"
MAX_FILE_BYTES = 5 << 20


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("random_models")


def _model(model_dir: Path, arch: str, fmt: str, seed: int = 0) -> str:
    path = model_dir / f"{arch}-{fmt}-{seed}.gguf"
    if not path.exists():
        write_random_model(path, arch, fmt, seed=seed)
    return str(path)


EXPECTED_LAYERS = {
    "llama": ["full"] * 2, "qwen2": ["full"] * 2, "qwen3": ["full"] * 2,
    "gemma3": ["sliding"] * 5 + ["full"], "deepseek2": ["mla"] * 2, "deepseek2-kvb": ["mla"] * 2,
    "llama-chunked": ["chunked"] * 3 + ["full"], "llama-kvshare": ["full"] * 4,
    "llama3": ["full"] * 2, "mistral": ["sliding"] * 2, "qwen2-yarn": ["full"] * 2,
    "qwen3-yarn": ["full"] * 2, "phi3": ["full"] * 2,  # phi3: the window key is ignored
}
BASE_ARCHITECTURE = {"llama3": "llama", "mistral": "llama"}


@pytest.mark.parametrize("fmt", WEIGHT_FORMATS)
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_random_model_loads_and_runs(model_dir, arch, fmt):
    path = _model(model_dir, arch, fmt)
    assert os.path.getsize(path) < MAX_FILE_BYTES
    config = json.loads(specdec.load_model_config(path, progress=False).to_json())
    assert config["architecture"] == BASE_ARCHITECTURE.get(arch, arch.split("-")[0])
    assert [l["attention"] for l in config["layers"]] == EXPECTED_LAYERS[arch]
    info = specdec.read_gguf(path)
    types = {t["name"]: t["type"].upper() for t in info["tensors"]}
    assert types["token_embd.weight"] == fmt
    assert all(types[n] == "F32" for n in types if n.endswith("norm.weight") or n.endswith(".bias"))
    tok = specdec.Tokenizer.from_file(path)
    ids = tok.encode(TEXT)
    assert tok.decode(ids) == TEXT
    out = NumpyModel(path).forward(ids, hidden_layers=[0, -1])
    assert out.logits.shape == (len(ids), config["vocab_size"])
    assert np.isfinite(out.logits).all()
    assert sorted(out.hidden_states) == [0, config["num_layers"] - 1]
    assert out.hidden_states[0].shape == (len(ids), config["hidden_size"])
    assert out.final_hidden.shape == (len(ids), config["hidden_size"])
    assert len(set(out.logits.argmax(-1).tolist())) > len(ids) // 4  # not one constant token


def test_variant_features(model_dir):
    cfg = lambda a: json.loads(specdec.load_model_config(_model(model_dir, a, "F32"),  # noqa: E731
                                                         progress=False).to_json())
    gemma = cfg("gemma3")
    assert gemma["layers"][0]["sliding_window"] == 16 and gemma["layers"][0]["rope_base"] == 1e4
    assert gemma["layers"][5]["rope_base"] == 1e6
    assert gemma["qk_norm"] and gemma["post_norms"] and gemma["activation"] == "gelu_tanh"
    assert gemma["head_size"] * gemma["num_q_heads"] == 2 * gemma["hidden_size"]
    chunked = cfg("llama-chunked")
    assert [l["use_rope"] for l in chunked["layers"]] == [True, True, True, False]
    assert chunked["layers"][0]["attention_chunk_size"] == 16
    share = cfg("llama-kvshare")
    assert [l.get("kv_sharing_target", -1) for l in share["layers"]] == [-1, -1, 1, 1]
    assert cfg("qwen2")["qkv_bias"] and not cfg("qwen2")["tied_embeddings"]
    qwen3 = cfg("qwen3")
    assert qwen3["qk_norm"]
    assert qwen3["head_size"] * qwen3["num_q_heads"] == 2 * qwen3["hidden_size"]
    llama3 = cfg("llama3")
    assert llama3["rope_scaling_type"] == "llama3" and llama3["rope_freq_factors"]
    assert llama3["rope_base"] == 5e5 and cfg("llama")["rope_scaling_type"] == ""
    mistral = cfg("mistral")
    assert [l["sliding_window"] for l in mistral["layers"]] == [16, 16]
    for a in ("qwen2-yarn", "qwen3-yarn"):
        yarn = cfg(a)
        assert (yarn["rope_scaling_type"], yarn["rope_scaling_factor"]) == ("yarn", 4.0)
        assert yarn["rope_original_context_length"] == 32768
        assert yarn["context_length"] == 131072
    phi3 = cfg("phi3")
    assert phi3["fused_qkv"] and phi3["fused_gate_up"] and not phi3["tied_embeddings"]
    assert phi3["rope_scaling_type"] == "longrope" and phi3["rope_long_short_factors"]
    assert phi3["rope_original_context_length"] == 32 and phi3["rope_type"] == "neox"
    assert abs(phi3["rope_attn_factor"] - np.sqrt(1 + np.log(64) / np.log(32))) < 1e-6
    assert not cfg("llama")["fused_qkv"] and not cfg("qwen2")["fused_gate_up"]
    for a in ("deepseek2", "deepseek2-kvb"):
        mla = cfg(a)["mla"]
        assert (mla["qk_nope_head_dim"], mla["qk_rope_head_dim"], mla["v_head_dim"]) == (32, 16, 32)
        assert mla["kv_lora_rank"] == 128 and mla["q_lora_rank"] == 128


def test_generation_is_deterministic_by_seed(tmp_path):
    digest = lambda p: hashlib.sha256(Path(p).read_bytes()).hexdigest()  # noqa: E731
    a = digest(write_random_model(tmp_path / "a.gguf", "gemma3", "Q4_K", seed=7))
    b = digest(write_random_model(tmp_path / "b.gguf", "gemma3", "Q4_K", seed=7))
    c = digest(write_random_model(tmp_path / "c.gguf", "gemma3", "Q4_K", seed=8))
    assert a == b != c


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="architecture"):
        write_random_model(tmp_path / "x.gguf", "mamba")
    with pytest.raises(ValueError, match="weight_format"):
        write_random_model(tmp_path / "x.gguf", "llama", "IQ2_XS")


# Relative RMS error of quantize -> gguf-py dequantize on Gaussian rows (llama.cpp's levels).
QUANT_RMS = {"F32": 0, "F16": 1e-3, "BF16": 5e-3, "Q8_0": 1e-2, "Q6_K": 3e-2, "Q5_K": 5e-2,
             "Q5_1": 5e-2, "Q5_0": 6e-2, "Q4_K": 1e-1, "Q4_1": 1e-1, "IQ4_NL": 1e-1,
             "IQ4_XS": 1e-1, "Q4_0": 1.2e-1, "Q3_K": 2e-1, "Q2_K": 3.5e-1}


@pytest.mark.parametrize("fmt", WEIGHT_FORMATS)
def test_quantizers_round_trip_through_gguf_py(fmt):
    x = np.random.default_rng(1).standard_normal((6, 512)).astype(np.float32) * 0.05
    data, qtype = quantize(x, fmt)
    if data.dtype == np.uint8:
        back = gguf.quants.dequantize(data, qtype)
    else:
        back = data.astype(np.float32)
    assert back.shape == x.shape
    err = np.sqrt(np.mean((back - x) ** 2)) / np.std(x)
    assert err <= QUANT_RMS[fmt], f"{fmt}: relative RMS error {err:.4f}"
    if block_size(fmt) > 1:
        with pytest.raises(ValueError, match="multiple"):
            quantize(x[:, :block_size(fmt) + 16], fmt)


def test_quantized_model_tracks_f32(model_dir):
    """Same seed, same dims: the Q8_0 model's logits are close to the F32 model's."""
    ids = specdec.Tokenizer.from_file(_model(model_dir, "gemma3", "F32")).encode(TEXT)
    ref = NumpyModel(_model(model_dir, "gemma3", "F32")).logits(ids)
    q8 = NumpyModel(_model(model_dir, "gemma3", "Q8_0")).logits(ids)
    assert np.abs(q8 - ref).max() < 0.1 * np.abs(ref).max()
    assert np.mean(q8.argmax(-1) == ref.argmax(-1)) >= 0.9


def test_mla_split_and_joined_kv_b_agree(model_dir):
    """attn_k_b / attn_v_b are the converter's split of attn_kv_b: the two paths match."""
    ids = list(range(3, 60))
    a = NumpyModel(_model(model_dir, "deepseek2", "F32", 3)).logits(ids)
    b = NumpyModel(_model(model_dir, "deepseek2-kvb", "F32", 3)).logits(ids)
    np.testing.assert_allclose(a, b, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_reference_is_causal(model_dir, arch):
    """Logits at a position depend only on the tokens up to it (teacher forcing = prefixes)."""
    model = NumpyModel(_model(model_dir, arch, "Q8_0"))
    ids = list(range(3, 43))
    full = model.logits(ids)
    np.testing.assert_allclose(model.logits(ids[:25]), full[:25], atol=2e-4, rtol=1e-4)
    changed = model.logits(ids[:30] + [7] * 10)
    np.testing.assert_allclose(changed[:30], full[:30], atol=2e-4, rtol=1e-4)


def test_forward_batch_equals_separate_forwards(model_dir):
    model = NumpyModel(_model(model_dir, "gemma3", "Q4_0"))
    a, b = list(range(3, 40)), list(range(50, 70))
    both = model.forward_batch([a, b], hidden_layers=[2])
    for seq, out in zip((a, b), both):
        alone = model.forward(seq, hidden_layers=[2])
        np.testing.assert_allclose(out.logits, alone.logits, atol=2e-4, rtol=1e-4)
        np.testing.assert_allclose(out.hidden_states[2], alone.hidden_states[2],
                                   atol=2e-4, rtol=1e-4)
    np.testing.assert_array_equal(model.forward(a, logits_for=[5, 9]).logits[1], both[0].logits[9])


def test_kv_sharing_layers_ignore_their_own_kv_weights(model_dir):
    model = NumpyModel(_model(model_dir, "llama-kvshare", "F32"))
    ids = list(range(3, 40))
    before = model.logits(ids)
    for i in (2, 3):
        for w in ("attn_k", "attn_v"):
            model._cache[f"blk.{i}.{w}.weight"] = np.zeros_like(model.weight(f"blk.{i}.{w}.weight"))
    np.testing.assert_array_equal(model.logits(ids), before)
    model._cache["blk.1.attn_k.weight"] = np.zeros_like(model.weight("blk.1.attn_k.weight"))
    assert not np.allclose(model.logits(ids), before)


def test_attention_masks():
    pos = np.arange(40)
    full = attention_mask({"attention": "full"}, pos)
    assert (full == (pos[None, :] <= pos[:, None])).all()
    sliding = attention_mask({"attention": "sliding", "sliding_window": 16}, pos)
    assert sliding[20].nonzero()[0].tolist() == list(range(5, 21))  # 16 keys: itself + 15 before
    chunked = attention_mask({"attention": "chunked", "attention_chunk_size": 16}, pos)
    assert chunked[20].nonzero()[0].tolist() == list(range(16, 21))
    assert chunked[15].nonzero()[0].tolist() == list(range(0, 16))


def test_rope_modes():
    x = np.random.default_rng(0).standard_normal((3, 2, 8)).astype(np.float32)
    pos = np.array([0, 1, 5])
    for neox in (False, True):
        y = rope(x, pos, 8, 10000.0, neox)
        np.testing.assert_allclose(y[0], x[0], atol=1e-6)                       # position 0
        np.testing.assert_allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1),
                                   rtol=1e-5)
    # NORM rotates pair (0, 1) by p * base^0 = p radians; NEOX rotates (0, 4).
    y = rope(x, pos, 8, 10000.0, False)
    c, s = np.cos(5.0), np.sin(5.0)
    np.testing.assert_allclose(y[2, :, 0], x[2, :, 0] * c - x[2, :, 1] * s, rtol=1e-5)
    y = rope(x, pos, 8, 10000.0, True)
    np.testing.assert_allclose(y[2, :, 0], x[2, :, 0] * c - x[2, :, 4] * s, rtol=1e-5)
    # Partial rotation leaves the trailing dims alone.
    np.testing.assert_array_equal(rope(x, pos, 4, 10000.0, True)[..., 4:], x[..., 4:])


def _transformers_yarn(x, positions, dim, base, factor, original, beta_fast=32.0, beta_slow=1.0):
    """YaRN as transformers defines it (_compute_yarn_parameters, NEOX pairs): inv_freq blended
    between interpolation (/ factor) and extrapolation by 1 - linear ramp over the correction
    range, cos and sin times attention_factor = 0.1 ln(factor) + 1."""
    pos_freqs = base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)

    def corr(rot):
        return dim * np.log(original / (rot * 2 * np.pi)) / (2 * np.log(base))
    low, high = max(np.floor(corr(beta_fast)), 0), min(np.ceil(corr(beta_slow)), dim - 1)
    ramp = np.clip((np.arange(dim // 2) - low) / max(high - low, 0.001), 0, 1)
    inv_freq = interpolation * ramp + extrapolation * (1 - ramp)
    theta = positions[:, None].astype(np.float64) * inv_freq[None, :]
    mscale = 0.1 * np.log(factor) + 1.0
    cos, sin = (np.cos(theta) * mscale)[:, None, :], (np.sin(theta) * mscale)[:, None, :]
    x0, x1 = x[..., :dim // 2].astype(np.float64), x[..., dim // 2:].astype(np.float64)
    return np.concatenate([x0 * cos - x1 * sin, x0 * sin + x1 * cos], axis=-1)


@pytest.mark.parametrize("factor,original,base,dim", [(4.0, 32768, 1e6, 32), (4.0, 32768, 1e6, 128),
                                                      (8.0, 4096, 1e4, 64), (2.0, 2048, 1e4, 16)])
def test_rope_yarn_equals_transformers(factor, original, base, dim):
    """The reference's YaRN (ggml's rope_yarn with llama_context's attn_factor) is transformers'
    YaRN: the same angles and, after llama.cpp's cancellation, the same cos / sin scale."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((5, 3, dim)).astype(np.float32)
    pos = np.array([0, 1, 17, 4000, 100000])
    dims = yarn_corr_dims(dim, original, base, 32.0, 1.0)
    ours = rope_yarn(x, pos, dim, base, True, 1.0 / factor, 1.0, yarn_attn_factor(factor, 1.0, 1.0),
                     dims)
    np.testing.assert_allclose(ours, _transformers_yarn(x, pos, dim, base, factor, original),
                               rtol=2e-5, atol=2e-5)
    # Pairs below the range keep their angle, pairs above it are divided by the factor.
    low, high = dims
    assert 0 < low < high < dim // 2 - 1
    plain = rope(x, pos, dim, base, True) * np.float32(0.1 * np.log(factor) + 1)
    linear = rope(x, pos, dim, base, True, 1.0 / factor) * np.float32(0.1 * np.log(factor) + 1)
    half = dim // 2
    for i in (0, int(low)):
        np.testing.assert_allclose(ours[..., i], plain[..., i], rtol=1e-4, atol=1e-4)
        assert not np.allclose(ours[3:, :, i], linear[3:, :, i], atol=1e-3)
    for i in (int(high), half - 1):
        np.testing.assert_allclose(ours[..., i + half], linear[..., i + half], rtol=1e-4, atol=1e-4)
    # ext_factor 0: linear angles, cos / sin times attn_factor only.
    np.testing.assert_allclose(rope_yarn(x, pos, dim, base, True, 1.0 / factor, 0.0, 1.0, dims),
                               rope(x, pos, dim, base, True, 1.0 / factor), rtol=1e-6, atol=1e-6)


def test_llama3_rope_factors_as_transformers():
    """llama.cpp's converter's rope_freqs equal transformers' llama3 inv_freq ratios
    (_compute_llama3_parameters): inv_freq / inv_freq_llama per pair."""
    dim, base, s = 128, 5e5, {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 8192}
    ours = llama3_rope_factors(dim, base, **s)
    inv = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    wavelen = 2 * np.pi / inv
    old, lo, hi, f = s["original_max_position_embeddings"], s["low_freq_factor"], s["high_freq_factor"], s["factor"]
    scaled = np.where(wavelen > old / lo, inv / f, inv)
    smooth = (old / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * scaled / f + smooth * scaled
    medium = ~(wavelen < old / hi) & ~(wavelen > old / lo)
    expected = inv / np.where(medium, smoothed, scaled)
    np.testing.assert_allclose(ours, expected, rtol=1e-5)
    assert ours[0] == 1.0 and ours[-1] == 8.0 and ((ours > 1) & (ours < 8)).sum() >= 2
    assert (np.diff(ours) >= 0).all()


def test_stories260k_greedy_is_fluent():
    model = NumpyModel(STORIES)
    tokens = specdec.read_gguf(str(STORIES))["metadata"]["tokenizer.ggml.tokens"]
    seq = [1]  # <s>
    for _ in range(30):
        seq.append(int(model.logits(seq)[-1].argmax()))
    text = "".join(tokens[t] for t in seq[1:]).replace("\u2581", " ")
    assert text.startswith(" Once upon a time, there was a little girl named Lily.")
