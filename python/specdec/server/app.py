"""The OpenAI-compatible HTTP server (FastAPI + uvicorn) over one ``specdec.LLM``.

One engine loop serves every client: a background thread steps the ``LLMEngine`` whenever a
request is in it, so requests from concurrent clients share each batched forward (prefills,
decodes and speculative verifications together). Each HTTP request adds one engine request per
choice (``n``) and awaits their outputs, which the loop hands to the event loop thread-safely.
A client that disconnects aborts its requests at once (their KV blocks go back to the pool);
when ``max_pending`` requests are already in flight a new one gets a 503.

Endpoints: ``GET /v1/models``, ``POST /v1/completions``, ``POST /v1/chat/completions``
(streaming as server-sent events ending with ``data: [DONE]``, or whole), ``GET /health``,
``GET /metrics`` (Prometheus text). Errors are OpenAI's JSON:
``{"error": {"message", "type", "param", "code"}}``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import json
import logging
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, AsyncIterator, Dict, List, Optional, Tuple

from fastapi import FastAPI, Request as HttpRequest
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from specdec.chat_template import RESERVED_VARIABLES
from specdec.server import tools
from specdec.server import protocol
from specdec.server.limits import BodyReader, ServeLimits
from specdec.server.metrics import ServerMetrics
from specdec.server.protocol import ApiError, PathRedactor

log = logging.getLogger("specdec.server")

SMALL_PROMPT_CHARS = 1 << 16  # prompts up to this size are tokenized in the event loop (< 1 ms)


class _AsyncSink:
    """The engine's output queue for one HTTP request: put() from the engine thread, get() in the
    event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, on_finished=None) -> None:
        self.loop = loop
        self.queue: "asyncio.Queue[Any]" = asyncio.Queue()
        self.on_finished = on_finished  # called in the event loop when the engine ends a request

    def put(self, item: Any) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
            if item.finished and self.on_finished is not None:
                self.loop.call_soon_threadsafe(self.on_finished, item.request_id)
        except RuntimeError:  # the event loop has closed (shutdown): nobody is waiting
            pass


_GONE = object()  # put in a request's output queue when its client disconnects


async def _tell_disconnect(http: HttpRequest, queue: "asyncio.Queue[Any]") -> None:
    """Puts _GONE in `queue` when the client disconnects. Once the body has been read, the
    request's receive channel has nothing more to say until then."""
    try:
        while (await http.receive())["type"] != "http.disconnect":
            pass
    except Exception as e:  # noqa: BLE001 - a channel that cannot be watched: the request runs on
        log.debug("cannot watch the client's connection: %r", e)
        return
    queue.put_nowait(_GONE)


class EngineLoop:
    """Steps the engine in a thread of its own while requests are in it."""

    def __init__(self, llm: Any) -> None:
        self.engine = llm.engine
        self._stop = False
        self.error: Optional[BaseException] = None
        self.thread = threading.Thread(target=self._run, name="specdec-engine", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self._stop = True
        with self.engine._cond:
            self.engine._cond.notify_all()
        self.thread.join(timeout=30)

    @property
    def alive(self) -> bool:
        return self.thread.is_alive()

    def _run(self) -> None:
        engine = self.engine
        while not self._stop:
            if engine.has_unfinished_requests():
                try:
                    engine.step()
                except Exception as e:  # noqa: BLE001 - its requests got the error; keep serving
                    log.error("engine step failed (its requests were ended with the error): %s", e)
                continue
            with engine._cond:
                engine._cond.wait_for(lambda: self._stop or engine.has_unfinished_requests(), timeout=1.0)


class Server:
    def __init__(self, llm: Any, model_name: str, api_key: Optional[str] = None,
                 max_pending: Optional[int] = None, chat_template: Optional[str] = None) -> None:
        self.llm = llm
        self.chat_template = chat_template  # None: the model's own
        self.model_name = model_name
        self.api_key = api_key or None
        self.max_pending = max_pending or 4 * llm.max_num_seqs
        # engine requests in flight: added when submitted, removed when the engine ends them
        # (whether or not their client is still reading); event-loop thread only
        self.inflight: set = set()
        self.created = int(time.time())
        self.metrics = ServerMetrics(llm, model_name)
        # the server's file paths never reach a client: the model's shows as the served name
        self.redact = PathRedactor.for_llm(llm, model_name)
        self.loop = EngineLoop(llm)
        # text longer than this cannot fit max_model_len tokens, however it is tokenized: refused
        # before tokenizing (the longest token's bytes x the context, and a margin for markers)
        tok = llm.tokenizer
        longest = max(len(tok.decode_bytes([i], special=True)) for i in range(tok.vocab_size))
        self.max_text_bytes = (llm.runner.max_model_len + 1) * max(1, longest) + 64
        # large prompts are tokenized in their own small pool, so that they never hold up small
        # ones (tokenized in the event loop) nor aborts and /metrics (the default pool)
        self.tokenize_pool = ThreadPoolExecutor(2, thread_name_prefix="specdec-tokenize")

    # ---- helpers ----
    def _check_model(self, body: Dict[str, Any]) -> None:
        model = body.get("model")
        if model is None:
            raise ApiError(400, f"model: required; this server serves {self.model_name!r}", "model",
                           "missing_required_parameter")
        if model != self.model_name:
            raise ApiError(404, f"The model {model!r} does not exist; this server serves "
                           f"{self.model_name!r} (GET /v1/models)", "model", "model_not_found",
                           "invalid_request_error")

    @property
    def pending(self) -> int:
        return len(self.inflight)

    def num_waiting(self) -> int:
        """Requests waiting to be scheduled: the scheduler's queue and those handed to the engine
        since its last step (what /metrics exports and Ray's autoscaler reads)."""
        engine = self.llm.engine
        return len(engine.core.scheduler.waiting) + len(engine._inbox)

    def _check_room(self, n: int) -> None:
        """Before any work on a request of n engine requests: 400 if it can never fit, 503 if it
        does not fit now."""
        if n > self.max_pending:
            raise ApiError(400, f"{n} completions (prompts x n): at most {self.max_pending} can be "
                           "in flight on this server (--max-pending)", "n", "invalid_value")
        if self.pending + n > self.max_pending:
            raise ApiError(503, f"the server is at capacity: {self.pending} requests in flight, the "
                           f"limit is {self.max_pending} (--max-pending); retry later", None,
                           "server_busy", "server_overloaded")

    def _build(self, prompts: List[Any], params: Any, n: int, field: str,
               constraint_field: Optional[str] = None) -> List[Tuple[int, Any]]:
        """(choice index, engine Request) for every prompt x n: tokenizes and compiles an output
        constraint, so it runs in a worker thread, not in the event loop."""
        llm = self.llm
        max_len = llm.runner.max_model_len
        reqs = []
        for i, p in enumerate(prompts):
            where = f"{field}[{i}]" if len(prompts) > 1 else field
            for j in range(n):
                sp = params
                if n > 1 and params.seed is not None:  # each choice its own stream of draws
                    sp = _with_seed(params, (params.seed + j) % 2**64)
                try:
                    r = llm._make_request(p, sp, where, False, stream=True)
                except ValueError as e:
                    msg = str(e)
                    if msg.startswith("SamplingParams.structured_outputs") and constraint_field:
                        # the grammar library could not take the request's schema / regex / grammar
                        msg = constraint_field + msg[msg.index(":"):]
                        raise ApiError(400, msg, constraint_field, "invalid_value") from None
                    code = "context_length_exceeded" if "max_model_len" in msg else "invalid_value"
                    raise ApiError(400, msg, where, code) from None
                if sp.max_tokens is not None and r.num_tokens + sp.max_tokens > max_len:
                    raise ApiError(400, f"{where}: {r.num_tokens} prompt tokens + max_tokens "
                                   f"{sp.max_tokens} = {r.num_tokens + sp.max_tokens}: more than this "
                                   f"model's context of {max_len} tokens (max_model_len); ask for at "
                                   f"most {max_len - r.num_tokens} tokens", "max_tokens",
                                   "context_length_exceeded")
                reqs.append((i * n + j, r))
        return reqs

    async def _submit(self, prompts: List[Any], params: Any, n: int, sink: "_AsyncSink",
                      field: str, constraint_field: Optional[str] = None) -> List[Tuple[int, Any]]:
        self._check_room(len(prompts) * n)
        size = sum(len(p) if isinstance(p, str) else len(p.get("prompt_token_ids", ())) for p in prompts)
        if size <= SMALL_PROMPT_CHARS and params.structured_outputs is None:
            reqs = self._build(prompts, params, n, field)
        else:  # a long prompt to tokenize, or a grammar to compile: off the event loop
            reqs = await asyncio.get_running_loop().run_in_executor(
                self.tokenize_pool, self._build, prompts, params, n, field, constraint_field)
        self._check_room(len(reqs))  # others may have come in meanwhile
        for _, r in reqs:
            self.inflight.add(r.request_id)
            self.llm.engine.add_request(r, sink)
        return reqs

    def _engine_finished(self, request_id: str) -> None:
        self.inflight.discard(request_id)

    def _abort(self, reqs: List[Tuple[int, Any]], done: set) -> None:
        left = [r for _, r in reqs if r.request_id not in done]
        if not left:
            return
        engine = self.llm.engine

        def abort() -> None:
            for r in left:
                engine.abort_request(r.request_id)
                # as the engine ended it: 'abort', or its own reason when it finished first
                self.metrics.finished(len(r.prompt_token_ids), r.num_output_tokens,
                                      r.finish_reason or "abort", time.monotonic() - r.arrival_time)
        # abort waits for a running step to end: not in the event loop
        asyncio.get_running_loop().run_in_executor(None, abort)

    def _spec_metrics(self, m: Dict[str, Any]) -> Dict[str, Any]:
        keys = ("num_drafts", "num_draft_tokens", "num_accepted_tokens", "num_accepted_tokens_per_pos",
                "acceptance_rate", "mean_acceptance_length", "num_cached_tokens", "num_preemptions")
        # NaN (no drafts yet) is not JSON: null
        return {k: (None if isinstance(m[k], float) and m[k] != m[k] else m[k]) for k in keys if k in m}

    async def _outputs(self, http: HttpRequest, reqs: List[Tuple[int, Any]], sink: _AsyncSink,
                       watch: bool, flight: "_Flight",
                       constraint_field: Optional[str] = None) -> AsyncIterator[Tuple[int, Any, Any]]:
        """(choice index, Request, StreamOutput) as they come; aborts what is left when the consumer
        stops early (a streaming response is closed when its client goes away) or, with `watch`
        (a whole response, which nothing else cancels), as soon as the client disconnects."""
        index = {r.request_id: (i, r) for i, r in reqs}
        done = flight.done
        last_time: Dict[str, float] = {}
        watcher = asyncio.ensure_future(_tell_disconnect(http, sink.queue)) if watch else None
        try:
            while len(done) < len(reqs):
                item = await sink.queue.get()
                if item is _GONE:
                    log.info("client disconnected: aborting %d requests", len(reqs) - len(done))
                    return
                error = getattr(item, "error", None)
                if error is not None:
                    msg = str(error)
                    if isinstance(error, ValueError) and msg.startswith("SamplingParams.structured_outputs"):
                        # its own constraint, past the grammar library's limits mid-output
                        field = constraint_field or "structured_outputs"
                        raise ApiError(400, field + msg[msg.index(":"):], field, "invalid_value")
                    raise ApiError(500, f"the engine failed on this request: {error}", None,
                                   "engine_error", "server_error")
                i, r = index[item.request_id]
                now = time.monotonic()
                if item.new_token_ids:
                    prev = last_time.get(item.request_id)
                    if prev is None:
                        self.metrics.first_token(now - r.arrival_time)
                    else:
                        self.metrics.token_gap(now - prev, len(item.new_token_ids))
                    last_time[item.request_id] = now
                if item.finished:
                    flight.finish(item.request_id)
                    out = item.output
                    if out is not None:
                        self.metrics.finished(len(out.prompt_token_ids), len(out.outputs[0].token_ids),
                                              out.outputs[0].finish_reason or "abort",
                                              now - r.arrival_time)
                yield i, r, item
        finally:
            if watcher is not None:
                watcher.cancel()
            flight.close()

    # ---- endpoints ----
    async def completions(self, http: HttpRequest, body: Dict[str, Any], chat: bool) -> Response:
        fields = protocol.CHAT_FIELDS if chat else protocol.COMPLETION_FIELDS
        protocol.check_fields(body, fields, "/v1/chat/completions" if chat else "/v1/completions")
        self._check_model(body)
        llm = self.llm
        s = protocol.sampling(body, chat, llm.runner.max_model_len, llm.config.vocab_size)
        if chat:
            s.tools = self._tools(body, s)
            msgs = protocol.messages(body, self.max_text_bytes, llm.runner.max_model_len)
            add_gen = body.get("add_generation_prompt", True)
            cont = body.get("continue_final_message", False)
            for key, value in (("add_generation_prompt", add_gen), ("continue_final_message", cont)):
                if not isinstance(value, bool):
                    raise protocol.bad(key, value, "true or false")
            kwargs = body.get("chat_template_kwargs")
            if kwargs is not None and not isinstance(kwargs, dict):
                raise protocol.bad("chat_template_kwargs", kwargs, "an object of template variables")
            for key in kwargs or {}:
                if key in RESERVED_VARIABLES:
                    raise protocol.bad(f"chat_template_kwargs.{key}", kwargs[key],
                                       "not settable: specdec sets it (pass tools as the request's "
                                       "tools field)")
            size = (len(json.dumps(msgs, ensure_ascii=False))
                    + len(json.dumps(kwargs or {}, ensure_ascii=False)))
            if size > self.max_text_bytes:
                raise ApiError(400, f"messages: {size} characters with chat_template_kwargs, more "
                               f"than max_model_len = {llm.runner.max_model_len} tokens can hold",
                               "messages", "context_length_exceeded")
            options = dict(continue_final_message=cont, chat_template_kwargs=kwargs,
                           chat_template=self.chat_template)
            if s.tools is not None:  # the model's own template renders them (its tool_use one if any)
                options["tools"] = s.tools.tools
            def render():  # one render, in a worker process bounded in time and memory
                return llm.tokenizer.chat_prompt(msgs, add_gen, **options)
            try:  # off the event loop: a slow template never holds up other clients
                text, ids = await asyncio.get_running_loop().run_in_executor(self.tokenize_pool, render)
            except Exception as e:  # noqa: BLE001 - no template, or one specdec cannot render
                raise ApiError(400, f"messages: {e}", "messages", "chat_template_error") from None
            prompts = [{"prompt": text, "prompt_token_ids": ids}]
        else:
            prompts = protocol.prompts(body, llm.config.vocab_size, max(1, self.max_pending // s.n),
                                       llm.runner.max_model_len, self.max_text_bytes)
        sink = _AsyncSink(asyncio.get_running_loop(), self._engine_finished)
        reqs = await self._submit(prompts, s.params, s.n, sink, "messages" if chat else "prompt",
                                  s.constraint_field)
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        if s.stream:
            gen = self._stream(http, reqs, sink, rid, created, chat, s)
            return StreamingResponse(gen, media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        return await self._whole(http, reqs, sink, rid, created, chat, s)

    def _tools(self, body: Dict[str, Any], s: Any) -> Optional[tools.ToolRequest]:
        """The chat request's tools, its template's call format, and for tool_choice required or a
        named function the constraint that makes the reply a call (set on s.params)."""
        tr = tools.parse_request(body)
        if tr is None:
            return None
        try:
            _, source = self.llm.tokenizer._template_source(self.chat_template, True)
        except ValueError as e:
            raise ApiError(400, f"tools: {e}", "tools", "chat_template_error") from None
        tools.check_template_format(tr, source)
        tok = self.llm.tokenizer
        for marker in tools.MARKER_TEXTS.get(tr.format, ()):
            i = tok.token_id(marker)
            if i is not None and tok.token_type(i) == "control":
                tr.control[marker] = i
        if tr.control:  # Mistral's [TOOL_CALLS]: a control token, whose text must stay (as vLLM does)
            s.params = dataclasses.replace(s.params, skip_special_tokens=False)
        try:
            so = tools.constraint(tr)
        except ValueError as e:
            raise ApiError(400, f"tools: the call grammar of these tools is too large ({e})", "tools",
                           "invalid_value") from None
        if so is not None:
            if s.params.structured_outputs is not None:
                raise ApiError(400, f"tool_choice = {tr.choice if tr.name is None else tr.name!r} "
                               f"with {s.constraint_field}: one output constraint per request "
                               "(a required tool call is one)", "tool_choice", "invalid_value")
            s.params = dataclasses.replace(s.params, structured_outputs=so)
            s.constraint_field = "tools"
        return tr

    def _without_end(self, text: str) -> str:
        """text without a trailing end-of-generation token's text (a reply decoded with its special
        tokens for a tool format whose marker is one)."""
        tok = self.llm.tokenizer
        for i in tok.eog_token_ids:
            end = tok.decode([i], special=True)
            if end and text.endswith(end):
                return text[:-len(end)]
        return text

    def _usage(self, reqs: List[Tuple[int, Any]], n: int) -> Dict[str, Any]:
        prompt = sum(len(r.prompt_token_ids) for i, r in reqs if i % n == 0)
        cached = sum(r.num_cached_tokens for i, r in reqs if i % n == 0)
        completion = sum(r.num_output_tokens for _, r in reqs)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion,
                "prompt_tokens_details": {"cached_tokens": cached}}

    def _piece(self, tid: int) -> str:
        return self.llm.tokenizer.decode([tid], special=True, continuation=True)

    def _piece_bytes(self, tid: int) -> List[int]:
        return list(self.llm.tokenizer.decode_bytes([tid], special=True))

    def _logprobs(self, r: Any, start: int, ids: List[int], chat: bool, top: int,
                  offsets: Dict[str, int]) -> Optional[Dict[str, Any]]:
        if r.logprobs is None:
            return None
        entries = r.logprobs[start:start + len(ids)]
        if chat:
            return protocol.chat_logprobs(entries, ids, self._piece, top, self._piece_bytes)
        obj, offsets[r.request_id] = protocol.completion_logprobs(entries, ids, self._piece,
                                                                  offsets.get(r.request_id, 0))
        return obj

    async def _whole(self, http, reqs, sink, rid, created, chat, s) -> Response:
        outs: Dict[int, Any] = {}
        flight = _Flight(self, reqs)
        outputs = self._outputs(http, reqs, sink, True, flight, s.constraint_field)
        try:
            async for i, r, item in outputs:
                if item.finished:
                    outs[i] = (r, item.output)
        finally:
            await outputs.aclose()
            flight.close()
        if len(outs) < len(reqs):  # the client went away
            return Response(status_code=499)
        choices = []
        top = s.params.logprobs or 0
        for i in sorted(outs):
            r, out = outs[i]
            comp = out.outputs[0]
            lp = self._logprobs(r, 0, list(comp.token_ids), chat, top, {})
            c: Dict[str, Any] = {"index": i, "finish_reason": comp.finish_reason, "logprobs": lp}
            if chat:
                c["message"] = {"role": "assistant", "content": comp.text}
                if s.tools is not None and s.tools.format is not None:
                    text = self._without_end(comp.text) if s.tools.control else comp.text
                    c["message"]["content"] = text
                    content, calls = tools.parse(s.tools.format, text, list(s.tools.schemas))
                    if calls:
                        c["message"] = {"role": "assistant", "content": content, "tool_calls": calls}
                        c["finish_reason"] = "tool_calls"
            else:
                c["text"] = comp.text
            c["stop_reason"] = comp.stop_reason
            c["spec_decode"] = self._spec_metrics(out.metrics)
            choices.append(c)
        return JSONResponse({"id": rid, "object": "chat.completion" if chat else "text_completion",
                             "created": created, "model": self.model_name, "choices": choices,
                             "usage": self._usage(reqs, s.n)})

    async def _stream(self, http, reqs, sink, rid, created, chat, s) -> AsyncIterator[str]:
        obj = "chat.completion.chunk" if chat else "text_completion"
        top = s.params.logprobs or 0
        sent: Dict[str, int] = {}       # tokens whose logprobs went out, per request
        offsets: Dict[str, int] = {}

        def chunk(choices: List[Dict[str, Any]], usage: Optional[Dict[str, Any]] = None) -> str:
            d: Dict[str, Any] = {"id": rid, "object": obj, "created": created, "model": self.model_name,
                                 "choices": choices}
            if s.include_usage:  # as OpenAI: null on every chunk but the last
                d["usage"] = usage
            return f"data: {json.dumps(d, ensure_ascii=False)}\n\n"

        # with tools: content streams while it cannot be a call's start; calls go out at the end
        holders = ({r.request_id: tools.StreamHolder(s.tools.format, list(s.tools.schemas)) for _, r in reqs}
                   if chat and s.tools is not None and s.tools.format is not None else None)
        # closing this generator at any point (even before its first chunk) ends its requests
        flight = _Flight(self, reqs)
        outputs = self._outputs(http, reqs, sink, False, flight, s.constraint_field)
        try:
            if chat:  # the role first, as OpenAI sends it
                yield chunk([{"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                              "finish_reason": None} for i, _ in reqs])
            try:
                async for i, r, item in outputs:
                    if not item.new_text and not item.finished and not (r.logprobs and item.new_token_ids):
                        continue
                    ids = list(item.new_token_ids)
                    start = sent.get(r.request_id, 0)
                    sent[r.request_id] = start + len(ids)
                    c: Dict[str, Any] = {"index": i, "logprobs": self._logprobs(r, start, ids, chat, top, offsets),
                                         "finish_reason": r.finish_reason if item.finished else None}
                    if chat and holders is not None:
                        h = holders[r.request_id]
                        piece = item.new_text
                        if item.finished and s.tools.control:  # special tokens kept: not the end's
                            piece = self._without_end(h.text + piece)[len(h.text):]
                        text = h.push(piece)
                        calls = []
                        if item.finished:
                            rest, calls = h.finish()
                            text += rest
                        c["delta"] = {"content": text} if text else {}
                        if calls:
                            c["delta"]["tool_calls"] = [dict(call, index=j) for j, call in enumerate(calls)]
                            c["finish_reason"] = "tool_calls"
                        if not c["delta"] and not item.finished and not c["logprobs"]:
                            continue
                    elif chat:
                        c["delta"] = {"content": item.new_text} if item.new_text or not item.finished else {}
                    else:
                        c["text"] = item.new_text
                    if item.finished:
                        c["stop_reason"] = r.stop_reason
                        if item.output is not None:
                            c["spec_decode"] = self._spec_metrics(item.output.metrics)
                    yield chunk([c])
            finally:
                await outputs.aclose()  # aborts what is left (a disconnect)
            if s.include_usage:
                yield chunk([], self._usage(reqs, s.n))
            yield "data: [DONE]\n\n"
        except ApiError as e:
            yield f"data: {json.dumps(self.redact.error(e).body())}\n\n"
            yield "data: [DONE]\n\n"
        finally:
            await outputs.aclose()
            flight.close()


class _Flight:
    """The engine requests of one HTTP request: which finished, and an idempotent close that
    aborts the others (the in-flight count drops when the engine has ended them)."""

    def __init__(self, server: "Server", reqs: List[Tuple[int, Any]]) -> None:
        self.server, self.reqs = server, reqs
        self.done: set = set()
        self.closed = False

    def finish(self, request_id: str) -> None:
        self.done.add(request_id)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.server._abort(self.reqs, set(self.done))
        self.done.update(r.request_id for _, r in self.reqs)


def _with_seed(params: Any, seed: int) -> Any:
    import dataclasses
    return dataclasses.replace(params, seed=seed)


class _AsciiJSON(JSONResponse):
    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def _error(e: ApiError) -> JSONResponse:
    headers = {"Retry-After": "1"} if e.status == 503 else {}
    if e.status in (408, 413):  # the rest of the body is not read: the connection cannot be reused
        headers["Connection"] = "close"
    return _AsciiJSON(e.body(), status_code=e.status, headers=headers or None)


def build_app(llm: Any, model_name: str, api_key: Optional[str] = None,
              max_pending: Optional[int] = None, chat_template: Optional[str] = None,
              limits: Optional[ServeLimits] = None) -> Any:
    """The ASGI app serving ``llm`` as ``model_name`` (FastAPI, behind the API-key check when a key
    is given). Starts its engine loop at startup. ``chat_template``: the name of one of the model's
    templates or Jinja source for the chat endpoint (None: the model's own). ``limits``: on request
    bodies (size, budget across connections, deadline; ``limits.uvicorn_options()`` has the header
    deadline for ``uvicorn.run``)."""
    from contextlib import asynccontextmanager

    server = Server(llm, model_name, api_key, max_pending, chat_template)
    bodies = BodyReader(limits or ServeLimits())

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        server.loop.start()
        try:
            yield
        finally:
            server.loop.stop()
            server.tokenize_pool.shutdown(wait=False, cancel_futures=True)
            bodies.close()

    # no /docs, /redoc or /openapi.json: the API is OpenAI's (docs/serving.md)
    app = FastAPI(title="specdec", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.server = server

    async def run(request: HttpRequest, chat: bool) -> Response:
        try:
            # the body's bytes count against the budget until the handler returns (a stream: its
            # requests are queued; a whole response: it is ready)
            with bodies.budget.hold() as held:
                body = await bodies.read_json(request, held)
                return await server.completions(request, body, chat)
        except ApiError as e:
            return _error(server.redact.error(e))
        except Exception as e:  # noqa: BLE001 - a bug: say so in OpenAI's shape, keep serving
            log.exception("internal error on %s", request.url.path)
            return _error(server.redact.error(ApiError(500, f"internal error: {type(e).__name__}: {e}",
                                                       None, "internal_error", "server_error")))

    @app.post("/v1/completions")
    async def completions(request: HttpRequest) -> Response:
        return await run(request, False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: HttpRequest) -> Response:
        return await run(request, True)

    def model_card() -> Dict[str, Any]:
        return {"id": model_name, "object": "model", "created": server.created, "owned_by": "specdec",
                "root": model_name, "max_model_len": llm.runner.max_model_len}

    @app.get("/v1/models")
    async def models() -> Response:
        return JSONResponse({"object": "list", "data": [model_card()]})

    @app.get("/v1/models/{name:path}")
    async def model(name: str) -> Response:
        if name != model_name:
            return _error(ApiError(404, f"The model {name!r} does not exist; this server serves "
                                   f"{model_name!r}", "model", "model_not_found"))
        return JSONResponse(model_card())

    @app.api_route("/health", methods=["GET", "HEAD"])
    async def health() -> Response:
        if not server.loop.alive:
            return _error(ApiError(503, "the engine loop has stopped", None, "engine_dead", "server_error"))
        return PlainTextResponse("")

    @app.get("/metrics")
    async def metrics() -> Response:
        data = await asyncio.get_running_loop().run_in_executor(None, generate_latest, server.metrics.registry)
        return Response(data, media_type=CONTENT_TYPE_LATEST)

    @app.exception_handler(404)
    async def not_found(request: HttpRequest, exc: Exception) -> Response:
        return _error(ApiError(404, f"no route {request.method} {request.url.path}; this server has "
                               "/v1/models, /v1/completions, /v1/chat/completions, /health and /metrics",
                               None, "not_found"))

    @app.exception_handler(405)
    async def not_allowed(request: HttpRequest, exc: Exception) -> Response:
        return _error(ApiError(405, f"{request.method} is not allowed on {request.url.path}", None,
                               "method_not_allowed"))

    # the API-key check wraps the app as a plain ASGI callable (Starlette's BaseHTTPMiddleware
    # would wrap the receive channel, and a handler could no longer see its client disconnect)
    return _ApiKeyGuard(app, server.api_key) if server.api_key else app


class _ApiKeyGuard:
    """Refuses /v1 requests without 'Authorization: Bearer <key>' (401, OpenAI's error JSON)."""

    def __init__(self, app: FastAPI, key: str) -> None:
        self.app, self.key = app, key.encode()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope.get("path", "").startswith("/v1"):
            found = [v for k, v in scope.get("headers") or [] if k.lower() == b"authorization"]
            header = found[0] if len(found) == 1 else b""
            token = header[7:] if header[:7].lower() == b"bearer " else b""
            if not hmac.compare_digest(token, self.key):
                # several Authorization headers are refused: no proxy's choice among them is trusted
                what = (f"{len(found)} Authorization headers: send exactly one, " if len(found) > 1
                        else "Incorrect or missing API key: send the header ")
                response = _error(ApiError(401, what + "'Authorization: Bearer <key>' with the key "
                                           "given to --api-key", None, "invalid_api_key"))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
