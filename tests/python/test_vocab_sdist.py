"""Every vocabulary test file of llama.cpp's pinned source tree (llama-cpp-python sdist,
`models/ggml-vocab-*.gguf` with `.inp` / `.out` token vectors): the ids specdec's tokenizer
gives must be llama.cpp's, and a vocabulary without vectors must load and round-trip.

The sdist ships nomic-bert-moe (Unigram, `tokenizer.ggml.model = t5`) without vectors: its ids
from llama.cpp itself are committed in tests/data/vocab/ (scripts/gen_ugm_vectors.py) and checked
with and without special tokens, together with llama.cpp's detokenized text. Every vocabulary of
the sdist loads (specdec refuses none of them any more, issue 24)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import specdec
from llamacpp_sdist import read_vectors

# llama.cpp's ids for the sdist vocabularies that come without vectors (scripts/gen_ugm_vectors.py)
COMMITTED_VECTORS = Path(__file__).resolve().parent.parent / "data" / "vocab"
KINDS = {"spm", "bpe", "wpm", "ugm"}
SAMPLES = ["Hello world", " leading space", "12345 digits 3.14", "don't  stop\n\nnow", "naïve café 🦙",
           "def f(x):\n\treturn x * 2\n"]


@pytest.fixture(scope="module")
def vocab_files(vocab_dir):
    files = sorted(vocab_dir.glob("ggml-vocab-*.gguf"))
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


def _committed(path) -> Path:
    return COMMITTED_VECTORS / (path.name[:-len(".gguf")] + ".json")


def _text(case: dict, key: str) -> bytes:
    return case[key].encode("utf-8") if key in case else bytes.fromhex(case[key + "_hex"])


def test_every_vocabulary_loads(vocab_files):
    """No vocabulary of the sdist is refused: each has one of specdec's tokenizer kinds."""
    kinds = {}
    for path in vocab_files:
        tok = specdec.Tokenizer.from_file(str(path))
        assert tok.kind in KINDS and tok.vocab_size > 0, (path.name, tok.kind)
        kinds[_name(path)] = tok.kind
    assert kinds["nomic-bert-moe"] == "ugm" and kinds["bert-bge"] == "wpm", kinds


def test_committed_vectors_give_llamacpps_ids(vocab_files):
    """The sdist vocabularies without .inp/.out files whose ids from llama.cpp are committed
    (nomic-bert-moe): ids with and without parse_special, with add_special (BOS/EOS as the file
    says), and the text of llama.cpp's llama_detokenize(ids) (Unigram normalisation does not give
    the input back: NFKC-style charsmap, extra white space removed, unknown characters)."""
    checked, failures = {}, []
    for path in vocab_files:
        if not _committed(path).exists():
            continue
        doc = json.loads(_committed(path).read_text(encoding="utf-8"))
        assert doc["vocab"] == path.name
        tok = specdec.Tokenizer.from_file(str(path))
        for case in doc["cases"]:
            text = case["text"] if "text" in case else _text(case, "text")  # str, or bytes
            got = {"ids": tok.encode(text, add_special=False, parse_special=False),
                   "ids_parse_special": tok.encode(text, add_special=False, parse_special=True),
                   "ids_add_special": tok.encode(text, add_special=True, parse_special=False)}
            for key, ids in got.items():
                if ids != case[key]:
                    failures.append((path.name, text[:40], key, ids[:12], case[key][:12]))
            decoded = tok.decode_bytes(case["ids"])
            if decoded != _text(case, "decoded"):
                failures.append((path.name, text[:40], "decoded", decoded[:40]))
        checked[_name(path)] = len(doc["cases"])
    assert not failures, (len(failures), failures[:5])
    assert checked.get("nomic-bert-moe", 0) >= 100, checked


def test_vocabularies_without_vectors_load_and_round_trip(vocab_files):
    seen = 0
    for path in vocab_files:
        if path.with_name(path.name + ".inp").exists() or _committed(path).exists():
            continue
        name = _name(path)
        tok = specdec.Tokenizer.from_file(str(path))
        for text in SAMPLES:
            ids = tok.encode(text, add_special=False)
            assert ids and all(0 <= i < tok.vocab_size for i in ids), (name, text)
            back = tok.decode(ids)
            # SentencePiece vocabularies without byte fallback may lose characters they lack
            assert back == text or tok.kind == "spm", (name, text, back)
        seen += 1
    assert seen >= 3  # aquila, baichuan, gpt-neox
