"""Hugging Face model directories run: a random model written as GGUF and as its HF twin
(specdec.testing.hf_twin: config.json, safetensors, tokenizer.json, tokenizer_config.json,
generation_config.json) gives the same tokens, through LLM and the CLI (Phi-3's LongRoPE: the same
logits, with its short and its long factors); the tokenizer reads the
same ids, special tokens and template; bad directories are refused naming the file and field."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import pytest

import gguf  # noqa: F401  (test dependency)
import tokenizers

import specdec
from specdec import _core, cli
from specdec._core import StepRequest
from specdec.testing import write_random_dflash, write_random_model
from specdec.testing.hf_twin import tokenizer_json, write_hf_twin, write_safetensors

PROMPTS = ["hello world the cat", "a b c d e f", "the quick brown fox jumps over the lazy dog " * 2]
CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _pair(tmp_path: Path, arch: str, fmt: str, shards: int = 1, **twin_args):
    g = write_random_model(tmp_path / f"{arch}.gguf", arch, fmt, seed=3)
    return g, write_hf_twin(g, tmp_path / f"{arch}-hf", num_shards=shards, **twin_args)


def _greedy(path: str, **kw):
    llm = specdec.LLM(path, max_model_len=96, kv_cache_memory_bytes="8MiB", max_num_seqs=4, progress=False, **kw)
    params = specdec.SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    return [o.outputs[0].token_ids for o in llm.generate(PROMPTS, params)]


@pytest.mark.parametrize("arch,fmt,shards", [
    ("llama", "F32", 1), ("llama", "F16", 2), ("llama", "BF16", 3),
    ("qwen2", "F32", 2), ("qwen2", "BF16", 1), ("qwen3", "F16", 1), ("gemma3", "F32", 2), ("gemma3", "BF16", 1),
    ("phi3", "F16", 2)])
def test_twin_gives_the_same_greedy_tokens(tmp_path, arch, fmt, shards):
    g, d = _pair(tmp_path, arch, fmt, shards)
    want = _greedy(g)
    assert len({t for ids in want for t in ids}) > 8  # not one repeated token
    assert _greedy(d) == want
    cfg = json.loads(specdec.load_model_config(d).to_json())
    assert cfg["architecture"] == arch and cfg["source_format"] == "hf"


def _read_safetensors(path: Path):
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    return [(name, e["dtype"], tuple(e["shape"]), raw[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]])
            for name, e in header.items() if name != "__metadata__"]


def test_bf16_norms_read_as_their_f32_values(tmp_path):
    """Norms stored BF16 (as most checkpoints store them; Gemma's get + 1) give the tokens of the
    same values stored F32."""
    _, d = _pair(tmp_path, "gemma3", "BF16")
    tensors = _read_safetensors(Path(d) / "model.safetensors")
    as_f32, as_bf16 = [], []
    for name, dtype, shape, data in tensors:
        if len(shape) == 1:
            bits = np.frombuffer(data, np.uint32)
            bf16 = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
            as_f32.append((name, "F32", shape, (bf16.astype(np.uint32) << 16).tobytes()))
            as_bf16.append((name, "BF16", shape, bf16.tobytes()))
        else:
            as_f32.append((name, dtype, shape, data))
            as_bf16.append((name, dtype, shape, data))
    as_f16 = [(n, "F16" if dt == "BF16" and len(sh) == 1 else dt, sh, x) for n, dt, sh, x in as_bf16]
    dirs = []
    for name, parts in (("f32-norms", as_f32), ("bf16-norms", as_bf16), ("mislabelled", as_f16)):
        out = tmp_path / name
        shutil.copytree(d, out)
        write_safetensors(out / "model.safetensors", parts)
        dirs.append(str(out))
    a, b = _greedy(dirs[0]), _greedy(dirs[1])
    assert a == b
    assert a != _greedy(dirs[2])  # the same bits read as F16: the dtype is what decides


def test_llama_q_k_rows_must_be_permuted(tmp_path):
    """Without llama.cpp's q/k permutation (NEOX-ordered rows under NORM RoPE) the tokens differ:
    the permutation at load is what makes the twins agree."""
    g, d = _pair(tmp_path, "llama", "F32")
    want = _greedy(g)
    from specdec.testing import hf_twin
    raw = tmp_path / "unpermuted"
    orig = hf_twin._unpermute
    try:
        hf_twin._unpermute = lambda rows, heads: rows  # the GGUF's rows as they are
        write_hf_twin(g, raw)
    finally:
        hf_twin._unpermute = orig
    assert _greedy(str(raw)) != want


@pytest.mark.parametrize("variant", ["llama3", "qwen2-yarn"])
def test_rope_scaling_of_a_directory_runs_as_its_gguf(tmp_path, variant):
    """Llama 3's rope_scaling becomes llama.cpp's rope_freqs tensor, YaRN's its keys (tuning
    included): the directory decodes as the GGUF written with them."""
    from specdec.testing.random_model import LLAMA3_SCALING
    g = write_random_model(tmp_path / f"{variant}.gguf", variant, "F32", seed=3)
    scaling = dict(LLAMA3_SCALING, rope_type="llama3") if variant == "llama3" else None
    d = write_hf_twin(g, tmp_path / f"{variant}-hf", rope_scaling=scaling)
    assert specdec.load_model_config(d).rope_scaling_type == variant.split("-")[-1]
    assert _greedy(d) == _greedy(g)
    if variant == "llama3":  # llama.cpp's form: the factors as a tensor
        assert "rope_freqs.weight" in {t["name"] for t in specdec.read_gguf(d)["tensors"]}
        return
    cfg = json.loads((Path(d) / "config.json").read_text())
    cfg["rope_scaling"].update(beta_fast=8.0, extrapolation_factor=0.5)  # YaRN's tuning
    (Path(d) / "config.json").write_text(json.dumps(cfg))
    md = specdec.read_gguf(d)["metadata"]  # the GGUF form the runner loads
    assert md["qwen2.rope.scaling.yarn_beta_fast"] == 8.0
    assert md["qwen2.rope.scaling.yarn_ext_factor"] == 0.5
    assert md["qwen2.rope.scaling.type"] == "yarn" and md["qwen2.rope.scaling.factor"] == 4.0


def _phi3_logits(context, path: str, max_model_len: int):
    ids = [int(t) for t in np.random.default_rng(5).integers(3, 300, size=30)]
    r = _core.ModelRunner(context, path, "", max_model_len, 64 << 20, kv_cache_dtype="f32",
                          max_num_batched_tokens=64, max_num_logits=64)
    out = r.step([StepRequest("t", ids, num_logits=len(ids))]).logits
    r.free("t")
    return out


@pytest.mark.parametrize("fmt", ["F32", "BF16"])
def test_phi3_longrope_directory_runs_as_its_gguf(context, tmp_path, fmt):
    """Phi-3 (fused qkv_proj and gate_up_proj, LongRoPE long_factor / short_factor in config.json,
    the original context of 32 tokens at the top level) gives the logits and greedy tokens of its
    GGUF twin, within the original context (short factors) and past it (long factors)."""
    g, d = _pair(tmp_path, "phi3", fmt)
    cfg = json.loads((Path(d) / "config.json").read_text())
    assert cfg["model_type"] == "phi3" and cfg["rope_scaling"]["type"] == "longrope"
    assert cfg["original_max_position_embeddings"] == 32 and "attention_factor" not in cfg["rope_scaling"]
    names = {t["name"] for t in specdec.read_gguf(d)["tensors"]}
    assert {"blk.0.attn_qkv.weight", "blk.0.ffn_up.weight", "rope_factors_long.weight",
            "rope_factors_short.weight", "output.weight"} <= names and "blk.0.ffn_gate.weight" not in names
    logits = {}
    for n_ctx in (32, 48):  # <= 32: rope_factors_short; > 32: rope_factors_long
        logits[n_ctx] = _phi3_logits(context, d, n_ctx)
        assert np.array_equal(logits[n_ctx], _phi3_logits(context, g, n_ctx)), n_ctx
    assert not np.allclose(logits[32], logits[48], rtol=0, atol=1e-3)  # the factors differ
    short = ["hello world", "a b c"]
    for max_model_len in (32, 96):
        kw = dict(max_model_len=max_model_len, kv_cache_memory_bytes="8MiB", max_num_seqs=2, progress=False)
        params = specdec.SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
        want = [o.outputs[0].token_ids for o in specdec.LLM(g, **kw).generate(short, params)]
        assert [o.outputs[0].token_ids for o in specdec.LLM(d, **kw).generate(short, params)] == want
    a, b = json.loads(specdec.load_model_config(g).to_json()), json.loads(specdec.load_model_config(d).to_json())
    assert b["source_format"] == "hf" and b["rope_scaling_type"] == "longrope"
    for key in ("rope_attn_factor", "rope_mscale"):  # f32 in the GGUF, computed in double here
        assert b.pop(key) == pytest.approx(a.pop(key), rel=1e-6)
    for key in ("name", "source_format"):
        a.pop(key), b.pop(key)
    assert a == b


def test_phi3_inspect_shows_longrope(tmp_path, capsys):
    _, d = _pair(tmp_path, "phi3", "F32")
    assert cli.main(["inspect", d]) == 0
    out = capsys.readouterr().out
    assert "format        hf" in out and "architecture  phi3" in out
    rope = next(l for l in out.splitlines() if l.strip().startswith("rope"))
    assert ("scaling longrope (rope_factors_long when max_model_len > 32, rope_factors_short "
            "otherwise); cos/sin x1.483") in rope, rope


def test_phi3_malformed_longrope_is_refused_naming_the_field(tmp_path):
    _, d = _pair(tmp_path, "phi3", "F32")
    base = json.loads((Path(d) / "config.json").read_text())

    def variant(name, change):
        v = tmp_path / name
        shutil.copytree(d, v)
        cfg = json.loads(json.dumps(base))
        change(cfg)
        (v / "config.json").write_text(json.dumps(cfg))
        return v

    v = variant("short-long", lambda c: c["rope_scaling"]["long_factor"].pop())
    _expect(ValueError, r"rope_scaling.long_factor = 15 values: a list of rope_dim / 2 = 16 "
                      r"positive numbers.*short-long/config.json", v)
    v = variant("no-short", lambda c: c["rope_scaling"].pop("short_factor"))
    _expect(ValueError, r"rope_scaling.short_factor = missing.*no-short/config.json", v)
    v = variant("no-original", lambda c: c.pop("original_max_position_embeddings"))
    _expect(ValueError, r"original_max_position_embeddings = missing: .*LongRoPE.*config.json", v)
    v = variant("dynamic", lambda c: c["rope_scaling"].update(type="dynamic"))
    _expect(specdec.UnsupportedError, r"rope_scaling.rope_type = 'dynamic' is not supported for model_type "
                                      r"phi3; supported: default, longrope \(or su\)", v)

    def partial(c):  # Phi-4-mini style: 3/4 of each head rotates, with an attention factor
        c.update(partial_rotary_factor=0.75)
        for k in ("long_factor", "short_factor"):
            c["rope_scaling"][k] = c["rope_scaling"][k][:12]
    _expect(specdec.UnsupportedError, "partial rotation", variant("partial", partial))
    v = variant("su", lambda c: c["rope_scaling"].update(type="su"))  # transformers' older name
    assert specdec.load_model_config(str(v)).rope_scaling_type == "longrope"


def test_tokenizer_of_the_twin(tmp_path):
    g, d = _pair(tmp_path, "llama", "F32", eos_token_ids=[2, 5], chat_template=CHATML)
    a, b = specdec.Tokenizer.from_file(g), specdec.Tokenizer.from_file(d)
    hf = tokenizers.Tokenizer.from_file(str(Path(d) / "tokenizer.json"))
    rng = random.Random(0)
    texts = PROMPTS + ["".join(rng.choice("etaoinshrd .,é中\n") for _ in range(rng.randint(1, 30)))
                       for _ in range(300)]
    for t in texts:
        assert b.encode(t) == a.encode(t) == hf.encode(t).ids, t
        assert b.decode(b.encode(t)) == a.decode(a.encode(t))
    assert (b.bos_token_id, b.eos_token_id, b.add_bos, b.kind) == (a.bos_token_id, a.eos_token_id, True, "spm")
    assert b.chat_template == CHATML and a.chat_template is None
    assert b.eos_token_ids == [2, 5] and a.eos_token_ids == [2]
    assert b.is_eog(5) and not a.is_eog(5)


def test_named_chat_templates_of_tokenizer_config(tmp_path):
    _, d = _pair(tmp_path, "llama", "F32")
    cfg_path = Path(d) / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = [{"name": "tool_use", "template": "T{{ tools | length }}"},
                            {"name": "default", "template": CHATML}]
    cfg_path.write_text(json.dumps(cfg))
    tok = specdec.Tokenizer.from_file(d)
    assert tok.chat_template == CHATML and tok.chat_template_names == ["default", "tool_use"]
    msgs = [{"role": "user", "content": "hi"}]
    assert tok.apply_chat_template(msgs, tools=[{"type": "function"}]) == "T1"
    assert "hi" in tok.apply_chat_template(msgs)


def test_add_bos_from_the_post_processor_when_tokenizer_config_is_silent(tmp_path):
    _, d = _pair(tmp_path, "llama", "F32")
    d = Path(d)
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    del cfg["add_bos_token"]
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    tok = specdec.Tokenizer.from_file(str(d))
    assert tok.add_bos and tok.encode("ab")[0] == 1  # the TemplateProcessing's <s>
    tj = json.loads((d / "tokenizer.json").read_text())
    tj["post_processor"] = None
    (d / "tokenizer.json").write_text(json.dumps(tj))
    tok = specdec.Tokenizer.from_file(str(d))
    assert not tok.add_bos and tok.encode("ab")[0] != 1


@pytest.mark.parametrize("name,pre", [("qwen2.5-coder-0.5b-instruct-q4_k_m", "qwen2"),
                                      ("smollm2-135m-instruct-q4_1", "smollm")])
def test_byte_level_tokenizer_json(tmp_path, real_model, name, pre):
    """A real byte-level vocabulary as tokenizer.json (+ tokenizer_config.json): the same ids
    as the GGUF's tokenizer and as Hugging Face tokenizers."""
    path = real_model(name)
    md = specdec.read_gguf(path)["metadata"]
    arch = md["general.architecture"]
    (tmp_path / "tokenizer.json").write_text(json.dumps(tokenizer_json(md)), encoding="utf-8")
    toks = md["tokenizer.ggml.tokens"]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "eos_token": toks[md["tokenizer.ggml.eos_token_id"]], "add_bos_token": False,
        "chat_template": md.get("tokenizer.chat_template")}))
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "qwen2" if arch == "qwen2" else "llama", "hidden_size": 64, "intermediate_size": 64,
        "num_hidden_layers": 1, "num_attention_heads": 1, "vocab_size": len(toks),
        "max_position_embeddings": 128}))
    a, b = specdec.Tokenizer.from_file(path), specdec.Tokenizer.from_file(str(tmp_path))
    hf = tokenizers.Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert (b.kind, b.pre) == ("bpe", pre)
    rng = random.Random(1)
    texts = ["def f(x):\n    return x**2  # 12345\n", "Führer café 中文 🦙", "it's we'll   x\r\n"]
    texts += ["".join(rng.choice("aZ09 \t\n.,'é中🦙") for _ in range(rng.randint(1, 30))) for _ in range(300)]
    for t in texts:
        assert b.encode(t, add_special=False) == a.encode(t, add_special=False) == hf.encode(t).ids, t
    assert b.eos_token_ids == a.eos_token_ids
    assert b.chat_template == a.chat_template


def test_sentencepiece_tokenizer_json_of_a_real_vocabulary(tmp_path, real_model):
    """Gemma 3's SentencePiece vocabulary (262k pieces, scores) as tokenizer.json with the merges
    transformers derives from it: the directory tokenizes as the GGUF file does."""
    path = real_model("gemma-3-270m-q4_k_m")
    md = specdec.read_gguf(path)["metadata"]
    toks = md["tokenizer.ggml.tokens"]
    (tmp_path / "tokenizer.json").write_text(json.dumps(tokenizer_json(md)), encoding="utf-8")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": toks[md["tokenizer.ggml.bos_token_id"]], "eos_token": toks[md["tokenizer.ggml.eos_token_id"]],
        "add_bos_token": True, "chat_template": md.get("tokenizer.chat_template")}))
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 1,
        "num_attention_heads": 1, "vocab_size": len(toks), "max_position_embeddings": 128}))
    a, b = specdec.Tokenizer.from_file(path), specdec.Tokenizer.from_file(str(tmp_path))
    assert (b.kind, b.bos_token_id, b.add_bos, b.chat_template) == ("spm", a.bos_token_id, True, a.chat_template)
    assert b.eos_token_ids == a.eos_token_ids
    rng = random.Random(2)
    texts = PROMPTS + ["def f(x):\n    return x**2\n", "Führer café 中文 日本語 🦙", "  many   spaces  "]
    texts += ["".join(rng.choice("aZ09 \t\n.,'éü中文🦙") for _ in range(rng.randint(1, 30))) for _ in range(300)]
    for t in texts:
        assert b.encode(t) == a.encode(t), t


def test_inspect_and_generate_cli(tmp_path, capsys):
    g, d = _pair(tmp_path, "qwen2", "F16", 2, chat_template=CHATML)
    assert cli.main(["inspect", d]) == 0
    out = capsys.readouterr().out
    assert "format        hf" in out and "architecture  qwen2" in out and "F16" in out
    assert "tokenizer     llama" in out and "chat templates default" in out
    texts = []
    for path in (g, d):
        assert cli.main(["generate", "--model", path, "--prompt", "hello world", "--max-tokens", "12",
                         "--temperature", "0", "--max-model-len", "96"]) == 0
        texts.append(capsys.readouterr().out)
    assert texts[0] == texts[1] and len(texts[0]) > len("hello world")


def test_dflash_drafter_with_an_hf_target(tmp_path):
    """A DFlash drafter directory beside an HF target: the same tokens as with the GGUF target."""
    g, d = _pair(tmp_path, "qwen3", "F32")
    drafter = write_random_dflash(tmp_path / "drafter", g, seed=1, block_size=4)
    spec = {"method": "dflash", "model": str(drafter), "num_speculative_tokens": 3}
    want = _greedy(g)
    assert _greedy(d, speculative_config=spec) == want


def test_hf_directory_as_a_draft_model(tmp_path):
    """An HF directory drafts for a GGUF target (the vocabularies are checked to agree): the
    target's own tokens, and most drafts accepted (the drafter is the target's twin)."""
    g, d = _pair(tmp_path, "qwen2", "F32")
    want = _greedy(g)
    spec = {"method": "draft_model", "model": d, "num_speculative_tokens": 3}
    llm = specdec.LLM(g, max_model_len=96, kv_cache_memory_bytes="8MiB", max_num_seqs=4, progress=False,
                      speculative_config=spec)
    params = specdec.SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)
    assert [o.outputs[0].token_ids for o in llm.generate(PROMPTS, params)] == want
    m = llm.last_metrics
    assert m["num_accepted_tokens"] > 0.9 * m["num_draft_tokens"] > 0


def _expect(exc, match, d):
    with pytest.raises(exc, match=match):
        specdec.LLM(str(d), max_model_len=64, kv_cache_memory_bytes="4MiB", progress=False)


def test_bad_directories_are_refused_with_the_file_and_field(tmp_path):
    g, d = _pair(tmp_path, "qwen2", "F32", 2)
    d = Path(d)
    base = tmp_path / "base"
    shutil.copytree(d, base)

    def variant(name):
        v = tmp_path / name
        shutil.copytree(base, v)
        return v

    v = variant("no-tokenizer")
    (v / "tokenizer.json").unlink()
    _expect(ValueError, "tokenizer.json", v)
    v = variant("no-weights")
    for f in v.glob("*.safetensors*"):
        f.unlink()
    _expect(ValueError, "model.safetensors", v)
    v = variant("bad-index")
    idx = json.loads((v / "model.safetensors.index.json").read_text())
    name = next(iter(idx["weight_map"]))
    idx["weight_map"][name] = "../elsewhere.safetensors"
    (v / "model.safetensors.index.json").write_text(json.dumps(idx))
    _expect(ValueError, "weight_map.*a file name in the model's directory", v)
    shard = json.loads((base / "model.safetensors.index.json").read_text())["weight_map"][name]
    idx["weight_map"][name] = ("model-00002-of-00002.safetensors" if shard.startswith("model-00001")
                               else "model-00001-of-00002.safetensors")
    (v / "model.safetensors.index.json").write_text(json.dumps(idx))
    _expect(specdec.FormatError, f"tensor {name} is mapped to .*which does not hold it", v)
    v = variant("f64")
    for f in v.glob("*.safetensors"):
        f.unlink()
    (v / "model.safetensors.index.json").unlink()
    write_safetensors(v / "model.safetensors", [("model.embed_tokens.weight", "F64", (2, 2), np.zeros(4).tobytes())])
    _expect(specdec.UnsupportedError, "model.embed_tokens.weight is stored as F64; F32, F16 and BF16", v)
    v = variant("untied-no-head")
    cfg = json.loads((v / "config.json").read_text())
    idx = json.loads((v / "model.safetensors.index.json").read_text())
    assert "lm_head.weight" in idx["weight_map"]  # qwen2 twins have a separate head
    del idx["weight_map"]["lm_head.weight"]
    (v / "model.safetensors.index.json").write_text(json.dumps(idx))
    _expect(ValueError, "tie_word_embeddings.*lm_head.weight present", v)
    v = variant("unigram")
    tj = json.loads((v / "tokenizer.json").read_text())
    tj["model"]["type"] = "Unigram"
    (v / "tokenizer.json").write_text(json.dumps(tj))
    _expect(specdec.UnsupportedError, "model.type = 'Unigram' is not supported; supported: BPE", v)
    v = variant("added-tokens")
    tj = json.loads((v / "tokenizer.json").read_text())
    tj["added_tokens"] = [{"id": "1", "content": "<s>"}]
    (v / "tokenizer.json").write_text(json.dumps(tj))
    _expect(ValueError, "tokenizer.json added_tokens\\[\\].*\"id\": integer", v)
    tj["added_tokens"] = []
    tj["model"]["merges"] = [7]
    (v / "tokenizer.json").write_text(json.dumps(tj))
    _expect(ValueError, "model.merges\\[\\]", v)
    v = variant("gen-eos")
    (v / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 100000]}))
    _expect(ValueError, "generation_config.json eos_token_id.*token ids in \\[0, 320\\)", v)
    v = variant("deepseek")
    cfg.update(model_type="deepseek_v2", kv_lora_rank=64, qk_nope_head_dim=16, qk_rope_head_dim=16, v_head_dim=16)
    (v / "config.json").write_text(json.dumps(cfg))
    _expect(specdec.UnsupportedError, "deepseek_v2 runs from GGUF only", v)
    with pytest.raises(ValueError, match="is a directory.*no config.json"):
        specdec.resolve_model(str(tmp_path))
