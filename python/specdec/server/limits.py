"""What one client may cost the server before its request is parsed: request bodies read under a
deadline and a byte budget shared by every connection, large bodies parsed off the event loop,
and request headers read under a deadline (a uvicorn protocol class).

- A body over ``max_body_bytes`` is a 413 before it is read (``Content-Length``) or as soon as it
  passes the size (chunked).
- Every body counts against ``max_inflight_body_bytes`` from its headers (its ``Content-Length``;
  a chunked body as its bytes arrive) until the request's handler is done with it; a body that
  would go over is a 413 at once, so many clients sending big bodies together cost the server at
  most that many bytes, not one body each.
- A body must be complete within ``body_timeout_s`` of its headers: a client that stalls or drips
  gets a 408 and its connection is closed.
- A body over 64 KiB is parsed in a thread of its own, field by field: a field other than the
  prompt, the messages, ``stop_token_ids`` and ``chat_template_kwargs`` (whose valid size grows
  with the model) is refused past 64 KiB of JSON before it is parsed, so a 30 MiB ``metadata``
  never holds the interpreter (the garbage collector is paused meanwhile: a body of millions of
  small arrays otherwise triggers collections that hold it for seconds).
- Request headers must be complete within ``header_timeout_s`` of the connection opening or of
  the previous response (uvicorn itself waits for ever): half-sent headers are closed.
"""

from __future__ import annotations

import asyncio
import gc
import json
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Dict, Optional

from starlette.requests import ClientDisconnect

from specdec.server.protocol import ApiError

SMALL_BODY_BYTES = 1 << 16  # bodies up to this size are parsed in the event loop (microseconds)


@dataclass(frozen=True)
class ServeLimits:
    """The server's limits on what clients send (``specdec serve`` flags of the same names)."""
    max_body_bytes: int = 32 << 20            # --max-body-bytes
    max_inflight_body_bytes: int = 128 << 20  # --max-inflight-body-bytes
    body_timeout_s: float = 60.0              # --body-timeout
    header_timeout_s: float = 10.0            # --header-timeout
    limit_concurrency: int = 1024             # --limit-concurrency (0: none)
    keep_alive_s: int = 5                     # uvicorn's timeout_keep_alive
    max_header_bytes: int = 16 << 10          # h11's largest incomplete request head

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_inflight_body_bytes", "body_timeout_s", "header_timeout_s",
                     "keep_alive_s", "max_header_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{_flag(name)} = {value!r}: must be a positive number")
        if self.max_inflight_body_bytes < self.max_body_bytes:
            raise ValueError(f"--max-inflight-body-bytes = {self.max_inflight_body_bytes}: must be at "
                             f"least --max-body-bytes = {self.max_body_bytes} (else no body of that "
                             "size could ever be read)")
        if isinstance(self.limit_concurrency, bool) or not isinstance(self.limit_concurrency, int) \
                or self.limit_concurrency < 0:
            raise ValueError(f"--limit-concurrency = {self.limit_concurrency!r}: must be 0 (none) or a "
                             "positive number of connections")

    def uvicorn_options(self) -> Dict[str, Any]:
        """Keyword arguments for ``uvicorn.run``: the header deadline's protocol and uvicorn's own
        limits."""
        return {"http": header_deadline_protocol(self.header_timeout_s),
                "timeout_keep_alive": self.keep_alive_s,
                "h11_max_incomplete_event_size": self.max_header_bytes,
                "limit_concurrency": self.limit_concurrency or None}


def _flag(name: str) -> str:
    """The ``specdec serve`` flag of a field (``body_timeout_s`` -> ``--body-timeout``)."""
    return "--" + (name[:-2] if name.endswith("_s") else name).replace("_", "-")


class BodyBudget:
    """Bytes of request bodies held by all connections together (event-loop thread only)."""

    def __init__(self, limit: int) -> None:
        self.limit, self.used = limit, 0

    def hold(self) -> "_Held":
        return _Held(self)


class _Held:
    """One request's share of the budget: taken as its bytes arrive, given back on exit."""

    def __init__(self, budget: BodyBudget) -> None:
        self.budget, self.bytes = budget, 0

    def take(self, n: int) -> None:
        b = self.budget
        if b.used + n > b.limit:
            raise ApiError(413, f"the server is reading {b.used} bytes of request bodies, its limit "
                           f"(--max-inflight-body-bytes) is {b.limit}: retry later", None,
                           "request_too_large")
        b.used += n
        self.bytes += n

    def __enter__(self) -> "_Held":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.budget.used -= self.bytes
        self.bytes = 0


class BodyReader:
    """Reads and parses JSON request bodies within ``limits``."""

    def __init__(self, limits: ServeLimits) -> None:
        self.limits = limits
        self.budget = BodyBudget(limits.max_inflight_body_bytes)
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="specdec-json")

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)

    async def read(self, request: Any, held: _Held) -> bytearray:
        cap = self.limits.max_body_bytes
        length = request.headers.get("content-length")
        if length is not None and length.isdigit():
            if int(length) > cap:
                raise ApiError(413, f"the request body has {length} bytes: at most {cap} "
                               "(--max-body-bytes)", None, "request_too_large")
            # the whole body's share at once: first come, first served; the others are refused
            # before anything is read (taken chunk by chunk, many big bodies at once could all
            # be refused half-way)
            held.take(int(length))
        data = bytearray()

        async def collect() -> None:
            async for chunk in request.stream():
                if len(data) + len(chunk) > cap:
                    raise ApiError(413, f"the request body is over {cap} bytes (--max-body-bytes)",
                                   None, "request_too_large")
                if len(data) + len(chunk) > held.bytes:  # chunked: taken as it comes
                    held.take(len(data) + len(chunk) - held.bytes)
                data.extend(chunk)

        timeout = self.limits.body_timeout_s
        done = False
        try:
            await asyncio.wait_for(collect(), timeout)
            done = True
            return data
        except ClientDisconnect:  # nobody reads the answer: no traceback in the log either
            raise ApiError(400, "the client disconnected before its request body was complete", None,
                           "client_disconnected") from None
        except asyncio.TimeoutError:
            raise ApiError(408, f"the request body did not arrive within {timeout:g} s "
                           f"({len(data)} bytes came; --body-timeout)", None, "request_timeout") from None
        finally:
            if not done:  # freed now, not when the collector finds the exception's cycle with
                data.clear()  # this frame (the server's RSS grew with every refused body)

    async def read_json(self, request: Any, held: _Held) -> Any:
        data = await self.read(request, held)
        if len(data) <= SMALL_BODY_BYTES:
            return parse_json(data)
        return await asyncio.get_running_loop().run_in_executor(self.pool, _parse_large, data)


def parse_json(data: Any) -> Any:
    """A request body as JSON, or a 400 saying why not."""
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:
        what = "nested too deeply" if isinstance(e, RecursionError) else str(e)
        raise ApiError(400, f"the request body is not valid JSON: {what}", None, "invalid_json") from None


# top-level fields whose valid size grows with the model (prompts, conversations, token ids); any
# other field is at most this many characters of JSON, checked before it is parsed
FIELD_CHARS = 1 << 16
GROWING_FIELDS = frozenset({"prompt", "messages", "stop_token_ids", "chat_template_kwargs"})
_WS = re.compile(r"[ \t\n\r]*")
_SCAN = json.JSONDecoder().scan_once  # the C scanner, value by value


def parse_object(data: Any) -> Any:
    """A large body: its top-level object walked field by field, so that a field that changes
    little (``metadata``, ``user``, an unknown one) and holds megabytes is refused after reading
    ``FIELD_CHARS`` of it, not parsed whole (the parser holds the interpreter: a 30 MiB metadata
    object stalled every client for seconds, even from another thread)."""
    try:
        text = bytes(data).decode(json.detect_encoding(data), "surrogatepass")
    except UnicodeDecodeError as e:
        raise ApiError(400, f"the request body is not valid JSON: {e}", None, "invalid_json") from None
    i = _WS.match(text, 0).end()
    if not text.startswith("{", i):
        raise ApiError(400, "the request body must be a JSON object", None, "invalid_json")
    try:
        return _walk_object(text, _WS.match(text, i + 1).end())
    except (json.JSONDecodeError, StopIteration, IndexError, RecursionError) as e:
        what = "nested too deeply" if isinstance(e, RecursionError) else str(e) or "unexpected end"
        raise ApiError(400, f"the request body is not valid JSON: {what}", None, "invalid_json") from None


def _walk_object(text: str, i: int) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    if text.startswith("}", i):
        return _end(text, i + 1, out)
    while True:
        if not text.startswith('"', i):
            raise json.JSONDecodeError("Expecting property name enclosed in double quotes", text, i)
        key, i = json.decoder.scanstring(text, i + 1)
        i = _WS.match(text, i).end()
        if not text.startswith(":", i):
            raise json.JSONDecodeError("Expecting ':' delimiter", text, i)
        i = _WS.match(text, i + 1).end()
        if key in GROWING_FIELDS:
            out[key], i = _SCAN(text, i)
        else:
            out[key], i = _bounded_value(text, i, key)
        i = _WS.match(text, i).end()
        if text.startswith("}", i):
            return _end(text, i + 1, out)
        if not text.startswith(",", i):
            raise json.JSONDecodeError("Expecting ',' delimiter", text, i)
        i = _WS.match(text, i + 1).end()


def _bounded_value(text: str, i: int, key: str) -> Any:
    try:
        value, end = _SCAN(text[i:i + FIELD_CHARS], 0)
    except (json.JSONDecodeError, StopIteration):
        if len(text) - i <= FIELD_CHARS:
            raise
        from specdec._checks import show
        raise ApiError(400, f"{show(key)}: more than {FIELD_CHARS} characters of JSON; only prompt, "
                       "messages, stop_token_ids and chat_template_kwargs may be larger", key,
                       "invalid_value") from None
    return value, i + end


def _end(text: str, i: int, out: Dict[str, Any]) -> Dict[str, Any]:
    if _WS.match(text, i).end() != len(text):
        raise json.JSONDecodeError("Extra data", text, i)
    return out


def _parse_large(data: bytearray) -> Any:
    # one parse at a time (a pool of one thread): pausing the collector here cannot race another
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return parse_object(data)
    finally:
        if was_enabled:
            gc.enable()


def header_deadline_protocol(timeout_s: float) -> type:
    """uvicorn's HTTP protocol class (h11, or httptools when installed), closing a connection whose
    request headers are not complete within ``timeout_s`` of its opening or of its last response."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    class HeaderDeadlineProtocol(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
        _header_timer: Optional[asyncio.TimerHandle] = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm_header_timer()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm_header_timer()

        def connection_lost(self, exc: Optional[Exception]) -> None:
            self._disarm_header_timer()
            super().connection_lost(exc)

        def _arm_header_timer(self) -> None:
            self._disarm_header_timer()
            if not self.transport.is_closing():
                self._header_timer = self.loop.call_later(timeout_s, self._header_timeout)

        def _disarm_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _header_timeout(self) -> None:
            self._header_timer = None
            cycle = self.cycle  # None, or the last request: its response done means none is open
            if (cycle is None or cycle.response_complete) and not self.transport.is_closing():
                self.transport.close()

    return HeaderDeadlineProtocol
