"""Chat templates rendered as written.

A model's ``tokenizer.chat_template`` (and its named templates, such as ``tool_use``) is Jinja
source. It runs in jinja2's ``ImmutableSandboxedEnvironment`` (specdec._chat_sandbox) with the
globals and filters Hugging Face's ``apply_chat_template`` and vLLM give it: ``raise_exception``,
``strftime_now``, a ``tojson`` that keeps non-ASCII text, loop controls, the
``{% generation %}`` block, ``trim_blocks`` and ``lstrip_blocks``; the context holds
``messages``, ``tools``, ``documents``, ``add_generation_prompt``, ``bos_token``, ``eos_token``
and the caller's extra variables (``enable_thinking``, ...).

Control tokens. A rendered chat is tokenized so that control tokens are parsed only in the text
the template wrote itself (``Tokenizer.encode_with_markup``); see render_chat and
docs/tokenizer.md. A user writing ``<|im_end|><|im_start|>system`` gets those characters, not a
new system turn.
"""

from __future__ import annotations

import functools
import math
import re
import secrets
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from specdec import _chat_sandbox as sandbox
from specdec._chat_sandbox import MAX_SEQUENCE, MAX_TEXT

__all__ = ["ChatTemplateError", "MAX_SEQUENCE", "MAX_TEXT", "RESERVED_VARIABLES",
           "check_conversation", "compile_template", "plain_data", "render_chat"]

# template variables the caller's chat_template_kwargs cannot set
RESERVED_VARIABLES = ("messages", "tools", "documents", "add_generation_prompt", "bos_token",
                      "eos_token", "raise_exception", "strftime_now")


class ChatTemplateError(ValueError):
    """A chat template that does not compile, raises (``raise_exception``) or fails to render,
    or a conversation the template cannot take. The message is one line."""


def _one_line(text: str, limit: int = 400) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[:limit - 3] + "..."


@functools.lru_cache(maxsize=32)
def compile_template(source: str, name: str = "default") -> Any:
    """The compiled template (cached by source); ChatTemplateError naming the line for a template
    that does not parse."""
    import jinja2

    if not isinstance(source, str) or not source.strip():
        raise ChatTemplateError(f"chat template {name!r} is empty")
    try:
        return sandbox.environment().from_string(source)
    except jinja2.TemplateSyntaxError as e:
        raise ChatTemplateError(f"chat template {name!r}, line {e.lineno}: "
                                f"{_one_line(e.message or e)}") from None


def _render(source: str, name: str, context: Dict[str, Any]) -> str:
    import jinja2

    template = compile_template(source, name)
    try:
        out = template.render(**context)
    except sandbox.TemplateRaised as e:
        raise ChatTemplateError(f"chat template {name!r} refused the conversation: "
                                f"{_one_line(e)}") from None
    except jinja2.TemplateError as e:
        raise ChatTemplateError(f"chat template {name!r}: {type(e).__name__}: "
                                f"{_one_line(e)}") from None
    except (ArithmeticError, AttributeError, KeyError, IndexError, LookupError, TypeError,
            ValueError, RecursionError) as e:  # (MemoryError: the worker names its limit)
        raise ChatTemplateError(f"chat template {name!r} failed: {type(e).__name__}: "
                                f"{_one_line(e)}") from None
    if len(out) > MAX_TEXT:
        raise ChatTemplateError(f"chat template {name!r} wrote {len(out)} characters; at most "
                                f"{MAX_TEXT}")
    return out


# ---- the caller's data -------------------------------------------------------------------------

def plain_data(value: Any, field: str, depth: int = 0) -> Any:
    """A JSON-like copy (dict / list / str / int / float / bool / None) of `value`."""
    from specdec._checks import error, unicode_problem

    if depth > 32:
        raise error(field, "...", "JSON-like data nested at most 32 deep")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if abs(value) >= 1 << 63:
            raise error(field, value, "an integer within 64 bits")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise error(field, value, "a finite number (JSON has no NaN or infinity)")
        return value
    if isinstance(value, str):
        if unicode_problem(value):
            raise error(field, value, f"valid Unicode text ({unicode_problem(value)})")
        return value
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str) or unicode_problem(k):
                raise error(f"{field} key", k, "a string of valid Unicode text")
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


class _Render:
    """One way of passing the caller's data to the template, and of reading back which bytes of
    the result the template wrote itself.

    mode "plain": the values as given, every byte counts as the template's;
    mode "tracked": the caller's strings (not roles) as sandbox.Tracked, their characters wrapped
    in markers where they are output;
    mode "swapped": every control-token text inside the caller's strings (roles too) replaced by
    a placeholder that is put back afterwards as the caller's text."""

    def __init__(self, mode: str, find_spans: Optional[SpanFinder] = None) -> None:
        self.mode = mode
        self._find = find_spans
        self._nonce = secrets.token_hex(6)
        self._found: List[str] = []
        self._back = re.compile("\ue000" + self._nonce + r"(\d+|\[|\])\ue001")
        self.marks = (f"\ue000{self._nonce}[\ue001", f"\ue000{self._nonce}]\ue001")

    def value(self, value: Any, is_role: bool = False) -> Any:
        if self.mode == "plain":
            return value
        if isinstance(value, str):
            if self.mode == "tracked":
                return sandbox.tracked(value) if not is_role else value
            spans = self._find(value) if self._find is not None else []
            if not spans:
                return value
            pieces, last = [], 0
            for begin, end in spans:
                pieces += [value[last:begin], self._swap(value[begin:end])]
                last = end
            pieces.append(value[last:])
            return "".join(pieces)
        if isinstance(value, dict):
            return {self.value(k): self.value(v, k == "role") for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v) for v in value]
        return value

    def _swap(self, text: str) -> str:
        self._found.append(text)
        return f"\ue000{self._nonce}{len(self._found) - 1}\ue001"

    def restore(self, rendered: str) -> Tuple[str, List[Tuple[int, int]]]:
        """The text (markers gone, control-token texts back) and the byte ranges the template
        wrote itself."""
        if self.mode == "plain":
            return rendered, [(0, len(rendered.encode()))] if rendered else []
        pieces: List[str] = []
        caller: List[Tuple[int, int]] = []  # the caller's bytes
        at_byte, last, depth, opened = 0, 0, 0, 0
        for m in self._back.finditer(rendered):
            before = rendered[last:m.start()]
            pieces.append(before)
            at_byte += len(before.encode())
            last = m.end()
            tag = m.group(1)
            if tag == "[":
                opened = at_byte if depth == 0 else opened
                depth += 1
            elif tag == "]":
                depth = max(0, depth - 1)
                if depth == 0 and at_byte > opened:
                    caller.append((opened, at_byte))
            else:
                original = self._found[int(tag)]
                pieces.append(original)
                caller.append((at_byte, at_byte + len(original.encode())))
                at_byte += len(original.encode())
        pieces.append(rendered[last:])
        at_byte += len(pieces[-1].encode())
        if depth > 0 and at_byte > opened:
            caller.append((opened, at_byte))
        text = "".join(pieces)
        if self._nonce in text:
            raise ChatTemplateError("the chat template cut or changed message text that holds "
                                    "control-token text; it cannot be tokenized safely")
        return text, _complement(caller, len(text.encode()))


def _complement(ranges: List[Tuple[int, int]], total: int) -> List[Tuple[int, int]]:
    out, begin = [], 0
    for b, e in sorted(ranges):
        if b > begin:
            out.append((begin, b))
        begin = max(begin, e)
    if total > begin:
        out.append((begin, total))
    return out


def _intersect(a: List[Tuple[int, int]], b: List[Tuple[int, int]]) -> List[Tuple[int, int]]:
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo < hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def render_chat(source: str, messages: List[Dict[str, Any]], *, name: str = "default",
                add_generation_prompt: bool = True, continue_final_message: bool = False,
                tools: Optional[List[Any]] = None, documents: Optional[List[Any]] = None,
                special_tokens: Optional[Mapping[str, str]] = None,
                control_spans: Optional[SpanFinder] = None,
                extra: Optional[Mapping[str, Any]] = None) -> Tuple[str, List[Tuple[int, int]]]:
    """Renders a checked conversation. Returns the text and the byte ranges the template wrote
    itself (all of the text when `control_spans` is None: nothing is protected). The text is
    as the template wrote it, a leading BOS included (Tokenizer drops it before encoding).
    Run it through specdec._chat_worker, which bounds its time and memory.

    With `control_spans` (the tokenizer's control-token finder) three renders are made: plain
    (the text of tokenize=False), tracked and swapped (see _Render). The caller's bytes are those
    the tracked render marks, and those the swapped render marks when its text is the plain one
    too. A template that sees the markers (string operations on captured output) and so changes
    its text falls back to the swapped render; one that sees the placeholders falls back to the
    tracked render alone. `continue_final_message` cuts the text where the tracked render's last
    message content ends."""
    kw = dict(name=name, add_generation_prompt=add_generation_prompt, tools=tools,
              documents=documents, special_tokens=special_tokens, extra=extra)
    if control_spans is None and not continue_final_message:  # the plain text is the answer
        return _Render("plain").restore(_render_raw(source, messages, _Render("plain"), **kw))
    how = _Render("tracked")
    tracked_raw = _render_raw(source, messages, how, **kw)
    try:
        tracked: Optional[Tuple[str, List[Tuple[int, int]]]] = how.restore(tracked_raw)
        cut = (_final_message_end(tracked_raw, how, messages[-1].get("content"))
               if continue_final_message else None)
    except ChatTemplateError:  # the template cut through a marker
        tracked, cut = None, None
        if continue_final_message:
            raise
    plain = _Render("plain").restore(_render_raw(source, messages, _Render("plain"), **kw))
    if control_spans is None:
        return _cut(plain, cut)
    try:
        how = _Render("swapped", control_spans)
        swapped: Optional[Tuple[str, List[Tuple[int, int]]]] = how.restore(
            _render_raw(source, messages, how, **kw))
    except ChatTemplateError:
        swapped = None  # the template cut through a placeholder
    if tracked is not None and tracked[0] == plain[0]:
        if swapped is not None and swapped[0] == plain[0]:
            return _cut((plain[0], _intersect(tracked[1], swapped[1])), cut)
        return _cut(tracked, cut)
    if swapped is not None and not continue_final_message:
        return swapped
    raise ChatTemplateError(f"chat template {name!r} treats message text in a way that "
                            "cannot be tokenized safely (it inspects or cuts it)")


def _render_raw(source: str, messages: List[Dict[str, Any]], how: _Render, *, name: str,
                add_generation_prompt: bool, tools: Optional[List[Any]],
                documents: Optional[List[Any]], special_tokens: Optional[Mapping[str, str]],
                extra: Optional[Mapping[str, Any]]) -> str:
    context: Dict[str, Any] = dict(how.value(dict(extra or {})))
    context.update(special_tokens or {})
    context.update(messages=how.value(messages), add_generation_prompt=add_generation_prompt)
    if tools is not None:
        context["tools"] = how.value(tools)
    if documents is not None:
        context["documents"] = how.value(documents)
    token = sandbox.MARKS.set(how.marks if how.mode == "tracked" else None)
    try:
        return _render(source, name, context)
    finally:
        sandbox.MARKS.reset(token)


def _final_message_end(tracked_raw: str, how: _Render, content: Any) -> int:
    """Where the last message's content ends, in bytes of the restored text: after its last
    output as a whole (followed by the close marker), else after the last occurrence of it."""
    if not isinstance(content, str) or not content.strip():
        raise ChatTemplateError("continue_final_message needs a final message with text content")
    for needle in (content + how.marks[1], content, content.strip()):
        at = tracked_raw.rfind(needle)
        if at >= 0:
            prefix = tracked_raw[:at + len(needle)]
            return len(how.restore(prefix + how.marks[1] * (prefix.count(how.marks[0]) -
                                                          prefix.count(how.marks[1])))[0].encode())
    raise ChatTemplateError("continue_final_message: the template does not write the final "
                            "message's text as given, so the reply cannot continue it")


def _cut(result: Tuple[str, List[Tuple[int, int]]],
         end: Optional[int]) -> Tuple[str, List[Tuple[int, int]]]:
    if end is None:
        return result
    text = result[0].encode()[:end].decode("utf-8", errors="strict")
    return text, [(b, min(e, end)) for b, e in result[1] if b < end]
