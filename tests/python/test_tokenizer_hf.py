"""Byte-level BPE against Hugging Face `tokenizers` (an independent implementation), built from the
same GGUF vocabulary and merges with the pre-tokenizer each model's tokenizer.json declares:
Qwen2.5 (regex split + ByteLevel) and SmolLM2 (individual digits + GPT-2 ByteLevel)."""

import random

import pytest
import tokenizers  # noqa: F401  (test dependency, installed by scripts/setup.sh)

import specdec

QWEN2_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
               r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")


def _hf_tokenizer(path: str):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    md = specdec.read_gguf(path)["metadata"]
    vocab = {t: i for i, t in enumerate(md["tokenizer.ggml.tokens"])}
    merges = [tuple(m.split(" ", 1)) for m in md["tokenizer.ggml.merges"]]
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    if md["tokenizer.ggml.pre"] == "qwen2":
        tk.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        assert md["tokenizer.ggml.pre"] == "smollm"
        tk.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tk.decoder = decoders.ByteLevel()
    return tk


def _corpus() -> list:
    texts = ["Hello world", " leading space", "def f(x):\n    return x**2  # square\n\n\n",
             "1234567890 3.14159 1e-9", "Führer café naïve résumé", "нещо на Български",
             "中文字符测试，标点。", "日本語のテキスト", "한국어 텍스트", "emoji 🦙🚀👍🏽 flags 🇫🇷",
             "tabs\tand\r\nCRLF\r\n", "   many     spaces   ", "it's we'll they'd I'M",
             "<html><body>x</body></html>", "x = [1,2,3]; y = {'a': 1}", "∀x∈ℝ: x² ≥ 0",
             "a\u00a0b\u2009c", "ٱلْعَرَبِيَّة", "    if (a && b) { return -1; }\n"]
    rng = random.Random(1)
    alphabet = "aZ09 \t\n\r.,;:'\"!?-_()[]{}<>/\\|@#$%^&*+=~`éüß中文🦙😀\u00a0\u2028"
    texts += ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40))) for _ in range(1500)]
    return texts


@pytest.mark.parametrize("name", ["qwen2.5-coder-0.5b-instruct-q4_k_m", "smollm2-135m-instruct-q4_1"])
def test_bpe_matches_hf_tokenizers(real_model, name):
    path = real_model(name)
    ref = _hf_tokenizer(path)
    tok = specdec.Tokenizer.from_file(path)
    mismatches = [(t, tok.encode(t, add_special=False), ref.encode(t).ids) for t in _corpus()]
    mismatches = [m for m in mismatches if m[1] != m[2]]
    assert not mismatches, mismatches[:3]
