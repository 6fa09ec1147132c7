"""The OpenAI request fields specdec reads, checked one by one: a bad or unsupported field is an
``ApiError`` naming it (HTTP 400 with OpenAI's error JSON), never silently ignored.

Sampling fields as OpenAI and vLLM name them: ``temperature``, ``top_p``, ``max_tokens`` /
``max_completion_tokens``, ``stop``, ``seed``, ``logprobs`` / ``top_logprobs``, ``n``, and vLLM's
``top_k``, ``min_p``, ``ignore_eos``, ``stop_token_ids``, ``skip_special_tokens``. Structured
outputs: OpenAI's ``response_format`` (``json_object``, ``json_schema``) and vLLM's
``structured_outputs`` object (``json``, ``regex``, ``choice``, ``grammar``, ``json_object``; its
older ``guided_json`` / ``guided_regex`` / ``guided_choice`` / ``guided_grammar`` fields too). Fields
that do nothing to the output (``user``, ``stream_options`` without streaming) are accepted; fields
that would change it and that specdec does not implement (penalties, ``logit_bias``, ``tools``,
``echo``, ``best_of`` ...) are refused unless they carry their neutral value.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from specdec._checks import show
from specdec.outputs import SamplingParams
from specdec.structured import StructuredOutputsParams

# fields whose neutral value changes nothing: accepted only with that value
_NEUTRAL = {
    "presence_penalty": (0, 0.0),
    "frequency_penalty": (0, 0.0),
    "repetition_penalty": (1, 1.0),
    "logit_bias": ({},),
    "best_of": (1,),
    "echo": (False,),
    "suffix": ("",),
    "parallel_tool_calls": (True, False),
    "tools": ([],),
    "tool_choice": ("none",),
    "functions": ([],),
    "service_level": ("auto", "default"),
    "service_tier": ("auto", "default"),
    "store": (False,),
    "prompt_logprobs": (0,),
}
_COMMON = {"model", "stream", "stream_options", "temperature", "top_p", "top_k", "min_p", "max_tokens",
           "stop", "seed", "n", "ignore_eos", "stop_token_ids", "skip_special_tokens", "user",
           "metadata", "response_format", "structured_outputs", "guided_json", "guided_regex",
           "guided_choice", "guided_grammar", "guided_whitespace_pattern"}
_GUIDED = {"guided_json": "json", "guided_regex": "regex", "guided_choice": "choice",
           "guided_grammar": "grammar"}
COMPLETION_FIELDS = _COMMON | {"prompt", "logprobs"}
CHAT_FIELDS = _COMMON | {"messages", "logprobs", "top_logprobs", "max_completion_tokens",
                         "add_generation_prompt", "continue_final_message", "chat_template_kwargs",
                         "tools", "tool_choice", "parallel_tool_calls"}
MAX_USER_CHARS = 1024  # `user`: an end-user id (OpenAI documents no limit)
# OpenAI's roles: a template may build control tokens from the role ('<|' + role + '|>'), so a
# client cannot pick other ones
ROLES = ("system", "developer", "user", "assistant", "tool", "function")
# message keys passed to the chat template as given (besides role and content)
MESSAGE_KEYS = ("name", "tool_calls", "tool_call_id", "reasoning_content")


class ApiError(Exception):
    """An OpenAI-style error: HTTP status, message, type, param, code."""

    def __init__(self, status: int, message: str, param: Optional[str] = None,
                 code: Optional[str] = None, type_: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.type = status, message, param, code, type_

    def body(self) -> Dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}


def bad(param: str, value: Any, allowed: str, code: str = "invalid_value") -> ApiError:
    return ApiError(400, f"{param} = {show(value)}: {allowed}", param, code)


def _int(body: Mapping, name: str, lo: int, hi: Optional[int], allowed: str) -> Optional[int]:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < lo or (hi is not None and v > hi):
        raise bad(name, v, allowed)
    return v


def _num(body: Mapping, name: str, ok, allowed: str) -> Optional[float]:
    v = body.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not ok(v):
        raise bad(name, v, allowed)
    return float(v)


def _bool(body: Mapping, name: str) -> Optional[bool]:
    v = body.get(name)
    if v is None:
        return None
    if not isinstance(v, bool):
        raise bad(name, v, "true or false")
    return v


def _check_ignored(body: Mapping) -> None:
    """``user`` and ``metadata`` change nothing, so they may not cost anything either: held to
    OpenAI's limits (metadata: 16 pairs, keys up to 64 characters, string values up to 512)."""
    user = body.get("user")
    if user is not None and (not isinstance(user, str) or len(user) > MAX_USER_CHARS):
        raise bad("user", user, f"null or a string of up to {MAX_USER_CHARS} characters")
    meta = body.get("metadata")
    if meta is None:
        return
    if not isinstance(meta, dict) or len(meta) > 16:
        what = f"an object of {len(meta)} pairs" if isinstance(meta, dict) else show(meta)
        raise ApiError(400, f"metadata = {what}: null or an object of up to 16 pairs", "metadata",
                       "invalid_value")
    for key, value in meta.items():
        if len(key) > 64 or not isinstance(value, str) or len(value) > 512:
            raise bad(f"metadata.{show(key)}", value, "keys of up to 64 characters, string values "
                      "of up to 512")


class PathRedactor:
    """Removes the server's own file paths from messages sent to clients: a model's path shows as
    the name it is served under, a directory above it as nothing."""

    def __init__(self, names: Dict[str, str]) -> None:
        pairs: Dict[str, str] = {}
        for path, name in names.items():
            for p in {path, os.path.abspath(path), os.path.realpath(path)}:
                pairs.setdefault(p, name)
                parent = os.path.dirname(p.rstrip(os.sep))
                if parent not in ("", os.sep):
                    pairs.setdefault(parent + os.sep, "")
        # longest first: a file's path goes before its directory's
        self.pairs = sorted(pairs.items(), key=lambda kv: -len(kv[0]))

    @classmethod
    def for_llm(cls, llm: Any, model_name: str) -> "PathRedactor":
        names = {}
        for path, name in ((getattr(llm.tokenizer, "path", None), model_name),
                           (llm.model_path, model_name), (_drafter_model(llm), "the drafter")):
            if isinstance(path, str) and path and (os.sep in path or os.path.exists(path)):
                names.setdefault(path, name)
        return cls(names)

    def text(self, message: str) -> str:
        for path, name in self.pairs:
            message = message.replace(path, name)
        return message

    def error(self, e: ApiError) -> ApiError:
        e.message = self.text(e.message)
        return e


def _drafter_model(llm: Any) -> Optional[str]:
    sc = getattr(llm, "speculative_config", None)
    try:
        return sc.drafter_config().model if sc is not None and sc.uses_drafter() else None
    except (AttributeError, ValueError):
        return None


def check_fields(body: Any, allowed: set, what: str) -> Dict[str, Any]:
    if not isinstance(body, dict):
        raise ApiError(400, f"the request body must be a JSON object ({what}), not "
                       f"{type(body).__name__}", None, "invalid_json")
    _check_ignored(body)
    for name, value in body.items():
        if name in allowed:
            continue
        if name in _NEUTRAL:
            if value is None or any(value == n and type(value) is type(n) for n in _NEUTRAL[name]):
                continue
            raise ApiError(400, f"{name} = {show(value)}: not supported by specdec (only its neutral "
                           f"value {show(_NEUTRAL[name][0])} or leaving it out is allowed)",
                           name, "unsupported_parameter")
        shown = name if name.isprintable() else show(name)
        raise ApiError(400, f"{shown}: unknown or unsupported field for {what}; allowed fields: "
                       f"{', '.join(sorted(allowed))}", shown, "unsupported_parameter")
    return body


@dataclass
class Sampling:
    params: SamplingParams
    n: int
    stream: bool
    include_usage: bool
    constraint_field: Optional[str] = None  # the request field structured outputs came from
    tools: Any = None  # the chat request's tools (server.tools.ToolRequest), None without


def structured_outputs(body: Mapping) -> Tuple[Optional[StructuredOutputsParams], Optional[str]]:
    """The request's output constraint and the field it came from: ``response_format``
    (``{"type": "json_object"}``, ``{"type": "json_schema", "json_schema": {"name", "schema",
    "strict", "description"}}``; ``{"type": "text"}`` is none), vLLM's ``structured_outputs`` or
    one ``guided_*`` field. At most one of them."""
    found: List[Tuple[str, Dict[str, Any]]] = []
    rf = body.get("response_format")
    if rf is not None:
        if not isinstance(rf, dict) or rf.get("type") not in ("text", "json_object", "json_schema"):
            raise bad("response_format", rf, '{"type": "text"}, {"type": "json_object"} or {"type": '
                      '"json_schema", "json_schema": {"name": ..., "schema": {...}}}')
        kind = rf["type"]
        extra = sorted(set(rf) - {"type", "json_schema"}, key=str)
        if extra or (kind != "json_schema" and "json_schema" in rf):
            raise bad("response_format", rf, f'only "type" (and "json_schema" with type json_schema)')
        if kind == "json_object":
            found.append(("response_format", {"json_object": True}))
        elif kind == "json_schema":
            js = rf.get("json_schema")
            keys = {"name", "schema", "strict", "description"}
            if not isinstance(js, dict) or not isinstance(js.get("name"), str) or set(js) - keys:
                raise bad("response_format.json_schema", js, 'an object with "name" (a string), '
                          '"schema" (a JSON schema), optional "strict" and "description"')
            if js.get("strict") is not None and not isinstance(js["strict"], bool):
                raise bad("response_format.json_schema.strict", js["strict"], "true, false or null")
            # strict or not, the schema is enforced (as vLLM does); none given: any JSON value
            found.append(("response_format.json_schema.schema", {"json": js.get("schema", {})}))
    so = body.get("structured_outputs")
    if so is not None:
        if not isinstance(so, dict):
            raise bad("structured_outputs", so, "an object with one of json, regex, choice, grammar, "
                      "json_object")
        found.append(("structured_outputs", dict(so)))
    guided = {k: body[k] for k in _GUIDED if body.get(k) is not None}
    ws = body.get("guided_whitespace_pattern")
    if ws is not None and "guided_json" not in guided:
        raise bad("guided_whitespace_pattern", ws, "only beside guided_json")
    if guided:
        d = {_GUIDED[k]: v for k, v in guided.items()}
        if ws is not None:
            d["whitespace_pattern"] = ws
        found.append((next(iter(guided)), d))
    if not found:
        return None, None
    if len(found) > 1:
        names = [f.split(".")[0] for f, _ in found]
        raise ApiError(400, f"{', '.join(names)}: one output constraint per request is allowed",
                       names[1], "invalid_value")
    field, d = found[0]
    try:
        return StructuredOutputsParams.from_any(d, field), field
    except (TypeError, ValueError) as e:
        msg = str(e).replace("StructuredOutputsParams.", f"{field}." if field == "structured_outputs" else "")
        if not msg.startswith(field):
            msg = f"{field}: {msg}"
        param = msg.split(":", 1)[0].split(" ", 1)[0] if field == "structured_outputs" else field
        raise ApiError(400, msg, param, "invalid_value") from None


def sampling(body: Mapping, chat: bool, max_model_len: int, vocab_size: int) -> Sampling:
    """SamplingParams and n / stream from an OpenAI body (fields already known to be allowed)."""
    temperature = _num(body, "temperature", lambda v: 0 <= v <= 2, "a number in [0, 2]")
    top_p = _num(body, "top_p", lambda v: 0 < v <= 1, "a number in (0, 1]")
    min_p = _num(body, "min_p", lambda v: 0 <= v <= 1, "a number in [0, 1]")
    top_k = _int(body, "top_k", -1, 2**31 - 1, "-1 or 0 (all tokens) or a positive integer")
    n = _int(body, "n", 1, 16, "an integer in [1, 16]") or 1
    seed = _int(body, "seed", -(2**63), 2**64 - 1, "an integer")
    if seed is not None and seed < 0:
        seed += 2**64  # OpenAI's seeds are signed 64-bit
    names = ("max_completion_tokens", "max_tokens") if chat else ("max_tokens",)
    max_tokens, which = None, names[-1]
    for name in names:
        v = _int(body, name, 1, None, "null or an integer >= 1")
        if v is not None and max_tokens is None:
            max_tokens, which = v, name
    if max_tokens is None:
        max_tokens = None if chat else 16  # chat: up to the context (vLLM); completions: OpenAI's 16
    if max_tokens is not None and max_tokens >= max_model_len:
        raise bad(which, max_tokens, f"at most {max_model_len - 1} (max_model_len {max_model_len} "
                  "holds the prompt and the output)", "context_length_exceeded")
    stop = body.get("stop")
    if stop is not None:
        if isinstance(stop, str):
            stop = [stop]
        if (not isinstance(stop, list) or len(stop) > 16
                or not all(isinstance(s, str) and s for s in stop)):
            raise bad("stop", body.get("stop"), "null, a non-empty string or a list of up to 16 of them")
    stop_ids = body.get("stop_token_ids")
    if isinstance(stop_ids, list) and len(stop_ids) > vocab_size:
        raise bad("stop_token_ids", stop_ids, f"null or a list of at most {vocab_size} token ids")
    if stop_ids is not None and (not isinstance(stop_ids, list) or not all(
            isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab_size for t in stop_ids)):
        raise bad("stop_token_ids", stop_ids, f"null or a list of token ids in [0, {vocab_size})")
    logprobs = None
    if chat:
        want = _bool(body, "logprobs")
        top = _int(body, "top_logprobs", 0, 20, "null or an integer in [0, 20]")
        if top is not None and not want:
            raise bad("top_logprobs", top, "only with logprobs = true")
        logprobs = (top or 0) if want else None
    else:
        logprobs = _int(body, "logprobs", 0, 20, "null or an integer in [0, 20]")
    stream = _bool(body, "stream") or False
    opts = body.get("stream_options")
    include_usage = False
    if opts is not None:
        if not isinstance(opts, dict) or set(opts) - {"include_usage"}:
            raise bad("stream_options", opts, '{"include_usage": true|false}')
        if not stream:
            raise bad("stream_options", opts, "only with stream = true")
        v = opts.get("include_usage")
        if v is not None and not isinstance(v, bool):
            raise bad("stream_options.include_usage", v, "true or false")
        include_usage = bool(v)
    ignore_eos = _bool(body, "ignore_eos") or False
    skip_special = _bool(body, "skip_special_tokens")
    constraint, constraint_field = structured_outputs(body)
    try:
        params = SamplingParams(
            temperature=1.0 if temperature is None else temperature,
            top_p=1.0 if top_p is None else top_p, top_k=top_k or 0,
            min_p=min_p or 0.0, seed=seed, max_tokens=max_tokens, stop=stop,
            stop_token_ids=stop_ids, ignore_eos=ignore_eos, logprobs=logprobs,
            skip_special_tokens=True if skip_special is None else skip_special,
            structured_outputs=constraint)
    except ValueError as e:  # SamplingParams.<field> = ...: name the request's field
        msg = str(e)
        field = msg.split(" ", 1)[0].replace("SamplingParams.", "").split("[")[0]
        raise ApiError(400, msg.replace("SamplingParams.", ""), field, "invalid_value") from None
    return Sampling(params, n, stream, include_usage, constraint_field)


def prompts(body: Mapping, vocab_size: int, max_prompts: int, max_model_len: int,
            max_text_bytes: int) -> List[Any]:
    """The prompts of a completions request: a string, a list of strings, a list of token ids or
    a list of such lists (each becomes n choices). Sizes are checked before contents: at most
    max_prompts prompts, fewer than max_model_len ids each, and strings no longer than
    max_text_bytes (more than max_model_len tokens however they are tokenized), so that a huge
    request is refused at once, without tokenizing it."""
    p = body.get("prompt")
    allowed = "a string, a list of strings, a list of token ids, or a list of token-id lists"
    if isinstance(p, str):
        check_text_size("prompt", p, max_text_bytes, max_model_len)
        return [p]
    if not isinstance(p, list) or not p:
        raise bad("prompt", p, allowed)
    nested = isinstance(p[0], (str, list))
    if nested and len(p) > max_prompts:
        raise ApiError(400, f"prompt: {len(p)} prompts; at most {max_prompts} completions can be in "
                       "flight on this server (--max-pending)", "prompt", "invalid_value")

    def ids(x: Any, where: str) -> Dict[str, List[int]]:
        if len(x) >= max_model_len:
            raise ApiError(400, f"{where}: {len(x)} tokens; at most max_model_len - 1 = {max_model_len - 1} "
                           "fit with one generated token", where, "context_length_exceeded")
        if not x or not all(isinstance(t, int) and not isinstance(t, bool) for t in x):
            raise bad(where, x, allowed)
        for k, t in enumerate(x):
            if not 0 <= t < vocab_size:
                raise bad(f"{where}[{k}]", t, f"token ids in [0, {vocab_size})")
        return {"prompt_token_ids": list(x)}

    if all(isinstance(x, str) for x in p):
        for i, x in enumerate(p):
            check_text_size(f"prompt[{i}]", x, max_text_bytes, max_model_len)
        return list(p)
    if all(isinstance(x, int) and not isinstance(x, bool) for x in p):
        return [ids(p, "prompt")]
    if all(isinstance(x, list) for x in p):
        return [ids(x, f"prompt[{i}]") for i, x in enumerate(p)]
    raise bad("prompt", p, allowed)


def check_text_size(field: str, text: str, max_text_bytes: int, max_model_len: int) -> None:
    """Refuses text longer than max_text_bytes (UTF-8 bytes, at most 4 a character) before it is
    tokenized: no tokenization of it could fit max_model_len tokens."""
    if len(text) > max_text_bytes or len(text.encode("utf-8", "surrogatepass")) > max_text_bytes:
        raise ApiError(400, f"{field}: {len(text)} characters, more than max_model_len = {max_model_len} "
                       f"tokens of this vocabulary can hold (at most {max_text_bytes} bytes)", field,
                       "context_length_exceeded")


def messages(body: Mapping, max_text_bytes: int, max_model_len: int) -> List[Dict[str, Any]]:
    """Chat messages for the template: "role", "content" (text; OpenAI's text parts joined; null
    only beside "tool_calls") and the keys of MESSAGE_KEYS as given; their text together no
    longer than max_text_bytes (see check_text_size)."""
    ms = body.get("messages")
    if not isinstance(ms, list) or not ms:
        raise bad("messages", ms, 'a non-empty list of {"role": ..., "content": ...} objects')
    if len(ms) >= max_model_len:
        raise ApiError(400, f"messages: {len(ms)} messages; more than max_model_len = {max_model_len} "
                       "tokens can hold", "messages", "context_length_exceeded")
    out = []
    total = 0
    for i, m in enumerate(ms):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise bad(f"messages[{i}]", m, 'an object with a string "role" and "content"')
        if m["role"] not in ROLES:
            raise bad(f"messages[{i}].role", m["role"], f"one of {', '.join(ROLES)}")
        extra = sorted(set(m) - {"role", "content", *MESSAGE_KEYS})
        if extra:
            key = extra[0] if extra[0].isprintable() else show(extra[0])
            raise bad(f"messages[{i}].{key}", m[extra[0]], "not supported by specdec (role, "
                      f"content, {', '.join(MESSAGE_KEYS)} are)", "unsupported_parameter")
        c = m.get("content")
        if isinstance(c, list):  # [{"type": "text", "text": ...}, ...]
            texts = []
            for j, part in enumerate(c):
                if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise bad(f"messages[{i}].content[{j}]", part,
                              'a {"type": "text", "text": ...} part (specdec reads text only)',
                              "unsupported_parameter")
                texts.append(part["text"])
            c = "\n".join(texts)  # as LLM.chat and vLLM join text parts
        if not isinstance(c, str) and not (c is None and m.get("tool_calls")):
            raise bad(f"messages[{i}].content", c,
                      "a string or a list of text parts (null only beside tool_calls)")
        msg = {k: m[k] for k in MESSAGE_KEYS if k in m}
        msg.update(role=m["role"], content=c)
        if isinstance(msg.get("tool_calls"), list):  # OpenAI sends arguments as JSON text;
            msg["tool_calls"] = [_arguments_as_object(t) for t in msg["tool_calls"]]  # templates want objects
        # characters: at least as many bytes (tool calls counted as their JSON)
        total += len(c or "") + len(m["role"]) + sum(len(repr(m[k])) for k in MESSAGE_KEYS if k in m)
        if total > max_text_bytes:
            raise ApiError(400, f"messages: more than {max_text_bytes} characters up to messages[{i}], "
                           f"more than max_model_len = {max_model_len} tokens of this vocabulary can "
                           "hold", "messages", "context_length_exceeded")
        out.append(msg)
    return out


def _arguments_as_object(call: Any) -> Any:
    """A tool call with its function's ``arguments`` as an object when they are JSON text (as
    vLLM passes them: chat templates write ``arguments | tojson``)."""
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        return call
    args = call["function"].get("arguments")
    if isinstance(args, str):
        try:
            value = json.loads(args)
        except ValueError:
            return call
        return {**call, "function": {**call["function"], "arguments": value}}
    return call


def _finite(lp: float) -> float:
    """A logprob JSON can carry: a token structured outputs masked has -inf; vLLM sends -9999.0."""
    return lp if math.isfinite(lp) else -9999.0


def completion_logprobs(entries: List[Dict[int, Any]], token_ids: List[int], piece,
                        offset: int) -> Tuple[Dict[str, Any], int]:
    """The legacy completions ``logprobs`` object for these tokens (and the next text offset).
    ``top_logprobs`` is keyed by token text: where two tokens read the same (a byte token beside
    a merged one), the larger logprob stays, so the chosen token's entry is its own."""
    tokens, lps, tops, offsets = [], [], [], []
    for tid, pos in zip(token_ids, entries):
        text = piece(tid)
        tokens.append(text)
        lps.append(_finite(pos[tid].logprob))
        top: Dict[str, float] = {}
        for t, lp in pos.items():  # the top n and the token
            key, v = piece(t), _finite(lp.logprob)
            if key not in top or v > top[key]:
                top[key] = v
        tops.append(top)
        offsets.append(offset)
        offset += len(text)
    return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offsets}, offset


def chat_logprobs(entries: List[Dict[int, Any]], token_ids: List[int], piece, top_n: int,
                  piece_bytes) -> Dict[str, Any]:
    """The chat ``logprobs`` object: ``content`` with each token, its logprob and top alternatives
    (``bytes``: the token's own bytes, also for a part of a UTF-8 character)."""
    content = []
    for tid, pos in zip(token_ids, entries):
        ranked = sorted(((lp.rank, t, lp) for t, lp in pos.items() if lp.rank is not None and lp.rank <= top_n),
                        key=lambda x: x[0])
        content.append({"token": piece(tid), "logprob": _finite(pos[tid].logprob), "bytes": piece_bytes(tid),
                        "top_logprobs": [{"token": piece(t), "logprob": _finite(lp.logprob),
                                          "bytes": piece_bytes(t)} for _, t, lp in ranked]})
    return {"content": content}
