#!/usr/bin/env python3
"""Writes tests/data/vocab/ggml-vocab-nomic-bert-moe.json: llama.cpp's own token ids for the
Unigram (UGM, `tokenizer.ggml.model = t5`) vocabulary of the pinned llama-cpp-python sdist, which
ships that vocabulary without .inp/.out vectors. tests/python/test_vocab_sdist.py compares
specdec's tokenizer with them; the test needs no llama.cpp.

Which binary: a small program against libllama's public API (scripts/llamacpp_tokenize_vectors.cpp,
llama_tokenize and llama_detokenize with the vocabulary loaded vocab_only, as llama.cpp's
test-tokenizer-0 and llama-tokenize load it), compiled here against the peer's llama.cpp source
tree and the libllama.so of its build (bench/setup_peer.sh builds both):

    python3 scripts/gen_ugm_vectors.py \\
        --llama-src  build/peer-llama.cpp/src/vendor/llama.cpp \\
        --llama-libs build/peer-llama.cpp/build/bin

The texts are those of the sdist's standard vector file (ggml-vocab-llama-spm.gguf.inp, the same
for every vocabulary) plus EXTRA_TEXTS below. For each text the file holds the ids of
llama_tokenize with add_special=false, parse_special=false (what the sdist's .out files hold), with
parse_special=true, with add_special=true, and the text of llama_detokenize(ids,
remove_special=false, unparse_special=false). A text or decoded text that is not valid UTF-8 is
stored as hex ("text_hex", "decoded_hex").

Spot check with llama.cpp's own tool (same ids; --no-bos means add_special=false, and
llama-tokenize parses special tokens unless --no-parse-special):

    build/peer-llama.cpp/build/bin/llama-tokenize -m VOCAB --ids --log-disable --no-bos \\
        --no-parse-special -p 'Hello world'
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "python"))

from llamacpp_sdist import models_dir  # noqa: E402  (fetches the pinned sdist once)

VOCAB = "ggml-vocab-nomic-bert-moe.gguf"
OUT = ROOT / "tests" / "data" / "vocab" / (VOCAB[:-len(".gguf")] + ".json")

# Hard cases for the normaliser (NFKC-style charsmap, white space), the Viterbi search, unknown
# characters, special tokens (with and without parse_special; <mask> strips white space before
# it for this architecture) and bytes that are not UTF-8.
EXTRA_TEXTS: list[str | bytes] = [
    "Hello   world", "  leading and trailing  ", "a\tb\nc\r\nd", "tab\t\tand\n\nnewlines\n",
    "\u3000ideographic\u3000space", "non\u00a0breaking\u2009thin\u202fspaces",
    "Ｈｅｌｌｏ　ＷＯＲＬＤ　１２３！", "ﬁne ﬂow ﬀ ﬃ ﬄ", "①②③ ⑴ ⒈ Ⅻ ⅻ", "㍻ ㎏ ㎞ ™ ℃ ½ ¼",
    "x² H₂O e⁻ ᵃ", "…‥ — – ‐", "Å Å Å é é", "\u0301a\u0308", "ｶﾀｶﾅ ﾊﾟﾋﾟ", "ß ẞ ı İ ŉ ǆ",
    "日本語のテキスト、中文文本。한국어 텍스트", "𠀀𪚥 龘", "مرحبا بالعالم", "नमस्ते दुनिया",
    "สวัสดีชาวโลก", "Γειά σου Κόσμε", "שָׁלוֹם \u200fעולם\u200e", "👍🏽 👨‍👩‍👧 🇯🇵 ❤️ 🫠",
    "\ufffd replacement", "\ufeffBOM at start", "zero\u200bwidth\u200cjoin\u200dx", "soft\u00adhyphen",
    "nul\x00byte", "ctrl\x01\x07\x1b\x7f\u0085\u009f", "\ue000\uf8ff private", "\uffff\ufffe nonchar",
    "\u2581 lower eighth ▁▁block", "[PAD250001] [PAD250046]x",
    "pneumonoultramicroscopicsilicovolcanoconiosis",
    "The quick brown fox jumps over the lazy dog.", "<s>Hello</s>", "<s> Hello </s>", "<mask>",
    "Hello <mask> world", "Hello   <mask>", "\t<mask>\t", "a<mask>b", "<unk> <pad>", "</s></s>",
    "<s><s>", "<mask><mask> x", "< s > <ma sk>", "<MASK> <S>",
    b"\xff\xfe abc", b"caf\xc3", b"\xc3\x28 x", b"\xed\xa0\x80 surrogate", b"\xf4\x90\x80\x80 big",
    b"\xc0\xaf overlong", b"\x80\x80 continuation", b"ok\xf0\x9f\xa6",
]


def read_inputs(path: Path) -> list[str]:
    raw = path.read_bytes().decode("utf-8")
    return raw.split("\n__ggml_vocab_test__\n")


def compile_helper(llama_src: Path, llama_libs: Path, out: Path) -> None:
    source = ROOT / "scripts" / "llamacpp_tokenize_vectors.cpp"
    cmd = ["c++", "-std=c++17", "-O1", f"-I{llama_src / 'include'}",
           f"-I{llama_src / 'ggml' / 'include'}", str(source),
           f"-L{llama_libs}", "-lllama", "-lggml", "-lggml-base", f"-Wl,-rpath,{llama_libs}",
           "-o", str(out)]
    subprocess.run(cmd, check=True)


def ids_of(field: str) -> list[int]:
    return [int(x) for x in field.split()]


def text_entry(key: str, data: bytes) -> dict:
    try:
        return {key: data.decode("utf-8")}
    except UnicodeDecodeError:
        return {key + "_hex": data.hex()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-src", type=Path, required=True, help="llama.cpp source tree")
    ap.add_argument("--llama-libs", type=Path, required=True, help="folder of its libllama.so")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()

    standard = read_inputs(models_dir() / "ggml-vocab-llama-spm.gguf.inp")
    texts: list[bytes] = [t.encode("utf-8") for t in standard]
    texts += [t if isinstance(t, bytes) else t.encode("utf-8") for t in EXTRA_TEXTS]
    with tempfile.TemporaryDirectory() as tmp:
        helper = Path(tmp) / "llamacpp_tokenize_vectors"
        compile_helper(args.llama_src, args.llama_libs, helper)
        run = subprocess.run([str(helper), str(models_dir() / VOCAB)], check=True,
                             input="".join(t.hex() + "\n" for t in texts).encode(), capture_output=True)
    lines = run.stdout.decode().splitlines()
    assert len(lines) == len(texts), (len(lines), len(texts))
    cases = []
    for text, line in zip(texts, lines):
        plain, special, added, decoded = (f.strip() for f in line.split("|"))
        case = text_entry("text", text)
        case.update(ids=ids_of(plain), ids_parse_special=ids_of(special), ids_add_special=ids_of(added))
        case.update(text_entry("decoded", bytes.fromhex(decoded)))
        cases.append(case)
    head = {"vocab": VOCAB,
            "source": "llama.cpp of llama-cpp-python 0.3.36 (scripts/gen_ugm_vectors.py)"}
    body = ",\n".join(json.dumps(c, ensure_ascii=False) for c in cases)  # one case a line
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(head, ensure_ascii=False)[:-1] + ', "cases": [\n' + body + "\n]}\n",
                        encoding="utf-8")
    print(f"{args.out}: {len(cases)} cases")


if __name__ == "__main__":
    main()
