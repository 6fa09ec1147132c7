"""JSON from untrusted input with its nesting bounded: the Python side of ``cpp/common/json.h``.

``json.loads``, ``json.dumps`` and ``repr`` recurse once per level of nesting, so a value nested
100,000 deep gives a RecursionError traceback. ``loads`` refuses text that nests more than
``MAX_DEPTH`` levels before parsing it (a scan of the text, vectorised: a draft-vocab file of 150k
entries costs a fraction of json.loads) and ``check_depth`` checks a Python value without recursing
(a cycle counts as too deep). Callers put the file or the field in front of the reason.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

MAX_DEPTH = 64  # as kMaxJsonDepth in C++; real configs nest 3 or 4 levels

_CONTAINERS = (list, tuple, dict)
# A JSON string, or an unterminated one to the end of the text. Once the opening quote matched the
# rest cannot fail (the loop stops only at a quote or at the end, and both end the match), so the
# engine never backtracks and the scan is linear even for hostile text (no possessive quantifiers:
# those need Python 3.11).
_STRING = re.compile(r'"(?:[^"\\]+|\\[\s\S]?)*(?:"|\Z)')
_STEP = np.zeros(256, dtype=np.int8)  # what each byte outside strings does to the depth
_STEP[[ord("["), ord("{")]] = 1
_STEP[[ord("]"), ord("}")]] = -1


def text_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON text (exact for valid JSON)."""
    structure = _STRING.sub("", text).encode("utf-8", "surrogatepass")
    steps = _STEP[np.frombuffer(structure, dtype=np.uint8)]
    return int(np.cumsum(steps, dtype=np.int64).max()) if steps.size else 0


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` nests more than ``limit`` lists, tuples and dicts.

    Iterative, depth first: a cyclic value reaches the limit after ``limit`` steps."""
    stack = [(value, 0)] if isinstance(value, _CONTAINERS) else []
    seen = {}  # id -> the deepest depth a container was walked at (a shared part is walked once)
    while stack:
        node, depth = stack.pop()  # depth: the containers around node
        if depth >= limit:
            return True
        if seen.get(id(node), -1) >= depth:
            continue
        seen[id(node)] = depth
        children = node.values() if isinstance(node, dict) else node
        stack.extend((c, depth + 1) for c in children if isinstance(c, _CONTAINERS))
    return False


def check_depth(field: str, value: Any, allowed: str, limit: int = MAX_DEPTH) -> None:
    """ValueError ``<field> = <a list nested deeper than N levels>: <allowed>`` when ``value`` is
    too deep (not shown: its repr would recurse)."""
    if too_deep(value, limit):
        raise ValueError(f"{field} = <a {type(value).__name__} nested deeper than {limit} levels>: "
                         f"{allowed}, nested at most {limit} levels")


def loads(text: str, limit: int = MAX_DEPTH) -> Any:
    """``json.loads(text)``; ValueError whose message is the reason alone when ``text`` is not JSON
    (json.JSONDecodeError) or nests more than ``limit`` arrays and objects (checked first)."""
    if text_depth(text) <= limit:
        try:
            return json.loads(text)
        except RecursionError:  # not reached at the default limit
            pass
    raise ValueError(f"arrays and objects nested deeper than {limit} levels (the limit of specdec's "
                     "JSON reader)")


__all__ = ["MAX_DEPTH", "check_depth", "loads", "text_depth", "too_deep"]
