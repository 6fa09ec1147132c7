"""The Jinja environment chat templates run in (specdec.chat_template): jinja2's
ImmutableSandboxedEnvironment with Hugging Face's globals and filters, limits on what a template
may build, and tracking of the caller's text.

Tracking. The caller's strings (message contents, tool definitions, template variables; not roles)
enter the template as ``Tracked``, a str subclass that remembers which of its characters came from
the caller. ``+``, ``~``, slicing, strip / trim and case changes keep exact ranges; every other
operation or filter that takes caller text gives a result that counts as the caller's as a whole.
Jinja's ``finalize`` hook wraps the caller's characters in the render's markers where they are
output, so the tokenizer can parse control tokens only in the template's own text.
"""

from __future__ import annotations

import contextvars
import datetime
import functools
import json
from typing import Any, List, Optional, Tuple

from jinja2.compiler import CodeGenerator, optimizeconst
from jinja2.ext import Extension, loopcontrols
from jinja2.runtime import Macro
from jinja2.sandbox import ImmutableSandboxedEnvironment

from specdec import _chat_limits as limits
from specdec._chat_limits import MAX_SEQUENCE, MAX_TEXT

Spans = Tuple[Tuple[int, int], ...]

# (open, close) markers of the tracked render in progress on this thread / task, or None
MARKS: "contextvars.ContextVar[Optional[Tuple[str, str]]]" = contextvars.ContextVar(
    "specdec_chat_marks", default=None)


class TemplateRaised(Exception):
    """raise_exception(message) in a template."""


def tracked(text: str, spans: Optional[Spans] = None) -> Any:
    """`text` with the caller's character ranges `spans` (all of it when None); a plain str when
    no character is the caller's."""
    spans = ((0, len(text)),) if spans is None else tuple((b, e) for b, e in spans if e > b)
    if not spans:
        return str(text)
    out = Tracked(text)
    out._spans = spans
    return out


def spans_of(value: Any) -> Spans:
    return getattr(value, "_spans", ())


def is_tracked(value: Any, depth: int = 0) -> bool:
    """Whether `value` holds caller text (looking into lists, tuples and dicts)."""
    if isinstance(value, Tracked):
        return bool(value._spans)
    if depth > 8:
        return False
    if isinstance(value, (list, tuple)):
        return any(is_tracked(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return any(is_tracked(k, depth + 1) or is_tracked(v, depth + 1) for k, v in value.items())
    return False


def _clip(spans: Spans, begin: int, end: int) -> Spans:
    return tuple((max(b, begin) - begin, min(e, end) - begin) for b, e in spans
                 if min(e, end) > max(b, begin))


def concat(values: Any) -> Any:
    """Strings joined, keeping the caller's ranges (``+`` and ``~``)."""
    pieces, spans, at = [], [], 0
    for v in values:
        s = v if isinstance(v, str) else str(v)
        pieces.append(str.__str__(s) if isinstance(s, Tracked) else s)
        spans.extend((b + at, e + at) for b, e in spans_of(s))
        at += len(s)
        if at > MAX_TEXT:
            raise limits.refuse(f"a string longer than {MAX_TEXT} characters")
    return tracked("".join(pieces), tuple(spans))


class Tracked(str):
    """A string holding the caller's text in known character ranges."""

    _spans: Spans = ()

    def __add__(self, other: Any) -> Any:
        return concat((self, other)) if isinstance(other, str) else NotImplemented

    def __radd__(self, other: Any) -> Any:
        return concat((other, self)) if isinstance(other, str) else NotImplemented

    def __getitem__(self, key: Any) -> Any:
        out = str.__getitem__(self, key)
        if isinstance(key, slice) and key.step in (None, 1):
            begin, end, _ = key.indices(len(self))
            return tracked(out, _clip(self._spans, begin, max(begin, end)))
        if isinstance(key, int):
            i = key % len(self) if self else 0
            return tracked(out, _clip(self._spans, i, i + 1))
        return tracked(out)

    def _stripped(self, out: str, left: int) -> Any:
        return tracked(out, _clip(self._spans, left, left + len(out)))

    def strip(self, chars: Optional[str] = None) -> Any:
        left = len(self) - len(str.lstrip(self, chars))
        return self._stripped(str.strip(self, chars), left)

    def lstrip(self, chars: Optional[str] = None) -> Any:
        out = str.lstrip(self, chars)
        return self._stripped(out, len(self) - len(out))

    def rstrip(self, chars: Optional[str] = None) -> Any:
        return self._stripped(str.rstrip(self, chars), 0)

    def _same_length(self, out: str) -> Any:
        return tracked(out, self._spans if len(out) == len(self) else None)

    def upper(self) -> Any:
        return self._same_length(str.upper(self))

    def lower(self) -> Any:
        return self._same_length(str.lower(self))

    def title(self) -> Any:
        return self._same_length(str.title(self))

    def capitalize(self) -> Any:
        return self._same_length(str.capitalize(self))


def _whole(name: str) -> Any:
    """A str method whose result counts as the caller's text as a whole (lists: every item)."""
    method = getattr(str, name)

    def call(self: str, *args: Any, **kwargs: Any) -> Any:
        out = method(self, *args, **kwargs)
        if isinstance(out, str):
            return tracked(out)
        if isinstance(out, (list, tuple)):
            return type(out)(tracked(p) if isinstance(p, str) else p for p in out)
        return out
    call.__name__ = name
    return call


for _name in ("replace", "split", "rsplit", "splitlines", "partition", "rpartition", "join",
              "format", "format_map", "__mod__", "center", "ljust", "rjust", "zfill",
              "expandtabs", "translate", "removeprefix", "removesuffix", "swapcase", "casefold"):
    setattr(Tracked, _name, _whole(_name))
# messages about a template's mistakes name a str, as they do without tracking
Tracked.__name__ = Tracked.__qualname__ = "str"
Tracked.__module__ = "builtins"


def finalize(value: Any) -> Any:
    """Jinja's hook on every {{ expression }} output: the caller's characters in it are wrapped
    in the render's markers."""
    marks = MARKS.get()
    if marks is None or not isinstance(value, Tracked):
        return value
    pieces, last = [], 0
    for b, e in value._spans:
        pieces += [str.__getitem__(value, slice(last, b)), marks[0],
                   str.__getitem__(value, slice(b, e)), marks[1]]
        last = e
    pieces.append(str.__getitem__(value, slice(last, None)))
    return "".join(pieces)


def _tojson(value: Any, ensure_ascii: bool = False, indent: Optional[int] = None,
            separators: Optional[Tuple[str, str]] = None, sort_keys: bool = False) -> str:
    # Hugging Face's tojson: json.dumps, non-ASCII kept, no HTML escaping
    if isinstance(indent, int) and indent > 64:
        raise limits.refuse(f"tojson: indent {indent} (at most 64)")
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, allow_nan=False,
                      separators=tuple(separators) if separators else None, sort_keys=sort_keys)


def _raise_exception(message: Any) -> None:
    raise TemplateRaised(str(message))


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(str(fmt))


def _track_filter(f: Any) -> Any:
    """A filter whose result counts as the caller's when it takes caller text (unless it kept
    exact ranges itself: trim, upper, lower, ...)."""
    @functools.wraps(f)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        out = f(*args, **kwargs)
        if isinstance(out, str) and not isinstance(out, Tracked) and (
                is_tracked(args) or is_tracked(kwargs)):
            return tracked(out)
        return out
    return wrapped


class _GenerationBlock(Extension):
    """``{% generation %}...{% endgeneration %}`` (Hugging Face marks assistant text for training
    masks with it): rendered as its body."""

    tags = {"generation"}

    def parse(self, parser: Any) -> List[Any]:
        next(parser.stream)
        return parser.parse_statements(("name:endgeneration",), drop_needle=True)


class _TrackingCodeGenerator(CodeGenerator):
    """``a ~ b`` through environment.tracked_concat, which keeps the caller's ranges."""

    @optimizeconst
    def visit_Concat(self, node: Any, frame: Any) -> None:
        self.write("environment.tracked_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class ChatEnvironment(ImmutableSandboxedEnvironment):
    """The sandbox with the limits and the tracking of the caller's text (module docstring)."""

    code_generator_class = _TrackingCodeGenerator
    intercepted_binops = frozenset(["*", "**", "%", "+"])

    @staticmethod
    def tracked_concat(values: Any) -> Any:
        return concat(values)

    concat = staticmethod(limits.bounded_concat)

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "+":
            return _add(left, right)
        if operator == "**":
            limits.check_power(left, right)
            return left ** right
        if operator == "%":
            if not isinstance(left, str):
                return left % right
            limits.check_percent(left, right)
            out = left % right
            return tracked(out) if is_tracked(left) or is_tracked(right) else out
        limits.check_repeat(left, right)
        out = left * right
        return tracked(out) if isinstance(out, str) and is_tracked((left, right)) else out

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        target = getattr(__obj, "__wrapped__", __obj)  # the sandbox wraps str.format
        owner = getattr(target, "__self__", None)
        if isinstance(owner, str):
            args = limits.check_str_call(owner, getattr(target, "__name__", ""), args, kwargs)
        out = super().call(__context, __obj, *args, **kwargs)
        # a callable given caller text (' '.join(items), '{}'.format(x), ...) gives caller text;
        # a macro's output already carries the markers of what it wrote
        if (isinstance(out, str) and not spans_of(out) and not isinstance(__obj, Macro)
                and is_tracked((args, kwargs, owner))):
            return tracked(out)
        return out


def _add(left: Any, right: Any) -> Any:
    if isinstance(left, str) and isinstance(right, str):
        return concat((left, right))
    out = left + right
    if isinstance(out, (list, tuple)) and len(out) > MAX_SEQUENCE:
        raise limits.refuse(f"a sequence longer than {MAX_SEQUENCE} items")
    return out


@functools.lru_cache(maxsize=1)
def environment() -> ChatEnvironment:
    """The sandboxed environment every chat template compiles in."""
    env = ChatEnvironment(trim_blocks=True, lstrip_blocks=True, autoescape=False,
                          extensions=[loopcontrols, _GenerationBlock], finalize=finalize)
    env.globals.pop("lipsum", None)  # nothing a chat template needs; costly on demand
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.filters["tojson"] = _tojson
    limits.guard_filters(env.filters)
    for name in list(env.filters):
        env.filters[name] = _track_filter(env.filters[name])
    return env
