"""A slow, independent reference tokenizer for the tests: Python's `re` with Unicode classes built
from `unicodedata` for the pre-tokenizer regexes, and naive merge loops (rescan for the best pair
after every merge) for BPE and SPM. Only what the real models need: pre-tokenizers gpt-2,
starcoder/smollm and qwen2, user-defined tokens split out, no control-token parsing."""

from __future__ import annotations

import functools
import re
import unicodedata
from typing import Dict, List, Tuple

import specdec

WHITE_SPACE = set(list(range(0x09, 0x0E)) + [0x20, 0x85, 0xA0, 0x1680] +
                  list(range(0x2000, 0x200B)) + [0x2028, 0x2029, 0x202F, 0x205F, 0x3000])


def _char_class(pred) -> str:
    parts, start = [], None
    for cp in range(0x110001):
        if cp <= 0x10FFFF and pred(cp):
            if start is None:
                start = cp
        elif start is not None:
            a, b = start, cp - 1
            parts.append("\\U%08X" % a if a == b else "\\U%08X-\\U%08X" % (a, b))
            start = None
    return "".join(parts)


@functools.lru_cache(maxsize=None)
def _regexes() -> Dict[str, List["re.Pattern[str]"]]:
    cat = lambda cp: unicodedata.category(chr(cp))  # noqa: E731
    L = _char_class(lambda c: cat(c)[0] == "L")
    N = _char_class(lambda c: cat(c)[0] == "N")
    S = _char_class(lambda c: c in WHITE_SPACE)
    gpt2 = rf"'s|'t|'re|'ve|'m|'ll|'d| ?[{L}]+| ?[{N}]+| ?[^{S}{L}{N}]+|[{S}]+(?![^{S}])"
    qwen2 = (rf"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n{L}{N}]?[{L}]+"
             rf"|[{N}]| ?[^{S}{L}{N}]+[\r\n]*|[{S}]*[\r\n]+|[{S}]+(?![^{S}])|[{S}]+")
    stages = {"gpt-2": [gpt2], "starcoder": [rf"[{N}]", gpt2], "smollm": [rf"[{N}]", gpt2],
              "qwen2": [qwen2]}
    return {k: [re.compile(p) for p in v] for k, v in stages.items()}


def pre_tokenize(pre: str, text: str) -> List[str]:
    pieces = [text] if text else []
    for rx in _regexes()[pre]:
        out = []
        for piece in pieces:
            last = 0
            for m in rx.finditer(piece):
                if m.start() > last:
                    out.append(piece[last:m.start()])
                out.append(m.group())
                last = m.end()
            if last < len(piece):
                out.append(piece[last:])
        pieces = out
    return pieces


def _gpt2_byte_chars() -> List[str]:
    printable = [b for b in range(256) if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or 0xAE <= b]
    table, n = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(0x100 + n)
            n += 1
    return [table[b] for b in range(256)]


class Reference:
    """Reads tokens, types, scores and merges with specdec.read_gguf and tokenizes naively."""

    def __init__(self, path: str) -> None:
        meta = specdec.read_gguf(path)["metadata"]
        self.model = meta["tokenizer.ggml.model"]
        self.pre = meta.get("tokenizer.ggml.pre", "default")
        self.tokens: List[str] = meta["tokenizer.ggml.tokens"]
        self.types: List[int] = meta.get("tokenizer.ggml.token_type", [1] * len(self.tokens))
        self.scores: List[float] = meta.get("tokenizer.ggml.scores", [0.0] * len(self.tokens))
        self.ids = {t: i for i, t in enumerate(self.tokens)}
        self.space_prefix = meta.get("tokenizer.ggml.add_space_prefix", self.model == "llama")
        self.ranks: Dict[Tuple[str, str], int] = {}
        for rank, merge in enumerate(meta.get("tokenizer.ggml.merges", [])):
            left, right = merge.split(" ", 1)
            self.ranks.setdefault((left, right), rank)
        self.user_defined = sorted((t for t, ty in zip(self.tokens, self.types) if ty == 4),
                                   key=len, reverse=True)
        self.byte_chars = _gpt2_byte_chars()

    def _split_user_defined(self, text: str) -> List[Tuple[bool, str]]:
        parts = [(False, text)] if text else []
        for tok in self.user_defined:
            out = []
            for is_tok, s in parts:
                if is_tok or tok not in s:
                    out.append((is_tok, s))
                    continue
                pieces = s.split(tok)
                for i, p in enumerate(pieces):
                    if p:
                        out.append((False, p))
                    if i + 1 < len(pieces):
                        out.append((True, tok))
            parts = out
        return parts

    def _bpe_word(self, word: str) -> List[int]:
        syms = [self.byte_chars[b] for b in word.encode("utf-8")]
        while len(syms) > 1:
            best = None
            for i in range(len(syms) - 1):
                r = self.ranks.get((syms[i], syms[i + 1]))
                if r is not None and (best is None or r < best[0]):
                    best = (r, i)
            if best is None:
                break
            i = best[1]
            syms[i:i + 2] = [syms[i] + syms[i + 1]]
        return [self.ids[s] for s in syms]

    def _spm(self, text: str) -> List[int]:
        syms = list(text.replace(" ", "\u2581"))
        while len(syms) > 1:
            best = None
            for i in range(len(syms) - 1):
                tid = self.ids.get(syms[i] + syms[i + 1])
                if tid is not None and (best is None or self.scores[tid] > best[0]):
                    best = (self.scores[tid], i)
            if best is None:
                break
            i = best[1]
            syms[i:i + 2] = [syms[i] + syms[i + 1]]
        out = []
        for s in syms:
            if s in self.ids:
                out.append(self.ids[s])
            else:
                out.extend(self.ids["<0x%02X>" % b] for b in s.encode("utf-8"))
        return out

    def encode(self, text: str) -> List[int]:
        """Token ids with add_special and parse_special off."""
        out: List[int] = []
        after_special = True
        for is_tok, s in self._split_user_defined(text):
            if is_tok:
                out.append(self.ids[s])
                after_special = True
                continue
            if self.model == "llama":
                out.extend(self._spm((" " if self.space_prefix and after_special else "") + s))
            else:
                for word in pre_tokenize(self.pre, s):
                    out.extend(self._bpe_word(word))
            after_special = False
        return out
