"""Limits on what a chat template may build (specdec._chat_sandbox), checked before the value is
built so that a template asking for a gigabyte fails at once with a message naming the limit.

These are the cheap first line. The render itself runs in a worker process with a CPU-time and
an address-space limit and a deadline (specdec._chat_worker), which bounds whatever gets past
them (loops, recursion, values these checks do not foresee).
"""

from __future__ import annotations

import re
import string
from typing import Any, Callable, Iterable, List, Tuple

from jinja2.exceptions import SecurityError

MAX_SEQUENCE = 1 << 20  # longest string or list a template may build with * or a width (items)
MAX_TEXT = 1 << 24      # longest string a template may build (characters)
MAX_INT_BITS = 1 << 16  # largest integer a template may compute with * or ** (bits)
MAX_SLICES = 100_000    # most slices / batches of a sequence (jinja2's range() limit)

_WIDTH = re.compile(r"%(?:\([^)]*\))?[-+ #0]*(\*|\d+)?(?:\.(\*|\d+))?")
_DIGITS = re.compile(r"\d+")


def refuse(message: str) -> Exception:
    return SecurityError(message)


def check_widths(numbers: Iterable[Any], what: str) -> None:
    """Each int, or string of digits, at most MAX_SEQUENCE."""
    for n in numbers:
        if isinstance(n, str) and n.isdigit():
            digits = n.lstrip("0") or "0"
            value = int(digits) if len(digits) < 20 else MAX_SEQUENCE + 1
        elif isinstance(n, int) and not isinstance(n, bool):
            value = abs(n)
        else:
            continue
        if value > MAX_SEQUENCE:
            shown = n if len(str(n)) <= 30 else f"{str(n)[:30]}..."
            raise refuse(f"{what}: a width or precision of {shown} (at most {MAX_SEQUENCE})")


def _numbers_in(value: Any, depth: int = 0) -> List[Any]:
    """The ints and digit runs in `value` (looking into lists, tuples and dicts): what a nested
    format field ``{:{w}}`` or a ``%*d`` may take as a width."""
    if isinstance(value, int):
        return [value]
    if isinstance(value, str):
        return _DIGITS.findall(value)
    if depth < 4 and isinstance(value, (list, tuple)):
        return [n for v in value[:256] for n in _numbers_in(v, depth + 1)]
    if depth < 4 and isinstance(value, dict):
        return [n for v in list(value.values())[:256] for n in _numbers_in(v, depth + 1)]
    return []


def check_format(fmt: str, args: Tuple[Any, ...], kwargs: Any) -> None:
    """str.format / format_map: every width and precision, also those given by arguments
    (``'{:{w}}'.format(x, w=N)``)."""
    try:
        fields = list(string.Formatter().parse(fmt))
    except ValueError:
        return  # str.format raises its own error
    for _, _, spec, _ in fields:
        if not spec:
            continue
        check_widths(_DIGITS.findall(spec), "a format field")
        if "{" in spec:
            check_widths(_numbers_in([list(args), kwargs]), "a format field's nested width")


def check_percent(fmt: str, values: Any) -> None:
    """``fmt % values`` (and the format filter): widths written or taken from ``*``."""
    found = [n for m in _WIDTH.findall(fmt) for n in m]
    check_widths([n for n in found if n != "*"], "a % format")
    if "*" in found:
        check_widths(_numbers_in(values if isinstance(values, tuple) else (values,)),
                     "a % format's * width")


def check_repeat(left: Any, right: Any) -> None:
    """``seq * n`` and ``n * m``."""
    for seq, count in ((left, right), (right, left)):
        if isinstance(seq, (str, list, tuple)) and isinstance(count, int):
            count = max(count, 0)
            if len(seq) * count > MAX_SEQUENCE:
                raise refuse(f"a sequence of {len(seq)} items * {count} exceeds "
                             f"{MAX_SEQUENCE} items")
            if isinstance(seq, (list, tuple)) and count > 1:
                chars = sum(len(v) for v in seq if isinstance(v, str))
                if chars * count > MAX_TEXT:
                    raise refuse(f"a list holding {chars} characters * {count} exceeds "
                                 f"{MAX_TEXT} characters")
    if (isinstance(left, int) and isinstance(right, int)
            and left.bit_length() + right.bit_length() > MAX_INT_BITS):
        raise refuse(f"an integer product of {left.bit_length() + right.bit_length()} bits "
                     f"(at most {MAX_INT_BITS})")


def check_power(left: Any, right: Any) -> None:
    if isinstance(right, int) and abs(right) > 256 and not isinstance(left, float):
        raise refuse(f"{left!r} ** {right!r}: exponents above 256 are refused")
    if isinstance(left, int) and isinstance(right, int) and right > 0:
        bits = left.bit_length() * right
        if bits > MAX_INT_BITS:
            raise refuse(f"an integer power of about {bits} bits (at most {MAX_INT_BITS})")


def check_join(sep: str, items: List[Any]) -> None:
    chars = sum(len(v) for v in items if isinstance(v, str)) + len(sep) * max(len(items) - 1, 0)
    if chars > MAX_TEXT:
        raise refuse(f"a join of {len(items)} items into {chars} characters (at most {MAX_TEXT})")


def check_replace(s: str, old: Any, new: Any, count: Any = -1) -> None:
    if not isinstance(old, str) or not isinstance(new, str):
        return
    n = len(s) + 1 if old == "" else (s.count(old) if len(new) > len(old) else 0)
    if isinstance(count, int) and count >= 0:
        n = min(n, count)
    chars = len(s) + n * (len(new) - len(old))
    if chars > MAX_TEXT:
        raise refuse(f"a replace() giving {chars} characters (at most {MAX_TEXT})")


def _arg(args: Tuple[Any, ...], kwargs: Any, i: int, name: str, default: Any) -> Any:
    return args[i] if len(args) > i else kwargs.get(name, default)


def check_str_call(owner: str, name: str, args: Tuple[Any, ...], kwargs: Any) -> Tuple[Any, ...]:
    """A str method called from a template (arguments as given; join's materialised)."""
    if name in ("format", "format_map"):
        check_format(owner, args, kwargs)
    elif name in ("ljust", "rjust", "center", "zfill"):
        check_widths([_arg(args, kwargs, 0, "width", 0)], f"str.{name}")
    elif name == "expandtabs":
        size = _arg(args, kwargs, 0, "tabsize", 8)
        if isinstance(size, int) and len(owner) + owner.count("\t") * max(size, 0) > MAX_TEXT:
            raise refuse(f"expandtabs({size}) on {owner.count(chr(9))} tabs exceeds {MAX_TEXT} "
                         "characters")
    elif name == "replace" and len(args) >= 2:
        check_replace(owner, args[0], args[1], _arg(args, kwargs, 2, "count", -1))
    elif name == "translate" and args and isinstance(args[0], dict):
        longest = max((len(v) for v in args[0].values() if isinstance(v, str)), default=1)
        if len(owner) * longest > MAX_TEXT:
            raise refuse(f"translate() giving up to {len(owner) * longest} characters (at most "
                         f"{MAX_TEXT})")
    elif name == "join" and args:
        items = args[0] if isinstance(args[0], (list, tuple)) else list(args[0])
        check_join(owner, list(items))
        return (items,) + tuple(args[1:])
    return args


def bounded_concat(pieces: Iterable[Any]) -> str:
    """environment.concat: the output of a template, a macro or a {% set %} block, refused past
    MAX_TEXT characters while it is collected."""
    out, total = [], 0
    for piece in pieces:
        total += len(piece)
        if total > MAX_TEXT:
            raise refuse(f"output longer than {MAX_TEXT} characters")
        out.append(piece)
    return "".join(out)


# ---- filters --------------------------------------------------------------------------------
# Each check sees the filter's arguments from its value on (args[0]), without the context that
# jinja2 passes first to some filters.

def _guard(f: Callable[..., Any], check: Callable[[Tuple[Any, ...], Any], None]) -> Any:
    skip = 1 if hasattr(f, "jinja_pass_arg") else 0

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        check(args[skip:], kwargs)
        return f(*args, **kwargs)
    wrapped.__name__ = getattr(f, "__name__", "filter")
    wrapped.__doc__ = f.__doc__
    if hasattr(f, "jinja_pass_arg"):
        wrapped.jinja_pass_arg = f.jinja_pass_arg  # type: ignore[attr-defined]
    return wrapped


def _width_check(name: str, what: str) -> Callable[[Tuple[Any, ...], Any], None]:
    """A filter's width (indent: on every line) at most MAX_SEQUENCE wide and MAX_TEXT in all."""
    def check(args: Tuple[Any, ...], kwargs: Any) -> None:
        width = _arg(args, kwargs, 1, name, None)
        if isinstance(width, int):
            text = args[0] if args else ""
            lines = str(text).count("\n") + 1 if what == "indent" else 1
            if width > MAX_SEQUENCE or width * lines > MAX_TEXT:
                raise refuse(f"{what}({width}) on {lines} line(s): at most {MAX_SEQUENCE} "
                             f"wide and {MAX_TEXT} characters in all")
    return check


def _check_format_filter(args: Tuple[Any, ...], kwargs: Any) -> None:
    if args:
        check_percent(str(args[0]), tuple(args[1:]) or kwargs)


def _check_replace_filter(args: Tuple[Any, ...], kwargs: Any) -> None:
    if len(args) >= 3:  # (s, old, new[, count])
        check_replace(str(args[0]), args[1], args[2], _arg(args, kwargs, 3, "count", -1))


def _check_join_filter(args: Tuple[Any, ...], kwargs: Any) -> None:
    value = args[0] if args else None  # (value, d, attribute)
    if isinstance(value, (list, tuple)) and _arg(args, kwargs, 2, "attribute", None) is None:
        check_join(str(_arg(args, kwargs, 1, "d", "")), list(value))


def _check_count(name: str, what: str, limit: int) -> Callable[[Tuple[Any, ...], Any], None]:
    def check(args: Tuple[Any, ...], kwargs: Any) -> None:
        n = _arg(args, kwargs, 1, name, None)
        if isinstance(n, int) and n > limit:
            raise refuse(f"{what}({n}): at most {limit}")
    return check


def _check_sum(args: Tuple[Any, ...], kwargs: Any) -> None:
    start = _arg(args, kwargs, 2, "start", 0)  # (iterable, attribute, start)
    if isinstance(start, (str, list, tuple)):
        raise refuse("sum(start=...) of sequences is refused (use join or +)")


def guard_filters(filters: dict) -> None:
    """Adds the checks above to jinja2's filters that can build large values."""
    table = {"center": _width_check("width", "center"), "indent": _width_check("width", "indent"),
             "wordwrap": _width_check("width", "wordwrap"),
             "truncate": _width_check("length", "truncate"), "format": _check_format_filter,
             "replace": _check_replace_filter, "join": _check_join_filter,
             "batch": _check_count("linecount", "batch", MAX_SEQUENCE),
             "slice": _check_count("slices", "slice", MAX_SLICES), "sum": _check_sum}
    for name, check in table.items():
        if name in filters:
            filters[name] = _guard(filters[name], check)
