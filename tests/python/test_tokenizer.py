"""specdec.Tokenizer: llama.cpp's vocab test vectors through Python, and the real models' own
vocabularies (SmolLM2 BPE `smollm`, Gemma 3 SPM 262144, Qwen2.5 BPE `qwen2` 151936): token ids
equal an independent slow reference (tokenizer_reference.py), round trips, streaming, special
tokens, end-of-generation ids and chat templates."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import specdec
from llamacpp_sdist import read_vectors as read_vector_file
from tokenizer_reference import Reference

VOCAB_FILES = ["llama-spm", "phi-3", "gpt-2", "starcoder", "deepseek-coder"]

SMOLLM2 = "smollm2-135m-instruct-q4_1"
GEMMA3 = "gemma-3-270m-q4_k_m"
QWEN_05B = "qwen2.5-coder-0.5b-instruct-q4_k_m"
QWEN_15B = "qwen2.5-coder-1.5b-instruct-q4_k_m"

CORPUS = [
    "",
    " ",
    "Hello world",
    "Hello, world! How's it going? I'm fine; we'll see. DON'T SHOUT, Y'ALL'D",
    "The quick brown fox jumps over the lazy dog. 0123456789",
    "Ünïcödé façade naïve café — “quotes” ‘single’ … ¿Qué tal? Straße",
    "Привет, мир! Καλημέρα κόσμε. مرحبا بالعالم. שלום עולם. नमस्ते दुनिया. สวัสดีชาวโลก",
    "你好，世界！今天天气很好。日本語のテキスト、カタカナ。한국어 텍스트입니다.",
    "🦙🚀 😶‍🌫️ 👨‍👩‍👧‍👦 ✅ 🇺🇸 👍🏽 ❤️ 🤖💬",
    "def fib(n: int) -> int:\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "#include <vector>\nint main() {\n\tstd::vector<int> v{1, 2, 3};\n\treturn v[0] >= 0 ? 0 : -1;\n}\n",
    "SELECT id, name FROM users WHERE age >= 21 AND name LIKE '%smith%';",
    '{"key": [1, 2.5, -3e10, null, true], "nested": {"a": "b\\n"}}',
    "a  b   c    d     e\n\n\n   leading and trailing   \t\t\t \t \n \r\n ",
    "\u00a0\u2003\u3000\u2028\u0085 non-ASCII spaces\u200b zero-width",
    "3.14159 1,000,000 0x1F 1e-9 ٣٤٥ ²³ ½ 12345678901234567890",
    "e\u0301 a\u0308 combining marks देवनागरी",
    "'s 'S 'll 'LL don't DON'T it'S we'Re you'VE",
    "<div class=\"x\">Hi</div><br/>&amp; <table><tr><td>1</td></tr></table> </s>",
    "x" * 300 + " " * 40 + "\n" * 30,
    "\x01\x02\x1f\x7f control bytes \ufffd replacement",
]


def read_vectors(vocab_dir, name):
    vectors = read_vector_file(vocab_dir / f"ggml-vocab-{name}.gguf")
    assert len(vectors) >= 40
    return vectors


@pytest.mark.parametrize("name", VOCAB_FILES)
def test_vocab_vectors(vocab_dir, name):
    tok = specdec.Tokenizer.from_file(str(vocab_dir / f"ggml-vocab-{name}.gguf"))
    for text, ids in read_vectors(vocab_dir, name):
        assert tok.encode(text, add_special=False, parse_special=False) == ids, repr(text)
        assert tok.decode(ids) == text


@pytest.fixture(scope="module")
def models(real_model):
    cache = {}

    def get(name):
        if name not in cache:
            path = real_model(name)
            cache[name] = (specdec.Tokenizer.from_file(path), path)
        return cache[name]
    return get


@pytest.mark.parametrize("name,kind,pre,vocab_size,bos,eos,add_bos,eog", [
    (SMOLLM2, "bpe", "smollm", 49152, 1, 2, False, [0, 2, 4]),
    (GEMMA3, "spm", "default", 262144, 2, 1, True, [1, 106]),
    (QWEN_05B, "bpe", "qwen2", 151936, 151643, 151645, False,
     [151643, 151645, 151662, 151663, 151664]),
])
def test_real_vocab_properties(models, name, kind, pre, vocab_size, bos, eos, add_bos, eog):
    tok, _ = models(name)
    assert (tok.kind, tok.pre, tok.vocab_size) == (kind, pre, vocab_size)
    assert (tok.bos_token_id, tok.eos_token_id, tok.add_bos, tok.add_eos) == (bos, eos, add_bos, False)
    assert tok.eos_token_ids == eog
    assert all(tok.is_eog(i) for i in eog)


@pytest.mark.parametrize("name", [SMOLLM2, GEMMA3, QWEN_05B])
def test_real_vocab_matches_reference_and_round_trips(models, name):
    tok, path = models(name)
    ref = Reference(path)
    for text in CORPUS:
        ids = tok.encode(text, add_special=False)
        assert ids == ref.encode(text), repr(text)
        assert tok.decode(ids) == text
        with_special = tok.encode(text, add_special=True)
        assert with_special == ([tok.bos_token_id] if tok.add_bos else []) + ids
        assert tok.decode(with_special) == text
        stream = tok.stream_decoder()
        assert "".join(stream.push(i) for i in with_special) + stream.flush() == text


def test_known_ids_verified_by_the_reference(models):
    tok, _ = models(QWEN_05B)
    assert tok.encode("Hello world") == [9707, 1879]
    assert [tok.token_text(i) for i in tok.encode("Hello world")] == ["Hello", "\u0120world"]
    assert tok.encode("12345") == [16, 17, 18, 19, 20]  # qwen2 splits every digit
    smol, _ = models(SMOLLM2)
    assert [smol.token_text(i) for i in smol.encode("Hello world")] == ["Hello", "\u0120world"]
    gemma, _ = models(GEMMA3)
    assert gemma.encode("Hello world") == [2] + [gemma.token_id("Hello"), gemma.token_id("\u2581world")]


def test_special_tokens_found_when_parsing_specials(models):
    qwen, _ = models(QWEN_05B)
    text = "<|im_start|>user\nHi<|im_end|>\n"
    ids = qwen.encode(text, add_special=False, parse_special=True)
    assert ids[0] == 151644 and 151645 in ids
    plain = qwen.encode(text, add_special=False, parse_special=False)
    assert 151644 not in plain and 151645 not in plain
    assert qwen.decode(ids, special=True) == text
    assert qwen.decode(ids) == "user\nHi\n"
    # User-defined tokens are recognised without parse_special.
    assert qwen.encode("<tool_call>", add_special=False) == [qwen.token_id("<tool_call>")]

    gemma, _ = models(GEMMA3)
    ids = gemma.encode("<start_of_turn>user\nHi<end_of_turn>\n", add_special=True, parse_special=True)
    assert ids[:2] == [2, 105] and 106 in ids
    assert 105 not in gemma.encode("<start_of_turn>user", parse_special=False)
    assert gemma.token_text(105) == "<start_of_turn>"

    smol, _ = models(SMOLLM2)
    assert smol.encode("<|im_start|>x<|im_end|>", parse_special=True) == [1, smol.token_id("x"), 2]


def test_chat_templates(models):
    smol, _ = models(SMOLLM2)
    msgs = [{"role": "user", "content": "What is 2+2?"}]
    assert smol.apply_chat_template(msgs) == (
        "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
        "Face<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n")
    qwen, _ = models(QWEN_05B)
    assert qwen.apply_chat_template(msgs) == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
        "assistant.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n")
    convo = [{"role": "system", "content": "Answer in one word."}, *msgs,
             {"role": "assistant", "content": "Four"}, {"role": "user", "content": "And 3+3?"}]
    assert qwen.apply_chat_template(convo, add_generation_prompt=False) == (
        "<|im_start|>system\nAnswer in one word.<|im_end|>\n<|im_start|>user\nWhat is 2+2?"
        "<|im_end|>\n<|im_start|>assistant\nFour<|im_end|>\n<|im_start|>user\nAnd 3+3?<|im_end|>\n")
    prompt_ids = qwen.encode(qwen.apply_chat_template(msgs), add_special=True, parse_special=True)
    assert prompt_ids[:3] == [151644, qwen.token_id("system"), qwen.token_id("\u010a")]
    assert prompt_ids[-3:] == [151644, qwen.token_id("assistant"), qwen.token_id("\u010a")]
    # the template runs as written: Qwen2.5's tool turns
    assert qwen.apply_chat_template([{"role": "user", "content": "x"},
                                     {"role": "tool", "content": "{}"}]).endswith(
        "<|im_start|>user\n<tool_response>\n{}\n</tool_response><|im_end|>\n"
        "<|im_start|>assistant\n")
    with pytest.raises(ValueError, match="role"):
        qwen.apply_chat_template([{"content": "x"}])
    gemma, _ = models(GEMMA3)
    assert gemma.chat_template is None
    with pytest.raises(ValueError, match="no chat template"):
        gemma.apply_chat_template(msgs)


def test_qwen_05b_and_15b_vocabularies_are_identical(models):
    small, small_path = models(QWEN_05B)
    large, large_path = models(QWEN_15B)
    meta_small = specdec.read_gguf(small_path)["metadata"]
    meta_large = specdec.read_gguf(large_path)["metadata"]
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges",
                "tokenizer.ggml.pre", "tokenizer.ggml.model", "tokenizer.ggml.eos_token_id",
                "tokenizer.ggml.bos_token_id"):
        assert meta_small[key] == meta_large[key], key
    assert small.eos_token_ids == large.eos_token_ids
    for text in CORPUS:
        assert small.encode(text, parse_special=True) == large.encode(text, parse_special=True)


def test_invalid_utf8_bytes(models):
    qwen, _ = models(QWEN_05B)
    ids = qwen.encode(b"ok \xff\xe2\x82 end")
    assert qwen.decode(ids) == "ok \ufffd\ufffd\ufffd end"
    gemma, _ = models(GEMMA3)
    ids = gemma.encode(b"ok \xff\xe2\x82 end", add_special=False)
    assert gemma.decode_bytes(ids) == b"ok \xff\xe2\x82 end"  # byte fallback keeps the bytes
    stream = gemma.stream_decoder()
    assert "".join(stream.push(i) for i in ids) + stream.flush() == gemma.decode(ids)


def test_token_pieces_and_streaming_hold_back_partial_characters(models):
    gemma, _ = models(GEMMA3)
    ids = gemma.encode("\U0001F999", add_special=False)  # 🦙: byte fallback if not a token
    pieces = [gemma.token_to_piece(i) for i in ids]
    assert b"".join(pieces) == "\U0001F999".encode()
    stream = gemma.stream_decoder()
    outs = [stream.push(i) for i in ids]
    assert "".join(outs) + stream.flush() == "\U0001F999"
    assert all(o in ("", "\U0001F999") for o in outs)


def test_errors(tmp_path, vocab_dir):
    with pytest.raises(ValueError):
        specdec.Tokenizer.from_file(str(tmp_path / "no-such-model.gguf"))
    data = (vocab_dir / "ggml-vocab-gpt-2.gguf").read_bytes()
    bad = tmp_path / "truncated.gguf"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(specdec.FormatError):
        specdec.Tokenizer.from_file(str(bad))
    tok = specdec.Tokenizer.from_file(str(vocab_dir / "ggml-vocab-gpt-2.gguf"))
    with pytest.raises(ValueError, match="token id"):
        tok.decode([50257])
    with pytest.raises(ValueError, match="text = 123: a str or bytes"):
        tok.encode(123)
    with pytest.raises(ValueError, match="lone surrogate U\\+D800"):
        tok.encode("a\ud800")


def test_benchmark_smoke(tmp_path, vocab_dir):
    """bench/tokenizer_bench.py keeps running (no timing is checked)."""
    import json
    import subprocess
    import sys
    out = tmp_path / "bench.json"
    bench = Path(__file__).resolve().parents[2] / "bench" / "tokenizer_bench.py"
    subprocess.run([sys.executable, str(bench), "--quick", "--out", str(out),
                    "--models", str(vocab_dir / "ggml-vocab-gpt-2.gguf")], check=True,
                   capture_output=True)
    result = json.loads(out.read_text())["results"][0]
    assert result["round_trip_exact"] and result["tokens"] > 1000
