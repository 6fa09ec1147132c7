import json
import os
import shutil
import struct
from pathlib import Path

import pytest

import specdec

from paths import STORIES


def test_reads_the_real_gguf():
    f = specdec.read_gguf(STORIES)
    assert f["version"] in (2, 3)
    md = f["metadata"]
    assert md["general.architecture"] == "llama"
    assert md["llama.block_count"] == 5 and md["llama.embedding_length"] == 64
    assert len(md["tokenizer.ggml.tokens"]) == 512
    assert len(f["tensors"]) == 48
    for t in f["tensors"]:
        assert f["data_offset"] + t["offset"] + t["size_bytes"] <= f["file_size"]


def test_truncated_gguf_is_a_format_error(tmp_path):
    data = open(STORIES, "rb").read()
    for cut in (3, 100, 5000, len(data) - 1):
        path = tmp_path / f"cut{cut}.gguf"
        path.write_bytes(data[:cut])
        with pytest.raises(specdec.FormatError):
            specdec.read_gguf(str(path))
    assert issubclass(specdec.FormatError, ValueError)
    with pytest.raises(ValueError, match="path"):
        specdec.read_gguf(str(tmp_path / "missing.gguf"))


def write_safetensors(path, header, data=b""):
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


def test_safetensors_reader(tmp_path):
    good = tmp_path / "good.safetensors"
    write_safetensors(good, {"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
                             "__metadata__": {"format": "pt"}}, bytes(16))
    f = specdec.read_safetensors(str(good))
    assert f["tensors"][0]["name"] == "w" and f["tensors"][0]["shape"] == [2, 2]
    assert f["metadata"] == {"format": "pt"}
    bad = tmp_path / "bad.safetensors"
    write_safetensors(bad, {"w": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 16]}}, bytes(16))
    with pytest.raises(specdec.FormatError, match='tensor "w".*expected 64 bytes'):
        specdec.read_safetensors(str(bad))


def test_non_utf8_keys_and_strings_are_format_errors(tmp_path):
    """GGUF strings are UTF-8 by the format: a key or string that is not is a FormatError naming
    the key, the byte and the file, never a UnicodeDecodeError."""
    def s(b: bytes) -> bytes:
        return struct.pack("<Q", len(b)) + b
    path = tmp_path / "bad.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + s(b"bad\xffkey")
                     + struct.pack("<I", 8) + s(b"v"))
    with pytest.raises(specdec.FormatError, match=r"metadata #0: key at byte 24 is not valid "
                       r"UTF-8 \(byte 0xff at byte 35\).*bad.gguf"):
        specdec.read_gguf(str(path))
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + s(b"good.key")
                     + struct.pack("<I", 8) + s(b"v\xfe"))
    with pytest.raises(specdec.FormatError, match="metadata key 'good.key': string at byte 44 is "
                       "not valid UTF-8"):
        specdec.read_gguf(str(path))


# ---- hostile Hugging Face directories (issue 34, items 4 to 6) ----

def _twin(tmp_path, arch="qwen2", fmt="F32"):
    from specdec.testing import write_random_model
    from specdec.testing.hf_twin import write_hf_twin
    g = write_random_model(tmp_path / f"{arch}.gguf", arch, fmt, seed=3)
    return write_hf_twin(g, tmp_path / f"{arch}-hf", num_shards=1)


def _inspect_error(capsys, path) -> str:
    """The one-line error `specdec inspect` prints (a MemoryError or a traceback fails the test)."""
    from specdec import cli
    assert cli.main(["inspect", str(path)]) != 0
    err = capsys.readouterr().err.strip()
    assert err and "\n" not in err and "Traceback" not in err, err
    return err


def test_inspect_answers_for_a_safetensors_header_of_300000_entries(tmp_path, capsys):
    """A valid 20 MB header of 300,000 entries never answered (the header walk was quadratic):
    the tensors the architecture does not use are read, counted and left alone."""
    from specdec import cli
    from specdec.testing.hf_twin import write_safetensors
    d = Path(_twin(tmp_path))
    header_len = int.from_bytes((d / "model.safetensors").read_bytes()[:8], "little")
    raw = (d / "model.safetensors").read_bytes()
    header = json.loads(raw[8:8 + header_len])
    tensors = [(n, e["dtype"], tuple(e["shape"]), raw[8 + header_len + e["data_offsets"][0]:
                                                    8 + header_len + e["data_offsets"][1]])
               for n, e in header.items() if n != "__metadata__"]
    extra = [(f"extra.{i}.weight", "F32", (1,), b"\0\0\0\0") for i in range(300000)]
    write_safetensors(d / "model.safetensors", tensors + extra)
    assert (d / "model.safetensors").stat().st_size > 15 << 20
    assert cli.main(["inspect", str(d)]) == 0
    out = capsys.readouterr().out
    assert "format        hf" in out and str(len(tensors) + 300000) in out.replace(",", "")


@pytest.mark.parametrize("field,value,allowed", [
    ("vocab_size", 2 ** 30, r"\[0, 2097152\]"),
    ("hidden_size", 2 ** 30, r"\[0, 131072\]"),
    ("num_hidden_layers", 2 ** 30, r"\[0, 1024\]"),
    ("intermediate_size", 2 ** 30, r"\[0, 1048576\]"),
    ("max_position_embeddings", 2 ** 30, r"\[0, 134217728\]"),
    ("num_attention_heads", 2 ** 30, r"\[0, 4096\]"),
    ("head_dim", 2 ** 30, r"\[0, 16384\]"),
])
def test_huge_sizes_in_config_json_are_one_line_errors(tmp_path, capsys, field, value, allowed):
    """vocab_size = 2^30 ended in MemoryError (the vocabulary was padded to it first): every size
    is bounded before anything is sized from it."""
    d = Path(_twin(tmp_path))
    cfg = json.loads((d / "config.json").read_text())
    cfg[field] = value
    (d / "config.json").write_text(json.dumps(cfg))
    want = rf"{field} = {value}: must be an integer in {allowed} \(in .*config.json\)"
    with pytest.raises(ValueError, match=want):
        specdec.LLM(str(d), max_model_len=64, kv_cache_memory_bytes="4MiB", progress=False)
    with pytest.raises(ValueError, match=want):
        specdec.Tokenizer.from_file(str(d))
    assert field in _inspect_error(capsys, d)


def test_vocab_size_must_be_the_embeddings_rows(tmp_path, capsys):
    """Within the bounds, vocab_size is checked against the embedding's shape before the
    tokenizer pads its vocabulary to it; products of sizes are bounded too."""
    d = Path(_twin(tmp_path))
    cfg = json.loads((d / "config.json").read_text())
    rows = cfg["vocab_size"]
    for field, value in (("vocab_size", 2 ** 21), ("vocab_size", rows - 1), ("hidden_size", 4096)):
        bad = dict(cfg, **{field: value})
        (d / "config.json").write_text(json.dumps(bad))
        want = rf"config.json: {field} = {value}: expected the .* of model.embed_tokens.weight"
        with pytest.raises(specdec.FormatError, match=want):
            specdec.Tokenizer.from_file(str(d))
        with pytest.raises(specdec.FormatError, match=want):
            specdec.LLM(str(d), max_model_len=64, kv_cache_memory_bytes="4MiB", progress=False)
        assert "embed_tokens" in _inspect_error(capsys, d)
    (d / "config.json").write_text(json.dumps(dict(cfg, vocab_size=2 ** 21, hidden_size=2 ** 17)))
    with pytest.raises(ValueError, match=r"embedding elements = 2097152 x 131072 .*at most"):
        specdec.load_model_config(str(d))


def test_big_json_files_are_refused_before_they_are_read(tmp_path, capsys):
    """A 200 MB config.json was parsed whole (1.1 GB peak): small JSON files are capped at 16 MiB."""
    d = Path(_twin(tmp_path))
    cfg = json.loads((d / "config.json").read_text())
    for name in ("config.json", "generation_config.json", "tokenizer_config.json"):
        v = tmp_path / f"big-{name}"
        shutil.copytree(d, v)
        (v / name).write_text(json.dumps(dict(cfg if name == "config.json" else {}, pad="x" * (17 << 20))))
        want = rf"{name}: \d+ bytes, more than the 16777216 bytes \(16 MiB\)"
        with pytest.raises(specdec.FormatError, match=want):
            specdec.LLM(str(v), max_model_len=64, kv_cache_memory_bytes="4MiB", progress=False)
        assert "16 MiB" in _inspect_error(capsys, v)


def _tokenizer_variant(tmp_path, d, name, edit=None, text=None):
    v = tmp_path / name
    shutil.copytree(d, v)
    tj = json.loads((v / "tokenizer.json").read_text())
    if edit:
        edit(tj)
    (v / "tokenizer.json").write_text(text(tj) if text else json.dumps(tj))
    return str(v)


def test_tokenizer_steps_that_would_be_skipped_are_refused(tmp_path):
    """A Split pre-tokenizer, a Replace normalizer other than SentencePiece's spaces, or two tokens
    with one id loaded without a word (and tokenized differently from Hugging Face)."""
    from specdec.testing.hf_twin import tokenizer_json
    spm = Path(_twin(tmp_path, "llama"))
    bpe = tmp_path / "byte-level"  # the twin with a byte-level BPE of GPT-2's 256 byte symbols
    shutil.copytree(spm, bpe)
    chars = [chr(c) for c in range(33, 127)] + [chr(c) for c in range(161, 173)] + [chr(c) for c in range(174, 256)]
    chars += [chr(256 + i) for i in range(256 - len(chars))]
    md = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "qwen2", "tokenizer.ggml.tokens": chars,
          "tokenizer.ggml.token_type": [1] * 256, "tokenizer.ggml.merges": []}
    (bpe / "tokenizer.json").write_text(json.dumps(tokenizer_json(md)))
    (bpe / "tokenizer_config.json").write_text("{}")
    (bpe / "generation_config.json").unlink(missing_ok=True)
    assert specdec.Tokenizer.from_file(str(bpe)).pre == "qwen2"
    assert json.loads((spm / "tokenizer.json").read_text())["normalizer"]["type"] == "Sequence"
    split = {"type": "Split", "pattern": {"Regex": r"\d"}, "behavior": "Isolated", "invert": False}
    cases = [
        (spm, "spm-split", lambda tj: tj.update(pre_tokenizer=split), r"pre_tokenizer step .*Split"),
        (spm, "spm-replace", lambda tj: tj["normalizer"]["normalizers"].append(
            {"type": "Replace", "pattern": {"String": "a"}, "content": "b"}), r"normalizer step .*Replace"),
        (spm, "spm-lowercase", lambda tj: tj.update(normalizer={"type": "Lowercase"}), r"normalizer step .*Lowercase"),
        (bpe, "bpe-replace", lambda tj: tj.update(normalizer={"type": "Replace", "pattern": {"String": "a"},
                                                              "content": "b"}), r"normalizer step .*Replace"),
        (bpe, "bpe-inverted-split", lambda tj: tj["pre_tokenizer"]["pretokenizers"][0].update(invert=True),
         r"pre_tokenizer .*is not supported"),
    ]
    for base, name, edit, message in cases:
        v = _tokenizer_variant(tmp_path, base, name, edit)
        with pytest.raises(specdec.UnsupportedError, match=message):
            specdec.Tokenizer.from_file(v)
    nfc = _tokenizer_variant(tmp_path, bpe, "bpe-nfc", lambda tj: tj.update(normalizer={"type": "NFC"}))
    assert specdec.Tokenizer.from_file(nfc).encode("hello world") == specdec.Tokenizer.from_file(str(bpe)).encode(
        "hello world")

    def same_id(tj):
        vocab = tj["model"]["vocab"]
        a, b = sorted(vocab, key=vocab.get)[10:12]
        vocab[b] = vocab[a]
    v = _tokenizer_variant(tmp_path, bpe, "dup-id", same_id)
    with pytest.raises(specdec.FormatError, match=r"tokenizer.json: tokens .* and .* both have id \d+"):
        specdec.Tokenizer.from_file(v)
    # the same token twice in model.vocab (JSON keeps the last, and one id names nothing)
    first = next(iter(json.loads((bpe / "tokenizer.json").read_text())["model"]["vocab"]))
    v = _tokenizer_variant(tmp_path, bpe, "dup-key", text=lambda tj: json.dumps(tj).replace(
        '"vocab": {', '"vocab": {' + json.dumps(first) + ': 7, ', 1))
    with pytest.raises(specdec.FormatError, match=r'tokenizer.json: not valid JSON: duplicate key'):
        specdec.Tokenizer.from_file(v)
