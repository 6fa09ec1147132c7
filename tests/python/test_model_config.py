"""ModelConfig and `specdec inspect` on the real models (through the cache) and on Hugging Face
directories written here with numpy + safetensors."""

import json
from pathlib import Path

import numpy as np
import pytest

import specdec
from specdec import cli

from paths import STORIES  # noqa: E402


def test_gemma3_270m(real_model):
    c = specdec.load_model_config(real_model("gemma-3-270m-q4_k_m"))
    assert (c.architecture, c.num_layers, c.hidden_size) == ("gemma3", 18, 640)
    assert (c.num_q_heads, c.num_kv_heads, c.head_size) == (4, 1, 256)
    layers = json.loads(c.to_json())["layers"]
    for i, layer in enumerate(layers):
        if i in (5, 11, 17):
            assert layer["attention"] == "full" and layer["rope_base"] == 1e6
        else:
            assert layer["attention"] == "sliding" and layer["sliding_window"] == 512
            assert layer["rope_base"] == 10000
    assert c.qk_norm and c.tied_embeddings and c.vocab_size == 262144
    plan = specdec.plan_kv_cache(c.layer_kv_specs(), "1GiB", 32768)
    assert [g.spec.kind for g in plan.groups] == ["sliding_window", "full_attention"]
    assert [len(g.layer_names) for g in plan.groups] == [15, 3]


@pytest.mark.parametrize("name,layers,hidden,kv_heads,q_heads,head,tied", [
    ("qwen2.5-coder-1.5b-instruct-q4_k_m", 28, 1536, 2, 12, 128, False),
    ("qwen2.5-coder-0.5b-instruct-q4_k_m", 24, 896, 2, 14, 64, False),
])
def test_qwen(real_model, name, layers, hidden, kv_heads, q_heads, head, tied):
    c = specdec.load_model_config(real_model(name))
    assert c.architecture == "qwen2"
    assert (c.num_layers, c.hidden_size, c.num_q_heads, c.num_kv_heads, c.head_size) == \
        (layers, hidden, q_heads, kv_heads, head)
    assert c.qkv_bias and c.rope_type == "neox" and c.tied_embeddings == tied
    assert c.vocab_size == 151936 and c.num_sliding_layers == 0
    assert c.rope_base == 1e6


def test_smollm2(real_model):
    c = specdec.load_model_config(real_model("smollm2-135m-instruct-q4_1"))
    assert (c.architecture, c.num_layers, c.num_q_heads, c.num_kv_heads, c.head_size) == \
        ("llama", 30, 9, 3, 64)
    assert c.tied_embeddings and not c.qkv_bias and c.rope_type == "norm"


def test_drafter_and_target_vocabularies_identical(real_model):
    a = specdec.read_gguf(real_model("qwen2.5-coder-0.5b-instruct-q4_k_m"))["metadata"]
    b = specdec.read_gguf(real_model("qwen2.5-coder-1.5b-instruct-q4_k_m"))["metadata"]
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges",
                "tokenizer.ggml.pre", "tokenizer.ggml.model"):
        assert a[key] == b[key], key
    assert len(a["tokenizer.ggml.tokens"]) == 151936
    assert len(a["tokenizer.ggml.merges"]) == 151387


def test_names_accepted_as_paths(real_model):
    real_model("smollm2-135m-instruct-q4_1")
    assert specdec.load_model_config("smollm2-135m-instruct-q4_1").num_layers == 30


def test_inspect_cli(real_model, capsys):
    real_model("qwen2.5-coder-1.5b-instruct-q4_k_m")
    assert cli.main(["inspect", "qwen2.5-coder-1.5b-instruct-q4_k_m"]) == 0
    out = capsys.readouterr().out
    for needle in ("architecture  qwen2", "28 layers", "12 q / 2 kv x 128", "q4_K", "q6_K",
                   "gpt2 (pre qwen2), vocabulary 151936", "'<|im_end|>'", "chat templates default",
                   "1 KV-cache group", "full_attention(block_size=16, num_kv_heads=2, head_size=128"):
        assert needle in out, needle
    assert cli.main(["inspect", "gemma-3-270m-q4_k_m", "--json", "--budget", "64MiB"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["config"]["architecture"] == "gemma3"
    assert len(info["kv_cache"]["plan"]["groups"]) == 2
    assert info["files"]["tokenizer"]["vocab_size"] == 262144
    assert info["files"]["tensors"]["q4_K"]["count"] == 27
    assert sum(t["count"] for t in info["files"]["tensors"].values()) == 236


def test_inspect_stories_and_kv_plan_model(capsys):
    assert cli.main(["inspect", STORIES]) == 0
    out = capsys.readouterr().out
    assert "5 layers" in out and "llama (pre -), vocabulary 512" in out
    assert cli.main(["kv-plan", "--model", STORIES, "--budget", "1MiB"]) == 0
    assert "full_attention(block_size=16, num_kv_heads=4, head_size=8" in capsys.readouterr().out


def test_inspect_errors(tmp_path, capsys):
    assert cli.main(["inspect", str(tmp_path / "nope.gguf")]) == 2
    assert "known names" in capsys.readouterr().err
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 16)
    assert cli.main(["inspect", str(bad)]) == 2
    assert "GGUF" in capsys.readouterr().err
    assert cli.main(["inspect", str(tmp_path)]) == 2
    assert "config.json" in capsys.readouterr().err


def _hf_dir(tmp_path, config: dict, tensors: dict) -> Path:
    from safetensors.numpy import save_file
    d = tmp_path / "hf"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config))
    save_file(tensors, str(d / "model.safetensors"))
    return d


def test_hf_directory(tmp_path, capsys):
    config = {"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 128,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "head_dim": 32, "max_position_embeddings": 1024, "vocab_size": 100,
              "rms_norm_eps": 1e-6, "rope_theta": 1000000, "tie_word_embeddings": True}
    rng = np.random.default_rng(0)
    tensors = {"model.embed_tokens.weight": rng.standard_normal((100, 64)).astype(np.float16),
               "model.norm.weight": np.ones(64, np.float32)}
    d = _hf_dir(tmp_path, config, tensors)
    c = specdec.load_model_config(str(d))
    assert (c.architecture, c.source_format, c.head_size, c.qk_norm) == ("qwen3", "hf", 32, True)
    assert specdec.load_model_config(str(d / "config.json")).num_layers == 2
    assert cli.main(["inspect", str(d), "--json"]) == 2  # described, but it does not run
    cap = capsys.readouterr()
    info = json.loads(cap.out)
    assert info["files"]["tensors"] == {"F16": {"count": 1, "bytes": 12800},
                                        "F32": {"count": 1, "bytes": 256}}
    assert not info["runnable"] and "tokenizer.json" in info["unsupported"]
    assert "specdec cannot run this model" in cap.err
    config["num_key_value_heads"] = 3
    (d / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="num_kv_heads = 3"):
        specdec.load_model_config(str(d))
    (d / "config.json").write_text("{not json")
    with pytest.raises(specdec.FormatError, match="not valid JSON"):
        specdec.load_model_config(str(d))


def test_hf_config_from_text():
    from specdec import _core
    c = _core.model_config_from_hf_json(json.dumps({
        "model_type": "gemma3", "text_config": {
            "model_type": "gemma3_text", "hidden_size": 640, "intermediate_size": 2048,
            "num_hidden_layers": 18, "num_attention_heads": 4, "num_key_value_heads": 1,
            "head_dim": 256, "max_position_embeddings": 32768, "vocab_size": 262144,
            "sliding_window": 512}}))
    assert c.num_sliding_layers == 15
    with pytest.raises(ValueError, match="model_type"):
        _core.model_config_from_hf_json(json.dumps({"model_type": "gpt_neox"}))
