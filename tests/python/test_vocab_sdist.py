"""Every vocabulary test file of llama.cpp's pinned source tree (llama-cpp-python sdist,
`models/ggml-vocab-*.gguf` with `.inp` / `.out` token vectors): the ids specdec's tokenizer
gives must be llama.cpp's, and a vocabulary without vectors must load and round-trip.

Vocabularies whose tokenizer model or pre-tokenizer specdec does not implement yet are listed in
UNSUPPORTED (issue 24): each must still be refused with an UnsupportedError naming what is
supported, and one that starts to load must be moved out of the list (the test says so)."""

from __future__ import annotations

import pytest

import specdec
from llamacpp_sdist import models_dir, read_vectors

# vocabularies specdec refuses with an UnsupportedError (their tokenizer model or pre-tokenizer is
# not among specdec's: the rest of issue 24, item 1)
UNSUPPORTED = {"nomic-bert-moe"}
SAMPLES = ["Hello world", " leading space", "12345 digits 3.14", "don't  stop\n\nnow", "naïve café 🦙",
           "def f(x):\n\treturn x * 2\n"]


@pytest.fixture(scope="module")
def vocab_files():
    files = sorted(models_dir().glob("ggml-vocab-*.gguf"))
    assert len(files) >= 19, files  # the sdist has 19
    return files


def _name(path) -> str:
    return path.name[len("ggml-vocab-"):-len(".gguf")]


def test_every_vocabulary_with_vectors_gives_llamacpps_ids(vocab_files):
    checked, failures = [], []
    for path in vocab_files:
        name = _name(path)
        if not path.with_name(path.name + ".inp").exists():
            continue
        if name in UNSUPPORTED:
            with pytest.raises(specdec.UnsupportedError, match="supported"):
                specdec.Tokenizer.from_file(str(path))
            continue
        tok = specdec.Tokenizer.from_file(str(path))
        vectors = read_vectors(path)
        for text, ids in vectors:
            got = tok.encode(text, add_special=False, parse_special=False)
            if got != ids:
                failures.append((name, text[:40], got[:12], ids[:12]))
            elif tok.kind == "bpe" and tok.decode(ids) != text:
                failures.append((name, text[:40], "decode", tok.decode(ids)[:40]))
        checked.append((name, len(vectors)))
    assert not failures, failures[:5]
    assert {"llama-bpe", "qwen2", "gpt-2", "llama-spm", "starcoder", "deepseek-coder", "phi-3",
            "mpt", "refact", "command-r", "deepseek-llm", "falcon", "qwen35", "gemma-4", "bert-bge"} <= {
                n for n, _ in checked}, checked


def test_vocabularies_without_vectors_load_and_round_trip(vocab_files):
    seen = 0
    for path in vocab_files:
        name = _name(path)
        if path.with_name(path.name + ".inp").exists():
            continue
        if name in UNSUPPORTED:
            with pytest.raises(specdec.UnsupportedError):
                specdec.Tokenizer.from_file(str(path))
            continue
        tok = specdec.Tokenizer.from_file(str(path))
        for text in SAMPLES:
            ids = tok.encode(text, add_special=False)
            assert ids and all(0 <= i < tok.vocab_size for i in ids), (name, text)
            back = tok.decode(ids)
            # SentencePiece vocabularies without byte fallback may lose characters they lack
            assert back == text or tok.kind == "spm", (name, text, back)
        seen += 1
    assert seen >= 3  # aquila, baichuan, gpt-neox


def test_unsupported_list_is_current(vocab_files):
    """A vocabulary listed as unsupported that now loads must leave the list."""
    names = {_name(p) for p in vocab_files}
    assert UNSUPPORTED <= names, UNSUPPORTED - names
    for path in vocab_files:
        if _name(path) in UNSUPPORTED:
            try:
                specdec.Tokenizer.from_file(str(path))
            except specdec.UnsupportedError:
                continue
            pytest.fail(f"{_name(path)} now loads: take it out of UNSUPPORTED")
