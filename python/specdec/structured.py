"""Structured outputs: generation constrained to a JSON schema, a regex, a list of choices or a
grammar, with vLLM's names (``SamplingParams(structured_outputs=StructuredOutputsParams(...))``).

The constraint runs on llguidance (PyPI ``llguidance``; Rust, no dependencies beyond itself):
a matcher per request, fed every token the request keeps, gives the token bitmask of the next
position; the engine sets the logits of forbidden tokens to -inf (C++, in place) before the
step's verification, so greedy picks, sampling draws, rejection sampling and logprobs all see the
constrained distribution. Speculative decoding stays lossless: a draft is cut at its first token
the grammar forbids (no verification spent past it), and each verified row is masked by the
grammar state after the draft prefix before it (llguidance rolls its matcher back itself).

Why llguidance (docs/structured_outputs.md has the measurements): xgrammar needs torch, triton
and transformers (gigabytes) where specdec's users run a CPU; outlines-core has no grammars (EBNF)
and builds an index over the whole vocabulary per schema. llguidance computes a mask in ~0.06 ms
on Qwen's 151,936 tokens, compiles a schema in ~1 ms, takes Lark and GBNF grammars, regexes and
JSON schemas, and bounds its own work (``LLParserLimits``: lexer fuel, states, grammar size).

Compiling a constraint happens in the thread that makes the request (``LLM._make_request``; the
server's worker threads), never in the engine loop; a compiled grammar is cached per text.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from specdec._checks import check_bool, error

# What a request may ask to compile: the text of its schema / regex / grammar / choices.
MAX_SPEC_CHARS = 256 * 1024
MAX_CHOICES = 4096
# llguidance's own limits, tighter than its defaults where a hostile request could take memory:
# lexer states (1-2 kB each) and grammar symbols; the fuel bounds the time of a compile and of
# each mask (~50k units a millisecond).
_LIMITS = dict(max_items_in_row=MAX_CHOICES + 100, initial_lexer_fuel=1_000_000, step_lexer_fuel=200_000,
               step_max_items=50_000, max_lexer_states=50_000, max_grammar_size=200_000)
_CACHE_SIZE = 64
# JSON's whitespace between tokens unless a request says otherwise: a space, or one or two
# newlines and up to 20 spaces / tabs of indentation (llama.cpp's JSON-schema grammars bound it
# the same way). Unbounded whitespace lets a model loop on newlines until max_tokens, leaving
# JSON that never closes (small models do: stories260K did on every prompt).
JSON_WHITESPACE = r"\x20|\x0A{1,2}[\x20\x09]{0,20}"

_KINDS = ("json", "regex", "choice", "grammar", "json_object")


@dataclass
class StructuredOutputsParams:
    """One constraint on a request's output (vLLM's ``StructuredOutputsParams``); exactly one of:

    - ``json``: a JSON schema (a dict, or its JSON text); the output is JSON that validates;
    - ``regex``: a regular expression the whole output matches (Rust ``regex`` syntax);
    - ``choice``: a list of strings; the output is one of them;
    - ``grammar``: a grammar in Lark syntax (llguidance's) or GBNF (llama.cpp's, ``::=`` rules);
    - ``json_object=True``: any JSON object.

    ``disable_any_whitespace``: JSON without whitespace between tokens (compact output).
    ``whitespace_pattern``: a regex for the whitespace JSON may have between tokens instead of
    the default, ``JSON_WHITESPACE`` (a space, or 1-2 newlines and up to 20 spaces / tabs).

    Bad values raise ValueError naming the field, the value and what is allowed.
    """

    json: Optional[Union[str, Dict[str, Any], bool]] = None
    regex: Optional[str] = None
    choice: Optional[List[str]] = None
    grammar: Optional[str] = None
    json_object: Optional[bool] = None
    disable_any_whitespace: bool = False
    whitespace_pattern: Optional[str] = None

    def __post_init__(self) -> None:
        f = "StructuredOutputsParams."
        given = [k for k in _KINDS if getattr(self, k) is not None and not (k == "json_object" and self.json_object is False)]
        if len(given) != 1:
            raise ValueError(
                f"StructuredOutputsParams: {'none' if not given else ', '.join(given)} given; exactly "
                "one of json (a JSON schema), regex, choice (a list of strings), grammar (Lark or "
                "GBNF) or json_object=True is allowed")
        self.disable_any_whitespace = check_bool(f + "disable_any_whitespace", self.disable_any_whitespace)
        if self.whitespace_pattern is not None:
            _check_text(f + "whitespace_pattern", self.whitespace_pattern, "None or a regex for JSON's whitespace")
        for name in ("disable_any_whitespace", "whitespace_pattern"):  # JSON's options, nothing else's
            if getattr(self, name) not in (None, False) and given[0] not in ("json", "json_object"):
                raise ValueError(f"{f}{name}: only with json or json_object (not {given[0]})")
        if self.disable_any_whitespace and self.whitespace_pattern is not None:
            raise ValueError(f"{f}whitespace_pattern: not beside disable_any_whitespace=True (one or the other)")
        if self.json is not None:
            self.json = _schema(f + "json", self.json)
        if self.regex is not None:
            _check_text(f + "regex", self.regex, "a non-empty regular expression")
        if self.grammar is not None:
            _check_text(f + "grammar", self.grammar, "a non-empty Lark or GBNF grammar")
        if self.choice is not None:
            c = self.choice
            allowed = f"a non-empty list of at most {MAX_CHOICES} strings"
            if isinstance(c, (str, bytes, dict)) or not isinstance(c, (list, tuple)) or not c or len(c) > MAX_CHOICES:
                raise error(f + "choice", c, allowed)
            for i, x in enumerate(c):
                if not isinstance(x, str):
                    raise error(f"{f}choice[{i}]", x, "a string")
            if sum(len(x) for x in c) > MAX_SPEC_CHARS:
                raise ValueError(f"{f}choice: {sum(len(x) for x in c)} characters in all; at most "
                                 f"{MAX_SPEC_CHARS} are allowed")
            self.choice = list(c)
        if self.json_object is not None:
            self.json_object = check_bool(f + "json_object", self.json_object)

    @property
    def kind(self) -> str:
        return next(k for k in _KINDS if getattr(self, k) is not None and not (k == "json_object" and self.json_object is False))

    def key(self) -> Tuple[str, str, bool, Optional[str]]:
        """What identifies the compiled grammar (the cache's key)."""
        kind = self.kind
        if kind == "json":
            text = json.dumps(self.json, sort_keys=True, separators=(",", ":"))
        elif kind == "choice":
            text = json.dumps(self.choice)
        elif kind == "json_object":
            text = ""
        else:
            text = getattr(self, kind)
        return kind, text, self.disable_any_whitespace, self.whitespace_pattern

    @classmethod
    def from_any(cls, value: Any, field: str = "SamplingParams.structured_outputs") -> "StructuredOutputsParams":
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            unknown = sorted(set(value) - set(cls.__dataclass_fields__), key=str)
            if unknown:
                raise ValueError(f"{field}: unknown keys {unknown}; allowed: "
                                 f"{sorted(cls.__dataclass_fields__)}")
            return cls(**value)
        raise error(field, value, "None, a StructuredOutputsParams or a dict of its fields")


def _check_text(field: str, value: Any, allowed: str) -> str:
    if not isinstance(value, str) or not value:
        raise error(field, value, allowed)
    if len(value) > MAX_SPEC_CHARS:
        raise ValueError(f"{field}: {len(value)} characters; at most {MAX_SPEC_CHARS} are allowed")
    return value


def _schema(field: str, value: Any) -> Union[Dict[str, Any], bool]:
    allowed = "a JSON schema: a dict (or its JSON text) or true"
    if isinstance(value, str):
        _check_text(field, value, allowed)
        try:
            value = json.loads(value)
        except ValueError as e:
            raise ValueError(f"{field}: not valid JSON ({e}); {allowed} is allowed") from None
    if value is True:
        return {}  # any JSON value (llguidance applies its options to object schemas only)
    if not isinstance(value, dict):
        raise error(field, value, allowed)
    try:
        text = json.dumps(value)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{field}: {e}; {allowed} of JSON values is allowed") from None
    if len(text) > MAX_SPEC_CHARS:
        raise ValueError(f"{field}: {len(text)} characters as JSON; at most {MAX_SPEC_CHARS} are allowed")
    return value


def _llg():
    try:
        import llguidance
        import llguidance.numpy  # noqa: F401
    except ImportError as e:  # a dependency of specdec; only a broken install lacks it
        raise RuntimeError(f"structured outputs need the llguidance package ({e}): "
                           "pip install llguidance") from None
    return llguidance


class Constraint:
    """One request's grammar state: the tokens it kept so far, consumed in order."""

    __slots__ = ("matcher", "kind")

    def __init__(self, matcher: Any, kind: str) -> None:
        self.matcher = matcher
        self.kind = kind

    def valid_prefix(self, tokens: Sequence[int]) -> int:
        """How many of ``tokens`` (a draft) the grammar allows from here."""
        m = self.matcher
        # a complete grammar takes nothing more (not even EOS, which ends the request anyway)
        return m.validate_tokens(list(tokens)) if tokens and not m.is_stopped() and not m.is_error() else 0

    def accept(self, tokens: Sequence[int]) -> bool:
        """Feeds the tokens a step kept (each drawn under this grammar's mask). The end of
        generation after a complete grammar (llguidance stops there: nothing else may follow) is
        not fed."""
        m = self.matcher
        if m.is_error():
            return False
        for n, t in enumerate(tokens):
            if m.is_stopped() and n == len(tokens) - 1:
                return True  # the end-of-generation token the stopped grammar allowed
            if not m.consume_token(t):
                return False  # the library's limits, reached mid-output (see failure())
        return True

    @property
    def error(self) -> bool:
        return self.matcher.is_error()

    def failure(self) -> ValueError:
        """What ends a request whose grammar the library could not follow further."""
        why = _error_line(self.matcher.get_error())
        if not why or why == "None":
            why = "it allowed no token (an unsatisfiable constraint?)"
        return ValueError(f"SamplingParams.structured_outputs.{self.kind}: the grammar library stopped "
                          f"following this constraint: {why} (past its limits, or allowing nothing; "
                          "simplify the schema / regex / grammar)")

    @property
    def stopped(self) -> bool:
        """Nothing but the end of generation can follow."""
        return self.matcher.is_stopped()


class StructuredOutputs:
    """Compiles constraints for one tokenizer (cached), and computes the masks of a step."""

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        self.tokenizer = tokenizer
        # the logits' width (it may exceed the tokenizer's ids: padded embeddings)
        self.vocab_size = max(vocab_size, tokenizer.vocab_size)
        self.words = (self.vocab_size + 31) // 32
        self._lock = threading.Lock()
        self._lltok = None
        self._limits = None
        self._cache: "OrderedDict[tuple, Any]" = OrderedDict()
        self._worker = None  # masks_async's thread, made on first use
        # what the masks cost (bench/structured_bench.py reads these): calls, rows, seconds
        self.mask_calls = 0
        self.mask_rows = 0
        self.mask_seconds = 0.0
        self.apply_seconds = 0.0  # setting the forbidden logits to -inf (the engine's share)

    def _ll_tokenizer(self):
        """llguidance's view of the vocabulary (built once: ~0.5 s for 152k tokens)."""
        with self._lock:
            if self._lltok is None:
                llg = _llg()
                tok = self.tokenizer
                pieces = []
                special = []
                for i in range(tok.vocab_size):
                    b = tok.token_to_piece(i, True)
                    kind = tok.token_type(i)
                    # control, unknown and unused tokens are never the text's own tokens: llguidance
                    # marks them with a leading 0xff. User-defined ones (Qwen's <tool_call>) are text:
                    # the tokenizer makes them from their text, so the library must see them so too
                    if kind in ("control", "unknown", "unused"):
                        b = b"\xff" + b
                        special.append(i)
                    pieces.append(b)
                # the end llguidance allows first is the tokenizer's EOS (Qwen's <|im_end|>, not the
                # lowest end-of-generation id), then the others
                eog = sorted(tok.eog_token_ids, key=lambda i: i != tok.eos_token_id)
                if not eog:
                    eog = [tok.eos_token_id if tok.eos_token_id is not None else 0]

                class _Wrapper:
                    eos_token_id = eog[0]
                    bos_token_id = tok.bos_token_id
                    tokens = pieces
                    special_token_ids = special

                    def __call__(self, text: bytes) -> List[int]:  # forced bytes, mid-text
                        return tok.encode_continuation(text)

                self._lltok = llg.LLTokenizer(llg.TokenizerWrapper(_Wrapper()), n_vocab=self.vocab_size,
                                              eos_token=eog)
                self._limits = llg.LLParserLimits(**_LIMITS)
            return self._lltok

    def _grammar(self, p: StructuredOutputsParams) -> str:
        llg = _llg()
        kind = p.kind
        if kind in ("json", "json_object"):
            options: Dict[str, Any] = {"whitespace_flexible": not p.disable_any_whitespace}
            if not p.disable_any_whitespace:
                options["whitespace_pattern"] = (JSON_WHITESPACE if p.whitespace_pattern is None
                                                 else p.whitespace_pattern)
            schema = {"type": "object"} if kind == "json_object" else p.json
            return llg.LLMatcher.grammar_from_json_schema(schema, overrides=options)
        if kind == "regex":
            return llg.LLMatcher.grammar_from_regex(p.regex)
        if kind == "choice":
            return llg.grammar_from("choice", p.choice)
        try:
            return llg.grammar_from("grammar", p.grammar)
        except ValueError as e:
            raise ValueError(f"SamplingParams.structured_outputs.grammar: {e}") from None

    def constraint(self, p: StructuredOutputsParams) -> Constraint:
        """A fresh matcher for ``p`` (ValueError naming the field when the library cannot take it)."""
        llg = _llg()
        lltok = self._ll_tokenizer()
        key = p.key()
        with self._lock:
            base = self._cache.get(key)
            if base is not None:
                self._cache.move_to_end(key)
        if base is None:
            field = f"SamplingParams.structured_outputs.{p.kind}"
            try:
                grammar = self._grammar(p)
            except ValueError as e:
                msg = str(e)
                raise ValueError(msg if msg.startswith("SamplingParams") else f"{field}: {msg}") from None
            base = llg.LLMatcher(lltok, grammar, log_level=0, limits=self._limits)
            if not base.is_error():  # the first mask, here: a constraint that fails at once (or
                first = base.deep_copy()  # allows nothing) is refused before any output
                allowed = any(first.compute_bitmask())
                if first.is_error() or not allowed:
                    why = _error_line(first.get_error()) if first.is_error() else ""
                    raise ValueError(f"{field}: {why or 'no output can satisfy it (an empty language)'}"
                                     " (what llguidance could not take)")
            if base.is_error():
                raise ValueError(f"{field}: {_error_line(base.get_error())} (what llguidance could not take)")
            with self._lock:
                self._cache[key] = base
                while len(self._cache) > _CACHE_SIZE:
                    self._cache.popitem(last=False)
        return Constraint(base.deep_copy(), p.kind)

    def masks_async(self, items: Sequence[Tuple[Constraint, Sequence[int]]]):
        """masks(items) in this object's worker thread: a future (the caller's forward runs meanwhile)."""
        with self._lock:
            if self._worker is None:
                from concurrent.futures import ThreadPoolExecutor
                self._worker = ThreadPoolExecutor(1, thread_name_prefix="specdec-masks")
        return self._worker.submit(self.masks, list(items))

    def masks(self, items: Sequence[Tuple[Constraint, Sequence[int]]]) -> np.ndarray:
        """The bitmasks of a step: per item (constraint, draft) one row for the position after the
        kept tokens and one after each draft prefix, items in order: int32 [rows, words]."""
        llg = _llg()
        t0 = time.perf_counter()
        rows = sum(1 + len(d) for _, d in items)
        out = np.zeros((rows, self.words), dtype=np.int32)
        # in this thread, matcher by matcher: llguidance's parallel executor keeps worker threads
        # that spin after each call, taking a core from the device's own threads (a SmolLM2 step
        # on 2 cores took 0.9 ms longer beside it)
        at, nbytes = 0, out.shape[1] * 4
        base = out.ctypes.data
        for c, d in items:
            m = c.matcher
            m.unsafe_compute_mask_ptr(base + at * nbytes, nbytes)
            n = 0
            for t in d:  # the draft's valid prefix (a kept forbidden last token: its row is never used)
                if m.is_stopped() or m.try_consume_tokens([t]) != 1:
                    break
                n += 1
                m.unsafe_compute_mask_ptr(base + (at + n) * nbytes, nbytes)
            if n:
                m.rollback(n)
            at += 1 + len(d)
        self.mask_calls += 1
        self.mask_rows += rows
        self.mask_seconds += time.perf_counter() - t0
        return out


def _error_line(msg: str) -> str:
    """llguidance's error without its state dump."""
    for line in msg.splitlines():
        if line.startswith("Error:"):
            return line[len("Error:"):].strip()
    return _first_line(msg.split("\n<state>")[0])


def _first_line(msg: str) -> str:
    msg = msg.strip()
    return msg if len(msg) <= 500 else msg[:500] + " ..."
