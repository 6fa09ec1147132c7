"""Tool calls for the chat endpoint: OpenAI's ``tools`` / ``tool_choice`` / ``parallel_tool_calls``.

The tools reach the model through its own chat template (rendered in the sandboxed worker); the
reply is parsed for calls in the format that template teaches:

- ``hermes`` (Qwen 2.5, Hermes): ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``;
- ``llama3_json`` (Llama 3.x): ``{"name": ..., "parameters": {...}}``, optionally after
  ``<|python_tag|>``, several separated by ``;``;
- ``mistral``: ``[TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]``.

``tool_choice``: ``none`` (no parsing), ``auto`` (the model decides; its reply is parsed),
``required`` or a named function: the reply is constrained (structured outputs) to calls in that
format whose arguments follow each function's JSON schema, so it always parses. A template with
none of these formats is a 400 when ``tool_choice`` is not ``none``.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from specdec.server.protocol import ApiError, bad
from specdec.structured import StructuredOutputsParams

MAX_TOOLS = 128
# the texts that open and close calls, per format
MARKER_TEXTS = {"hermes": ("<tool_call>", "</tool_call>"), "mistral": ("[TOOL_CALLS]",)}
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
FORMATS = ("hermes", "llama3_json", "mistral")


@dataclass
class ToolRequest:
    tools: List[Dict[str, Any]]        # as given (OpenAI's shape), for the template
    choice: str                        # "none", "auto", "required" or "named"
    name: Optional[str] = None         # the named function
    parallel: bool = True
    format: Optional[str] = None       # set once the template is known
    # the format's markers that are control tokens in this vocabulary: text -> id (a grammar
    # names them by id, and the reply's text must keep them: skip_special_tokens off)
    control: Dict[str, int] = field(default_factory=dict)
    schemas: Dict[str, Any] = field(default_factory=dict)  # name -> parameters schema


def parse_request(body: Mapping) -> Optional[ToolRequest]:
    """``tools``, ``tool_choice`` and ``parallel_tool_calls`` of a chat body, checked; None when
    the request has no tools."""
    tools = body.get("tools")
    choice = body.get("tool_choice")
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise bad("parallel_tool_calls", parallel, "true or false")
    if tools is None or tools == []:
        if choice not in (None, "none"):
            raise bad("tool_choice", choice, 'only "none" (or leaving it out) without tools')
        return None
    if not isinstance(tools, list) or len(tools) > MAX_TOOLS:
        raise bad("tools", tools if not isinstance(tools, list) else f"a list of {len(tools)}",
                  f"a list of up to {MAX_TOOLS} {{\"type\": \"function\", \"function\": {{...}}}} objects")
    schemas: Dict[str, Any] = {}
    for i, t in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(t.get("function"), dict):
            raise bad(where, t, '{"type": "function", "function": {"name": ..., "parameters": {...}}}')
        extra = sorted(set(t) - {"type", "function"}, key=str)
        if extra:
            raise bad(f"{where}.{extra[0]}", t[extra[0]], 'not a tool field ("type", "function")')
        f = t["function"]
        name = f.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise bad(f"{where}.function.name", name, "1 to 64 letters, digits, _ or -")
        if name in schemas:
            raise bad(f"{where}.function.name", name, "a name no other tool has")
        extra = sorted(set(f) - {"name", "description", "parameters", "strict"}, key=str)
        if extra:
            raise bad(f"{where}.function.{extra[0]}", f[extra[0]],
                      "not a function field (name, description, parameters, strict)")
        if f.get("description") is not None and not isinstance(f["description"], str):
            raise bad(f"{where}.function.description", f["description"], "a string")
        params = f.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, dict):
            raise bad(f"{where}.function.parameters", params, "a JSON schema object")
        if f.get("strict") is not None and not isinstance(f["strict"], bool):
            raise bad(f"{where}.function.strict", f["strict"], "true, false or null")
        schemas[name] = params
    name = None
    if choice is None:
        choice = "auto"
    elif isinstance(choice, dict):
        fn = choice.get("function") if choice.get("type") == "function" else None
        if not isinstance(fn, dict) or set(choice) != {"type", "function"} or set(fn) != {"name"}:
            raise bad("tool_choice", choice, '"none", "auto", "required" or {"type": "function", '
                      '"function": {"name": ...}}')
        name = fn["name"]
        if not isinstance(name, str) or name not in schemas:
            raise bad("tool_choice.function.name", name, f"one of the tools: {', '.join(schemas)}")
        choice = "named"
    elif choice not in ("none", "auto", "required"):
        raise bad("tool_choice", choice, '"none", "auto", "required" or {"type": "function", '
                  '"function": {"name": ...}}')
    return ToolRequest(tools=list(tools), choice=choice, name=name,
                       parallel=True if parallel is None else parallel, schemas=schemas)


def detect_format(template: str) -> Optional[str]:
    """The tool-call format a chat template teaches its model, or None."""
    if "<tool_call>" in template and "<function=" not in template:  # not Qwen3-Coder's XML calls
        return "hermes"
    if "[TOOL_CALLS]" in template and "[ARGS]" not in template:  # not v11's [TOOL_CALLS]name[ARGS]{...}
        return "mistral"
    if "<|python_tag|>" in template or ("ipython" in template and "parameters" in template):
        return "llama3_json"
    return None


def _call_schema(tr: ToolRequest, key: str) -> Dict[str, Any]:
    names = [tr.name] if tr.choice == "named" else list(tr.schemas)
    alts = [{"type": "object", "properties": {"name": {"const": n}, key: tr.schemas[n]},
             "required": ["name", key], "additionalProperties": False} for n in names]
    return alts[0] if len(alts) == 1 else {"anyOf": alts}


def constraint(tr: ToolRequest) -> Optional[StructuredOutputsParams]:
    """For ``required`` and a named function: a grammar of calls in the template's format whose
    arguments follow the functions' schemas (one call, or several with parallel_tool_calls and
    ``required``). None otherwise."""
    if tr.choice not in ("required", "named"):
        return None
    many = tr.parallel and tr.choice == "required"

    def lit(text: str) -> str:  # a marker: its control token by id, else its text
        return f"<[{tr.control[text]}]>" if text in tr.control else json.dumps(text)

    if tr.format == "hermes":
        call = (lit("<tool_call>") + ' "\\n" %json ' + json.dumps(_call_schema(tr, "arguments"))
                + ' "\\n" ' + lit("</tool_call>"))
        start = 'call ("\\n" call)*' if many else "call"
    elif tr.format == "mistral":
        call = "%json " + json.dumps(_call_schema(tr, "arguments"))
        start = lit("[TOOL_CALLS]") + ' " "? "[" ' + ('call (", " call)*' if many else "call") + ' "]"'
    else:
        call = "%json " + json.dumps(_call_schema(tr, "parameters"))
        start = 'call ("; " call)*' if many else "call"
    lark = "start: " + start + "\ncall: " + call + "\n"
    return StructuredOutputsParams(grammar=lark)


def _new_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def _calls_from(objs: List[Any], key: str) -> Optional[List[Dict[str, Any]]]:
    calls = []
    for o in objs:
        if not isinstance(o, dict) or not isinstance(o.get("name"), str):
            return None
        args = o.get(key, o.get("arguments", o.get("parameters", {})))
        calls.append({"id": _new_id(), "type": "function",
                      "function": {"name": o["name"], "arguments": json.dumps(args, ensure_ascii=False)}})
    return calls


def parse(fmt: str, text: str, names: Optional[List[str]] = None) -> Tuple[Optional[str], List[Dict[str, Any]]]:
    """(content, tool calls) of a reply: OpenAI's ``tool_calls`` entries (``arguments`` as a JSON
    string). A reply that holds no well-formed call is all content. ``names``: the request's
    tools; a hermes reply that is nothing but ``{"name": <one of them>, "arguments": {...}}``
    objects (small Qwen models drop the tags under tool_choice auto) is taken as calls too."""
    if fmt == "hermes":
        found = list(re.finditer(r"<tool_call>\s*(.*?)\s*</tool_call>", text, re.S))
        if not found:
            return _bare_calls(text, names)
        objs = []
        for m in found:
            try:
                objs.append(json.loads(m.group(1)))
            except ValueError:
                return text, []
        calls = _calls_from(objs, "arguments")
        if calls is None:
            return text, []
        content = text[:found[0].start()].strip()
        return (content or None), calls
    if fmt == "mistral":
        at = text.find("[TOOL_CALLS]")
        if at < 0:
            return text, []
        try:  # the first JSON value after the marker (an end-of-generation token's text may follow)
            objs, _ = json.JSONDecoder().raw_decode(text[at + len("[TOOL_CALLS]"):].lstrip())
        except ValueError:
            return text, []
        if names is not None and not all(isinstance(o, dict) and o.get("name") in names
                                         for o in (objs if isinstance(objs, list) else [objs])):
            return text, []
        calls = _calls_from(objs if isinstance(objs, list) else [objs], "arguments")
        if calls is None:
            return text, []
        content = text[:at].strip()
        return (content or None), calls
    body = text.strip()
    if body.startswith("<|python_tag|>"):
        body = body[len("<|python_tag|>"):].strip()
    if not body.startswith("{"):
        return text, []
    objs = _json_parts(body, ";")
    if objs is None:
        return text, []
    if names is not None and not all(isinstance(o, dict) and o.get("name") in names for o in objs):
        return text, []  # JSON that names no tool of the request is an answer, not a call
    calls = _calls_from(objs, "parameters")
    return (text, []) if calls is None else (None, calls)


def _bare_calls(text: str, names: Optional[List[str]]) -> Tuple[Optional[str], List[Dict[str, Any]]]:
    body = text.strip()
    if not names or not body.startswith("{"):
        return text, []
    objs = _json_parts(body, "\n")
    if objs is None:
        return text, []
    if not all(isinstance(o, dict) and o.get("name") in names and isinstance(o.get("arguments"), dict)
               and set(o) == {"name", "arguments"} for o in objs):
        return text, []
    return None, _calls_from(objs, "arguments") or []


def _json_parts(body: str, sep: str) -> Optional[List[Any]]:
    """The JSON values of ``body`` separated by ``sep`` at the top level; None if one is not JSON."""
    try:
        return [json.loads(part) for part in _split_top_level(body, sep)]
    except ValueError:
        return None


def _split_top_level(text: str, sep: str) -> List[str]:
    """``text`` split at ``sep`` outside JSON strings, objects and arrays."""
    parts, depth, start, in_str, esc = [], 0, 0, False, False
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


class StreamHolder:
    """Streams a reply's content while it cannot be the start of a tool call, and holds back the
    rest: once a call's start appears, nothing more goes out as content, and the calls are sent
    when the reply ends (parse on the whole text)."""

    MARKERS = {"hermes": "<tool_call>", "mistral": "[TOOL_CALLS]"}

    def __init__(self, fmt: str, names: Optional[List[str]] = None) -> None:
        self.fmt = fmt
        self.names = names
        self.text = ""
        self.sent = 0
        self.holding = False

    def push(self, piece: str) -> str:
        """The content that may go out now."""
        self.text += piece
        if self.holding:
            return ""
        marker = self.MARKERS.get(self.fmt)
        if self.fmt == "hermes" and not self.text[:self.sent].strip() and self.text.lstrip()[:1] == "{":
            self.holding = True  # perhaps a call without its tags
            return ""
        if marker is None:  # llama3_json: a reply that starts (after spaces) with { or <|python_tag|>
            head = self.text.lstrip()
            if not head:
                return ""
            if head[0] == "{" or "<|python_tag|>".startswith(head[:14]) or head.startswith("<|python_tag|>"):
                self.holding = True
                return ""
            out, self.sent = self.text[self.sent:], len(self.text)
            return out
        at = self.text.find(marker, self.sent)
        if at >= 0:
            self.holding = True
            out, self.sent = self.text[self.sent:at], at
            return out
        end = len(self.text)  # keep a tail that could be the marker's start
        for n in range(min(len(marker) - 1, end - self.sent), 0, -1):
            if self.text.endswith(marker[:n]):
                end -= n
                break
        out, self.sent = self.text[self.sent:end], end
        return out

    def finish(self) -> Tuple[str, List[Dict[str, Any]]]:
        """(content not sent yet, tool calls) at the end of the reply."""
        content, calls = parse(self.fmt, self.text, self.names)
        if calls:
            rest = content or ""
            already = self.text[:self.sent].strip()
            return (rest[len(already):] if rest.startswith(already) else ""), calls
        return self.text[self.sent:], []


def check_template_format(tr: ToolRequest, template: Optional[str]) -> None:
    if tr.choice == "none":
        return
    fmt = detect_format(template or "")
    if fmt is None:
        raise ApiError(400, f"tool_choice = {tr.choice!r}: this model's chat template has no tool-call "
                       f"format specdec can parse (known: {', '.join(FORMATS)}: Qwen 2.5 / Hermes "
                       "<tool_call>, Llama 3.x JSON, Mistral [TOOL_CALLS]); use tool_choice \"none\"",
                       "tool_choice", "unsupported_parameter")
    tr.format = fmt
