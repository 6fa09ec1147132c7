"""Chat templates rendered as written.

A model's ``tokenizer.chat_template`` (and its named templates, such as ``tool_use``) is Jinja
source. It runs here in jinja2's ``ImmutableSandboxedEnvironment`` with the globals and filters
Hugging Face's ``apply_chat_template`` and vLLM give it: ``raise_exception``, ``strftime_now``,
a ``tojson`` that keeps non-ASCII text, loop controls (``break`` / ``continue``), the
``{% generation %}`` block, ``trim_blocks`` and ``lstrip_blocks``; the context holds
``messages``, ``tools``, ``documents``, ``add_generation_prompt``, ``bos_token``, ``eos_token``
and whatever extra variables the caller passes (``enable_thinking``, ...).

The sandbox: templates cannot read attributes that start with ``_``, call unsafe methods or
mutate the objects they are given; ``range`` is limited and sequences a template builds with
``*`` are capped (``MAX_SEQUENCE``).

Control tokens. A rendered chat is tokenized so that only text the template wrote itself can
become a control token: every control-token text inside the caller's strings (message contents,
roles, tool definitions, ...) is swapped for a unique placeholder before rendering and put back
afterwards as plain text (``Tokenizer.encode_with_markup``). A user writing
``<|im_end|><|im_start|>system`` gets those characters, not a new system turn.
"""

from __future__ import annotations

import contextvars
import datetime
import functools
import json
import re
import secrets
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

__all__ = ["ChatTemplateError", "MAX_SEQUENCE", "check_conversation", "compile_template", "plain_data",
           "render_chat"]

MAX_SEQUENCE = 1 << 20  # longest string or list a template may build with * (items)


class ChatTemplateError(ValueError):
    """A chat template that does not compile, raises (``raise_exception``) or fails to render,
    or a conversation the template cannot take. The message is one line."""


def _one_line(text: str, limit: int = 400) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[:limit - 3] + "..."


@functools.lru_cache(maxsize=1)
def _environment() -> Any:
    try:
        import jinja2
        from jinja2 import nodes
        from jinja2.ext import Extension, loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as e:  # a dependency of the package: only a broken install gets here
        raise ImportError("chat templates need jinja2 (pip install 'jinja2>=3.1')") from e

    class GenerationBlock(Extension):
        """``{% generation %}...{% endgeneration %}`` (Hugging Face marks assistant text for
        training masks with it): rendered as its body."""

        tags = {"generation"}

        def parse(self, parser: Any) -> List[Any]:
            next(parser.stream)
            return parser.parse_statements(("name:endgeneration",), drop_needle=True)

    class ChatEnvironment(ImmutableSandboxedEnvironment):
        intercepted_binops = frozenset(["*", "**"])

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            if operator == "**":
                if isinstance(right, int) and abs(right) > 256 and not isinstance(left, float):
                    raise jinja2.exceptions.SecurityError(
                        f"{left!r} ** {right!r}: exponents above 256 are refused")
                return left ** right
            for seq, count in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(count, int):
                    if len(seq) * max(count, 0) > MAX_SEQUENCE:
                        raise jinja2.exceptions.SecurityError(
                            f"a sequence of {len(seq)} items * {count} exceeds "
                            f"{MAX_SEQUENCE} items")
            return left * right

    env = ChatEnvironment(trim_blocks=True, lstrip_blocks=True, autoescape=False,
                          extensions=[loopcontrols, GenerationBlock], finalize=_finalize)
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def _tojson(value: Any, ensure_ascii: bool = False, indent: Optional[int] = None,
            separators: Optional[Tuple[str, str]] = None, sort_keys: bool = False) -> str:
    # Hugging Face's tojson: json.dumps, non-ASCII kept, no HTML escaping (Jinja's own escapes <>&)
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                      separators=tuple(separators) if separators else None, sort_keys=sort_keys)


class _TemplateRaised(Exception):
    pass


def _raise_exception(message: Any) -> None:
    raise _TemplateRaised(str(message))


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(str(fmt))


@functools.lru_cache(maxsize=32)
def compile_template(source: str, name: str = "default") -> Any:
    """The compiled template (cached by source); ChatTemplateError naming the line for a template
    that does not parse."""
    import jinja2

    if not isinstance(source, str) or not source.strip():
        raise ChatTemplateError(f"chat template {name!r} is empty")
    try:
        return _environment().from_string(source)
    except jinja2.TemplateSyntaxError as e:
        raise ChatTemplateError(f"chat template {name!r}, line {e.lineno}: "
                                f"{_one_line(e.message or e)}") from None


def _render(source: str, name: str, context: Dict[str, Any]) -> str:
    import jinja2

    template = compile_template(source, name)
    try:
        return template.render(**context)
    except _TemplateRaised as e:
        raise ChatTemplateError(f"chat template {name!r} refused the conversation: "
                                f"{_one_line(e)}") from None
    except jinja2.TemplateError as e:
        raise ChatTemplateError(f"chat template {name!r}: {type(e).__name__}: "
                                f"{_one_line(e)}") from None
    except (ArithmeticError, AttributeError, KeyError, IndexError, LookupError, TypeError,
            ValueError, RecursionError, MemoryError) as e:
        raise ChatTemplateError(f"chat template {name!r} failed: {type(e).__name__}: "
                                f"{_one_line(e)}") from None


# ---- the caller's data -------------------------------------------------------------------------

def plain_data(value: Any, field: str, depth: int = 0) -> Any:
    """A JSON-like copy (dict / list / str / int / float / bool / None) of `value`."""
    from specdec._checks import error, unicode_problem

    if depth > 32:
        raise error(field, "...", "JSON-like data nested at most 32 deep")
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, str):
        if unicode_problem(value):
            raise error(field, value, f"valid Unicode text ({unicode_problem(value)})")
        return value
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise error(field, value, "a dict with string keys")
            out[plain_data(k, field, depth + 1)] = plain_data(v, f"{field}.{k}", depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [plain_data(v, f"{field}[{i}]", depth + 1) for i, v in enumerate(value)]
    raise error(field, value, "JSON-like data (dict, list, str, int, float, bool or None)")


def _content_text(content: Any, field: str) -> Any:
    """OpenAI content parts [{"type": "text", "text": ...}, ...] joined by newlines, as vLLM
    gives string-content templates; strings and None pass."""
    from specdec._checks import error

    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(
                    part.get("text"), str):
                raise error(f"{field}[{i}]", part, 'a text part {"type": "text", "text": str} '
                            "(only text content is supported)")
            texts.append(part["text"])
        return "\n".join(texts)
    raise error(field, content, "a string, null or a list of text parts")


def check_conversation(messages: Any, field: str = "messages") -> List[Dict[str, Any]]:
    """A conversation as the template sees it: a non-empty list of message dicts, each with a
    string "role" and a "content" (a string or text parts; null or left out only beside
    "tool_calls"); every other key (tool_calls, tool_call_id, name, reasoning_content,
    ...) is passed to the template as given (JSON-like)."""
    from specdec._checks import error

    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, (list, tuple)):
        raise error(field, messages, 'a list of {"role": ..., "content": ...} dicts')
    if not messages:
        raise error(field, messages, "at least one message")
    out = []
    for i, m in enumerate(messages):
        f = f"{field}[{i}]"
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise error(f, m, 'a dict with a string "role"')
        if "content" not in m and "tool_calls" not in m:
            raise error(f, m, 'a dict with "content" (or "tool_calls")')
        msg = plain_data(m, f)
        msg["content"] = _content_text(msg.get("content"), f"{f}.content")
        if msg["content"] is None and not msg.get("tool_calls"):
            raise error(f"{f}.content", None, "a string or a list of text parts (null only "
                        "beside tool_calls)")
        out.append(msg)
    return out


SpanFinder = Callable[[str], List[Tuple[int, int]]]

# (open, close) markers of the render in progress on this thread / task, or None
_MARKS: "contextvars.ContextVar[Optional[Tuple[str, str]]]" = contextvars.ContextVar(
    "specdec_chat_marks", default=None)


class _Caller(str):
    """A string from the caller. ``+`` keeps track of which characters came from the caller
    (``'<|im_start|>' + role + content``); every other operation gives a plain str."""

    _spans: Tuple[Tuple[int, int], ...] = ()

    def __add__(self, other: Any) -> Any:
        if not isinstance(other, str):
            return NotImplemented
        n = len(self)
        return _caller(str.__add__(self, other), self._spans + tuple(
            (b + n, e + n) for b, e in getattr(other, "_spans", ())))

    def __radd__(self, other: Any) -> Any:
        if not isinstance(other, str):
            return NotImplemented
        n = len(other)
        return _caller(str.__add__(other, self), tuple(getattr(other, "_spans", ())) + tuple(
            (b + n, e + n) for b, e in self._spans))


def _caller(text: str, spans: Optional[Tuple[Tuple[int, int], ...]] = None) -> _Caller:
    out = _Caller(text)
    out._spans = ((0, len(text)),) if spans is None else spans
    return out


def _finalize(value: Any) -> Any:
    """Jinja's hook on every {{ expression }} output: the caller's characters in it are wrapped
    in the render's markers, so that they can be told from the template's own text."""
    marks = _MARKS.get()
    if marks is None or not isinstance(value, _Caller) or not value._spans:
        return value
    pieces, last = [], 0
    for b, e in value._spans:
        if e <= b:
            continue
        pieces += [str.__getitem__(value, slice(last, b)), marks[0],
                   str.__getitem__(value, slice(b, e)), marks[1]]
        last = e
    pieces.append(str.__getitem__(value, slice(last, None)))
    return "".join(pieces)


class _Protector:
    """Swaps control-token texts inside the caller's strings for placeholders
    (\\ue000<nonce><n>\\ue001) and puts them back after rendering, recording where. `find_spans`
    gives the [begin, end) character ranges of control-token texts in a string (the tokenizer's
    Tokenizer.control_text_spans); None protects nothing."""

    def __init__(self, find_spans: Optional[SpanFinder], track: bool = False) -> None:
        self._find = find_spans
        self._track = track  # mark the caller's strings (_Caller) as well
        self._nonce = secrets.token_hex(6)
        self._found: List[str] = []
        self._back = re.compile("\ue000" + self._nonce + r"(\d+|\[|\])\ue001")
        self.marks = (f"\ue000{self._nonce}[\ue001", f"\ue000{self._nonce}]\ue001")

    def protect(self, value: Any, is_role: bool = False) -> Any:
        if self._find is None:
            return value
        if isinstance(value, str):
            spans = self._find(value)
            if spans:
                pieces, last = [], 0
                for begin, end in spans:
                    pieces.append(value[last:begin])
                    pieces.append(self._swap(value[begin:end]))
                    last = end
                pieces.append(value[last:])
                value = "".join(pieces)
            # roles are the template's vocabulary ('<|' + role + '|>' may be one control token)
            return _caller(value) if self._track and not is_role and value else value
        if isinstance(value, dict):
            return {self.protect(k): self.protect(v, k == "role") for k, v in value.items()}
        if isinstance(value, list):
            return [self.protect(v) for v in value]
        return value

    def _swap(self, text: str) -> str:
        self._found.append(text)
        return f"\ue000{self._nonce}{len(self._found) - 1}\ue001"

    def restore(self, rendered: str) -> Tuple[str, List[Tuple[int, int]]]:
        """The text with the control-token texts back, and the byte ranges the template wrote
        (everything but those texts)."""
        if self._find is None:
            return rendered, [(0, len(rendered.encode()))] if rendered else []
        pieces: List[str] = []
        plain: List[Tuple[int, int]] = []  # the caller's bytes
        at_byte, last, depth, opened = 0, 0, 0, 0
        for m in self._back.finditer(rendered):
            before = rendered[last:m.start()]
            pieces.append(before)
            at_byte += len(before.encode())
            last = m.end()
            tag = m.group(1)
            if tag == "[":
                if depth == 0:
                    opened = at_byte
                depth += 1
            elif tag == "]":
                depth = max(0, depth - 1)
                if depth == 0 and at_byte > opened:
                    plain.append((opened, at_byte))
            else:
                original = self._found[int(tag)]
                pieces.append(original)
                plain.append((at_byte, at_byte + len(original.encode())))
                at_byte += len(original.encode())
        pieces.append(rendered[last:])
        at_byte += len(pieces[-1].encode())
        if depth > 0 and at_byte > opened:  # cut after the caller's text (continue_final_message)
            plain.append((opened, at_byte))
        text = "".join(pieces)
        if self._nonce in text:
            raise ChatTemplateError("the chat template cut or changed message text that holds "
                                    "control-token text; it cannot be tokenized safely")
        total = len(text.encode())
        markup, begin = [], 0
        for b, e in sorted(plain):
            if b > begin:
                markup.append((begin, b))
            begin = max(begin, e)
        if total > begin:
            markup.append((begin, total))
        return text, markup


def render_chat(source: str, messages: List[Dict[str, Any]], *, name: str = "default",
                add_generation_prompt: bool = True, continue_final_message: bool = False,
                tools: Optional[List[Any]] = None, documents: Optional[List[Any]] = None,
                special_tokens: Optional[Mapping[str, str]] = None, strip_bos: str = "",
                control_spans: Optional[SpanFinder] = None,
                extra: Optional[Mapping[str, Any]] = None) -> Tuple[str, List[Tuple[int, int]]]:
    """Renders a checked conversation. Returns the text and the byte ranges the template wrote
    itself (all of the text when `control_spans` is None: nothing is protected). `strip_bos`: a
    leading BOS text to drop (the tokenizer adds BOS itself).

    With `control_spans`, the conversation is rendered twice: once with the caller's strings
    tracked through ``+`` and marked where they are output (all of them then stay text), once
    with only their control-token texts swapped out. When a template's string operations
    (trim, slicing, comparisons of captured output) made the marked render's text differ, the
    second one's ranges are used."""
    kw = dict(name=name, add_generation_prompt=add_generation_prompt,
              continue_final_message=continue_final_message, tools=tools, documents=documents,
              special_tokens=special_tokens, strip_bos=strip_bos, extra=extra)
    if control_spans is None:
        return _render_once(source, messages, _Protector(None), **kw)
    tracked = _render_once(source, messages, _Protector(control_spans, track=True), **kw)
    swapped = _render_once(source, messages, _Protector(control_spans), **kw)
    return tracked if tracked[0] == swapped[0] else swapped


def _render_once(source: str, messages: List[Dict[str, Any]], protector: _Protector, *,
                 name: str, add_generation_prompt: bool, continue_final_message: bool,
                 tools: Optional[List[Any]], documents: Optional[List[Any]],
                 special_tokens: Optional[Mapping[str, str]], strip_bos: str,
                 extra: Optional[Mapping[str, Any]]) -> Tuple[str, List[Tuple[int, int]]]:
    context: Dict[str, Any] = dict(protector.protect(dict(extra or {})))
    context.update(special_tokens or {})
    msgs = protector.protect(messages)
    context.update(messages=msgs, add_generation_prompt=add_generation_prompt)
    if tools is not None:
        context["tools"] = protector.protect(tools)
    if documents is not None:
        context["documents"] = protector.protect(documents)
    token = _MARKS.set(protector.marks)
    try:
        rendered = _render(source, name, context)
    finally:
        _MARKS.reset(token)
    if continue_final_message:
        rendered = _cut_after_final_message(rendered, msgs[-1].get("content"), protector.marks)
    if strip_bos and rendered.startswith(strip_bos):
        rendered = rendered[len(strip_bos):]
    return protector.restore(rendered)


def _cut_after_final_message(rendered: str, content: Any, marks: Tuple[str, str]) -> str:
    if not isinstance(content, str) or not content.strip():
        raise ChatTemplateError("continue_final_message needs a final message with text content")
    for needle in (str(content), str(content).strip()):
        at = rendered.rfind(needle)
        if at >= 0:
            end = at + len(needle)
            return rendered[:end + len(marks[1])] if rendered.startswith(marks[1], end) else rendered[:end]
    raise ChatTemplateError("continue_final_message: the template does not write the final "
                            "message's text as given, so the reply cannot continue it")
