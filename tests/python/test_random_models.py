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
from specdec.testing.quantize import block_size, quantize  # noqa: E402

from reference.numpy_model import NumpyModel, attention_mask, rope  # noqa: E402

STORIES = Path(__file__).resolve().parents[2].parent / "shared" / "models" / "stories260K.gguf"
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
}


@pytest.mark.parametrize("fmt", WEIGHT_FORMATS)
@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_random_model_loads_and_runs(model_dir, arch, fmt):
    path = _model(model_dir, arch, fmt)
    assert os.path.getsize(path) < MAX_FILE_BYTES
    config = json.loads(specdec.load_model_config(path, progress=False).to_json())
    assert config["architecture"] == arch.split("-")[0]
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


@pytest.mark.skipif(not STORIES.exists(), reason="shared/models/stories260K.gguf not present")
def test_stories260k_greedy_is_fluent():
    model = NumpyModel(STORIES)
    tokens = specdec.read_gguf(str(STORIES))["metadata"]["tokenizer.ggml.tokens"]
    seq = [1]  # <s>
    for _ in range(30):
        seq.append(int(model.logits(seq)[-1].argmax()))
    text = "".join(tokens[t] for t in seq[1:]).replace("\u2581", " ")
    assert text.startswith(" Once upon a time, there was a little girl named Lily.")
