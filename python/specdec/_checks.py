"""Type and value checks at the Python boundary.

Every check raises ValueError naming the field, the value and what is allowed, in the project's
one form: ``<field> = <value>: <what is allowed>``. Bools are not ints here (``True`` is not a
token id), floats are not ints (``3.7`` is not silently truncated), and strings must be valid
Unicode text (a lone surrogate, as a non-UTF-8 command-line argument becomes, cannot be encoded).
"""

from __future__ import annotations

import math
import numbers
import re
from typing import Any, Iterable, List, Mapping, Optional

import numpy as np

INT32_MAX = (1 << 31) - 1


def show(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters (the type alone for a value nested too deeply:
    repr recurses)."""
    try:
        # a huge string or container: only its start is shown, so only its start is repr'd
        if isinstance(value, (str, bytes)) and len(value) > 4 * limit:
            text = repr(value[:4 * limit])
        elif isinstance(value, (list, tuple)) and len(value) > limit:
            text = repr(list(value[:limit]))[:-1] + f", ... ({len(value)} items)]"
        elif isinstance(value, dict) and len(value) > limit:
            text = repr(dict(list(value.items())[:limit]))[:-1] + f", ... ({len(value)} items)}}"
        else:
            text = repr(value)
    except RecursionError:
        return f"<a {type(value).__name__} nested too deeply to show>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


# C0 controls, DEL, C1 controls, the bidirectional marks and overrides (text that reorders what a
# terminal shows), and lone surrogates (a file name that is not UTF-8, which print cannot encode)
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
                          "\ud800-\udfff]")


def printable(text: Any, keep: str = "") -> str:
    """``str(text)`` safe to write to a terminal: control characters are shown as escapes
    (``\\x1b``, ``\\x9b``, ``\\u202e``) instead of acting (an ESC sequence in a model's
    ``general.name`` would set the terminal's title or clear its screen). Characters in ``keep``
    (``"\\n"`` for multi-line output) stay as they are."""
    def escape(m: "re.Match[str]") -> str:
        c = m.group()
        if c in keep:
            return c
        short = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(c)
        return short or (f"\\x{ord(c):02x}" if ord(c) <= 0xFF else f"\\u{ord(c):04x}")
    return _UNPRINTABLE.sub(escape, str(text))


def error(field: str, value: Any, allowed: str) -> ValueError:
    return ValueError(f"{field} = {show(value)}: {allowed}")


def is_bool(value: Any) -> bool:
    return isinstance(value, (bool, np.bool_))


def is_int(value: Any) -> bool:
    """An integer that is not a bool (Python int or a NumPy integer)."""
    return isinstance(value, numbers.Integral) and not is_bool(value)


def is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not is_bool(value)


def check_bool(field: str, value: Any) -> bool:
    if not is_bool(value):
        raise error(field, value, "True or False")
    return bool(value)


def check_int(field: str, value: Any, lo: Optional[int] = None, hi: Optional[int] = None,
              allowed: Optional[str] = None) -> int:
    """An int in [lo, hi] (either bound may be None)."""
    if is_int(value) and (lo is None or value >= lo) and (hi is None or value <= hi):
        return int(value)
    if allowed is None:
        bounds = [f">= {lo}" if lo is not None else "", f"<= {hi}" if hi is not None else ""]
        allowed = " ".join(["an integer", " and ".join(b for b in bounds if b)]).strip()
    raise error(field, value, allowed)


def check_real(field: str, value: Any, allowed: str, ok=lambda v: True) -> float:
    """A finite real number (not a bool) for which ``ok`` holds."""
    try:
        number = float(value) if is_real(value) else math.nan
    except OverflowError:  # an int beyond the float range
        number = math.inf
    if not math.isfinite(number) or not ok(number):
        raise error(field, value, allowed)
    return number


def unicode_problem(text: str) -> Optional[str]:
    """Why ``text`` cannot be encoded as UTF-8 (a lone surrogate), or None when it can."""
    try:
        text.encode("utf-8")
        return None
    except UnicodeEncodeError as err:
        bad = text[err.start]
        code = ord(bad)
        if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: a byte that was not UTF-8
            return f"not valid UTF-8 (byte 0x{code - 0xDC00:02x} at character {err.start})"
        return f"holds a lone surrogate U+{code:04X} at character {err.start}"


def check_text(field: str, value: Any, allowed: str = "a string", empty_ok: bool = True) -> str:
    """A str that is valid Unicode (encodable as UTF-8)."""
    if not isinstance(value, str):
        raise error(field, value, allowed)
    if not empty_ok and not value:
        raise error(field, value, f"{allowed} (not empty)")
    problem = unicode_problem(value)
    if problem is not None:
        raise ValueError(f"{field} = {show(value)}: {problem}; text must be valid Unicode")
    return value


def check_token_ids(field: str, value: Any, vocab_size: Optional[int] = None) -> List[int]:
    """A list of token ids: ints (not bools, floats or strings) in [0, vocab_size)."""
    if isinstance(value, (str, bytes, bytearray, dict)) or not isinstance(value, Iterable):
        raise error(field, value, "a list of token ids (integers)")
    if isinstance(value, np.ndarray) and value.ndim != 1:
        raise error(field, value, "a 1-D list of token ids (integers)")
    out = []
    for i, t in enumerate(value):
        if not is_int(t):
            raise error(f"{field}[{i}]", t, "a token id (an integer, not "
                        f"{type(t).__name__})")
        if t < 0 or (vocab_size is not None and t >= vocab_size):
            raise error(f"{field}[{i}]", t, f"a token id in [0, {vocab_size})" if vocab_size
                        else "a token id >= 0")
        out.append(int(t))
    return out


__all__ = ["INT32_MAX", "check_bool", "check_int", "check_real", "check_text", "check_token_ids",
           "error", "is_bool", "is_int", "is_real", "printable", "show", "unicode_problem"]
