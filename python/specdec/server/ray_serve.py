"""``specdec serve --ray``: the same server as replicas on Ray Serve.

Three deployments make the application:

- ``SpecdecEngine``: each replica is one ``specdec serve`` — the model, one engine loop and the
  FastAPI app of ``specdec.server.app`` (the same routes, validation, streaming and metrics). It
  takes HTTP requests as plain data from the ingress (``http``), runs them through that app in its
  own process and streams the response back; it reports its engine's waiting and running requests
  to Ray's autoscaler and fails Ray's health check when its engine loop has stopped (Ray then
  replaces it).
- ``SpecdecIngress``: the HTTP face behind Ray's proxy. It checks the API key and the body's size,
  reads the prompt's text for the router (``ray_router.PrefixAffinityRouter``: prefix affinity,
  then load), forwards the request, retries once on another replica when the one serving it dies
  before its response is complete (a whole response, or a stream that has sent nothing yet), ends
  a stream cut by a dying replica with an error chunk and ``[DONE]``, and answers ``/health``,
  ``/metrics`` and ``/replicas`` for every replica together.
- ``SpecdecBoard``: one small replica (no CPU reserved) that keeps each engine replica's last
  report (its state and its metrics), pushed every second; part of the application, so that it
  outlives any engine or ingress replica and goes when the application is deleted.

``run_cli`` is ``specdec serve --ray``; ``build_application`` builds the application from the
serve flags for ``serve.run``; ``app_builder`` is the same for Ray's ``serve run`` / ``serve
deploy`` config files (``import_path: specdec.server.ray_serve:app_builder``). Ray is an optional
dependency (``pip install 'specdec[ray]'``), imported only here.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import signal
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

try:
    import ray
    from ray import serve
    from ray.exceptions import RayActorError
    from ray.serve.config import AutoscalingConfig, RequestRouterConfig
    from ray.serve.exceptions import BackPressureError
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError(f"specdec serve --ray needs Ray Serve ({e}); install it with: "
                      "pip install 'specdec[ray]' (or pip install '.[ray]')") from None

from fastapi import FastAPI, Request as HttpRequest
from fastapi.responses import JSONResponse, Response, StreamingResponse

from specdec.server.protocol import ApiError
from specdec.server import ray_common
from specdec.server.ray_common import RoutingHint

log = logging.getLogger("specdec.server.ray")

APP_NAME = "specdec"
ENGINE = "SpecdecEngine"
INGRESS = "SpecdecIngress"
BOARD = "SpecdecBoard"
RAY_VERSION = "2.60.0"  # the version specdec[ray] pins and is tested with (docs/serving.md)
ROUTER_CLASS = "specdec.server.ray_router:PrefixAffinityRouter"
POLICY_CLASS = "specdec.server.ray_router:QueuePolicy"
CALL_TIMEOUT_S = 10.0  # a replica's report reaching the board
# /health, /metrics, /replicas: the board's answer (it takes milliseconds; longer, its replica is
# restarting: those answer without reports, every replica unhealthy, rather than keep a probe waiting)
READ_TIMEOUT_S = 3.0
MAX_ROUTING_CHARS = 1 << 15  # the prompt's leading part the router matches
# request headers the ingress does not pass on (the key is checked here; the body is re-sent whole)
_DROP_REQUEST = {b"authorization", b"content-length", b"transfer-encoding", b"connection", b"expect"}
_DROP_RESPONSE = {"content-length", "transfer-encoding", "connection"}


# ---------------------------------------------------------------- the replicas' board
REPORT_S = 1.0      # a replica reports its state and metrics this often
STALE_S = 5.0       # a replica silent this long is reported unhealthy


class FleetBoard:
    """Each engine replica's last report (its state and its /metrics text), for the ingress's
    /health, /metrics and /replicas: reports are pushed, so that no request has to be routed to
    one replica in particular, and a replica that stops reporting shows as such. A deployment of
    the application (``BOARD``): Ray restarts it if it dies (the replicas report again within a
    second) and deletes it with the application."""

    def __init__(self) -> None:
        self.reports: Dict[str, Tuple[float, Dict[str, Any], str]] = {}

    # async: run one at a time on the board's event loop (Serve runs sync methods in a thread pool,
    # where a get could iterate while a put adds a replica)
    async def put(self, replica: str, info: Dict[str, Any], metrics: str) -> None:
        self.reports[replica] = (time.time(), info, metrics)

    async def drop(self, replica: str) -> None:
        self.reports.pop(replica, None)

    async def get(self) -> Dict[str, Tuple[float, Dict[str, Any], str]]:
        now = time.time()
        for uid in [u for u, (t, _, _) in self.reports.items() if now - t > 600]:  # long gone
            del self.reports[uid]
        return dict(self.reports)


# ---------------------------------------------------------------- the engine replica
class SpecdecEngine:
    """One engine replica: a ``specdec serve`` without its own socket."""

    def __init__(self, options: Dict[str, Any], board: Any = None) -> None:
        from specdec.cli import serve_setup
        from specdec.server.app import build_app

        args = argparse.Namespace(**options)
        args.api_key = None  # the ingress checks the key; replicas are reached only through Ray
        self.setup = serve_setup(args)
        self.app = build_app(self.setup.llm, self.setup.name, None, self.setup.max_pending,
                             chat_template=self.setup.template, limits=self.setup.limits)
        self.server = self.app.state.server
        self.server.loop.start()
        context = serve.get_replica_context()
        self.replica = context.replica_id.unique_id
        self.board = board  # the board deployment's handle (None: no reports)
        self.started = time.time()
        self._stop_reports = threading.Event()
        self._report_task: Optional[asyncio.Task] = None
        if board is not None:  # Serve runs the constructor on the replica's event loop: so do they
            self._report_task = asyncio.get_running_loop().create_task(self._report())

    async def _report(self) -> None:
        """Pushes this replica's state and metrics to the board every REPORT_S seconds (the first
        at once), one report at a time; one that does not arrive in CALL_TIMEOUT_S (the board's
        replica restarting) is cancelled, and the next goes to the new one. On the replica's
        event loop, where a handle works in every Serve mode (a plain thread's calls fail when
        Serve runs its routers on the caller's loop, RAY_SERVE_RUN_ROUTER_IN_SEPARATE_LOOP=0)."""
        while not self._stop_reports.is_set():
            response = None
            try:
                response = self.board.put.remote(self.replica, self.info(), self.metrics_text())
                await asyncio.wait_for(_awaited(response), CALL_TIMEOUT_S)
            except asyncio.CancelledError:
                _cancel(response)
                if self._stop_reports.is_set():  # the replica is stopping
                    raise
                # else Ray cancelled the call's routing (the board going away): report again
                log.warning("replica %s: a report to the board was cancelled", self.replica)
            except Exception as e:  # noqa: BLE001 - the next report goes to its new replica
                _cancel(response)
                log.warning("replica %s: could not report to the board: %s", self.replica, e)
            await asyncio.sleep(REPORT_S)

    async def http(self, request: Dict[str, Any], routing: Optional[RoutingHint] = None):
        """One HTTP request through this replica's app: yields ``{"status", "headers",
        "replica"}`` first, then the body's chunks (bytes). When the caller goes away (a client
        that disconnected), the app sees its client disconnect and aborts the engine requests."""
        out: "asyncio.Queue[Any]" = asyncio.Queue()
        disconnected = asyncio.Event()
        body = {"type": "http.request", "body": request["body"], "more_body": False}
        sent_body = False

        async def receive() -> Dict[str, Any]:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return body
            await disconnected.wait()
            return {"type": "http.disconnect"}

        async def send(message: Dict[str, Any]) -> None:
            await out.put(message)

        scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
                 "http_version": "1.1", "method": request["method"], "scheme": "http",
                 "path": request["path"], "raw_path": request["path"].encode(),
                 "query_string": request.get("query_string", b""), "root_path": "",
                 "headers": request["headers"] + [(b"content-length", str(len(request["body"])).encode())],
                 "client": ("127.0.0.1", 0), "server": ("127.0.0.1", 0), "state": {}}
        task = asyncio.create_task(self.app(scope, receive, send))
        task.add_done_callback(lambda _t: out.put_nowait(None))
        started = False
        try:
            while True:
                message = await out.get()
                if message is None:  # the app returned (or failed) before its response's end
                    if started:
                        error = task.exception() if not task.cancelled() else None
                        log.error("replica %s: the app failed mid-response: %r", self.replica, error)
                        yield {"error": f"internal error on replica {self.replica} mid-response: {error!r}"}
                    if not started:
                        error = task.exception() if not task.cancelled() else None
                        yield {"status": 500, "headers": [("content-type", "application/json")],
                               "replica": self.replica}
                        yield json.dumps(ApiError(500, f"internal error on replica {self.replica}: "
                                                  f"{error!r}", None, "internal_error",
                                                  "server_error").body()).encode()
                    return
                kind = message["type"]
                if kind == "http.response.start":
                    started = True
                    headers = [(k.decode("latin-1"), v.decode("latin-1"))
                               for k, v in message.get("headers", [])]
                    yield {"status": message["status"], "headers": headers, "replica": self.replica}
                elif kind == "http.response.body":
                    chunk = message.get("body", b"")
                    if chunk:
                        yield bytes(chunk)
                    if not message.get("more_body", False):
                        return
        finally:
            disconnected.set()  # the app's requests are aborted, if any are left
            if not task.done():
                try:
                    await asyncio.wait_for(asyncio.shield(task), 5.0)
                except BaseException:  # noqa: BLE001 - cancelled or timed out: stop it
                    task.cancel()

    def info(self) -> Dict[str, Any]:
        """This replica's state, for the ingress's /health and /replicas (through the board)."""
        sched = self.server.llm.engine.core.scheduler
        return {"replica": self.replica, "alive": self.server.loop.alive, "pid": os.getpid(),
                "node": ray.get_runtime_context().get_node_id(), "started": self.started,
                "running": len(sched.running), "waiting": self.server.num_waiting(),
                "inflight": self.server.pending}

    def metrics_text(self) -> str:
        from prometheus_client import generate_latest
        return generate_latest(self.server.metrics.registry).decode()

    def check_health(self) -> None:
        """Ray's health check: a replica whose engine loop has stopped is replaced."""
        if not self.server.loop.alive:
            raise RuntimeError(f"replica {self.replica}: the engine loop has stopped")

    def record_autoscaling_stats(self) -> Dict[str, float]:
        """The autoscaling policy's inputs (ray_router.QueuePolicy)."""
        sched = self.server.llm.engine.core.scheduler
        return {"waiting": float(self.server.num_waiting()), "running": float(len(sched.running))}

    def __del__(self) -> None:  # Ray Serve calls it when it stops the replica
        stop = getattr(self, "_stop_reports", None)
        if stop is not None:
            stop.set()
            task = getattr(self, "_report_task", None)
            try:
                if task is not None:
                    task.get_loop().call_soon_threadsafe(task.cancel)
            except RuntimeError:  # the loop is closed: the task went with it
                pass
            try:
                if self.board is not None:
                    self.board.drop.remote(self.replica)
            except Exception:  # noqa: BLE001 - shutting down: the board may be gone already
                pass
        server = getattr(self, "server", None)
        if server is not None:
            server.loop.stop()
            server.tokenize_pool.shutdown(wait=False, cancel_futures=True)


# ---------------------------------------------------------------- the ingress
class SpecdecIngress:
    """The HTTP face: key, body limits, routing hints, retries, fleet-wide endpoints."""

    def __init__(self, engine: Any, options: Dict[str, Any], board: Any = None) -> None:
        from specdec.cli import _serve_limits
        from specdec.server.limits import BodyReader

        self.engine = engine
        args = argparse.Namespace(**options)
        self.name = args.served_model_name or os.path.basename(args.model)
        self.api_key = args.api_key or os.environ.get("SPECDEC_API_KEY") or None
        self.bodies = BodyReader(_serve_limits(args))
        self.counters = {"retries": 0, "busy_retries": 0, "streams_cut": 0, "failed": 0}
        self.board = board

    # ---- forwarding ----
    def _payload(self, request: HttpRequest, body: bytes) -> Dict[str, Any]:
        headers = [(k, v) for k, v in request.scope.get("headers", []) if k.lower() not in _DROP_REQUEST]
        path, root = request.scope["path"], request.scope.get("root_path", "")
        if root and path.startswith(root):  # the app's own path, under any route prefix
            path = path[len(root):] or "/"
        return {"method": request.method, "path": path, "headers": headers,
                "query_string": request.scope.get("query_string", b""), "body": bytes(body)}

    async def forward(self, request: HttpRequest, body: bytes, text: str) -> Response:
        """The request through a replica. Tried again once, on another replica, when the first
        dies before its response is complete (a whole response) or before its first chunk (a
        stream), or answers 503 because it is full."""
        payload = self._payload(request, body)
        hint = RoutingHint(text=text[:MAX_ROUTING_CHARS])
        for attempt in (0, 1):
            last = attempt == 1
            gen = self.engine.options(stream=True).http.remote(payload, routing=hint)
            head: Optional[Dict[str, Any]] = None
            try:
                head = await gen.__anext__()
                headers = {k: v for k, v in head["headers"] if k.lower() not in _DROP_RESPONSE}
                headers["x-specdec-replica"] = head["replica"]
                if headers.get("content-type", "").startswith("text/event-stream"):
                    first = await _next_or_none(gen)
                    return StreamingResponse(self._stream(gen, head["replica"], first),
                                             status_code=head["status"], headers=headers)
                chunks = [chunk async for chunk in gen]
            except (RayActorError, BackPressureError) as e:
                gen.cancel()
                if isinstance(e, RayActorError) and not last:
                    self.counters["retries"] += 1
                    hint = RoutingHint(text=hint.text, avoid=head["replica"] if head else None)
                    log.warning("a replica died before its response was complete: retrying on "
                                "another (%s)", e)
                    continue
                return self._failed(e)
            except BaseException:
                gen.cancel()  # a client gone while waiting: the replica aborts its requests
                raise
            if any(isinstance(c, dict) for c in chunks):  # the replica's app failed mid-response
                error = next(c for c in chunks if isinstance(c, dict))["error"]
                err = ApiError(500, error, None, "internal_error", "server_error")
                return JSONResponse(err.body(), status_code=500)
            content = b"".join(chunks)
            if head["status"] == 503 and not last and _is_busy(content):
                self.counters["busy_retries"] += 1  # full: another replica may have room
                hint = RoutingHint(text=hint.text, avoid=head["replica"])
                continue
            return Response(content, status_code=head["status"], headers=headers)
        raise AssertionError("unreachable")

    def _failed(self, e: BaseException) -> Response:
        self.counters["failed"] += 1
        if isinstance(e, BackPressureError):
            err = ApiError(503, "every replica is at capacity and the ingress queue is full; retry "
                           "later", None, "server_busy", "server_overloaded")
        else:
            err = ApiError(503, f"the replica serving this request died, and so did the one it was "
                           f"retried on: {type(e).__name__}", None, "replica_died", "server_error")
        headers = {"Retry-After": "1"}
        return JSONResponse(err.body(), status_code=err.status, headers=headers)

    async def _stream(self, gen: Any, replica: str, first: Any):
        done, ended = False, False
        try:
            chunk = first
            while chunk is not None:
                if isinstance(chunk, dict):  # the replica's app failed mid-stream
                    raise _AppFailed(chunk["error"])
                yield chunk
                ended = chunk.endswith(b"data: [DONE]\n\n")
                chunk = await _next_or_none(gen)
            done = True
        except (RayActorError, _AppFailed) as e:
            if isinstance(e, RayActorError):
                self.counters["streams_cut"] += 1
                log.warning("replica %s failed mid-stream: the stream ends with an error (%s)", replica, e)
                msg = (f"the replica serving this stream ({replica}) died mid-response: the output "
                       "is incomplete; send the request again")
                err = ApiError(503, msg, None, "replica_died", "server_error")
            else:
                err = ApiError(500, str(e), None, "internal_error", "server_error")
            if not ended:
                yield b"data: " + json.dumps(err.body()).encode() + b"\n\n"
                yield b"data: [DONE]\n\n"
        finally:
            if not done:  # the client went away, or the replica failed: its generation stops
                gen.cancel()

    # ---- the fleet ----
    async def _reports(self) -> Dict[str, Tuple[float, Dict[str, Any], str]]:
        """{replica id: (time, state, metrics text)} of the replicas Ray routes to (those its
        router knows, with Ray's default router those that reported lately); a replica with no
        report yet has none."""
        reports: Dict[str, Tuple[float, Dict[str, Any], str]] = {}
        if self.board is not None:
            response = self.board.get.remote()
            try:
                reports = await asyncio.wait_for(_awaited(response), READ_TIMEOUT_S)
            except Exception as e:  # noqa: BLE001 - the board is restarting: no reports this time
                _cancel(response)
                log.warning("the replicas' board did not answer: %s", e)
        router = ray_common.get(ENGINE)
        now = time.time()
        if router is not None:
            live = [uid for uid, _ in router.replica_ids()]
        else:
            live = [uid for uid, (t, _, _) in reports.items() if now - t <= STALE_S]
        return {uid: reports.get(uid) for uid in sorted(live)}

    async def replicas(self) -> Dict[str, Any]:
        out = {}
        reports = await self._reports()
        now = time.time()  # after the board's answer (which may take a while: its replica restarting)
        for uid, report in reports.items():
            if report is None:
                out[uid] = {"replica": uid, "healthy": False, "error": "no report yet (starting)"}
                continue
            t, info, _ = report
            age = now - t
            out[uid] = {**info, "report_age_s": round(age, 3), "healthy": bool(info.get("alive")) and age <= STALE_S}
            if age > STALE_S:
                out[uid]["error"] = f"no report for {age:.1f} s"
            elif not info.get("alive"):
                out[uid]["error"] = "the engine loop has stopped"
        return out

    async def metrics_text(self, aggregate: bool) -> str:
        reports = await self._reports()
        now = time.time()
        texts = {uid: r[2] for uid, r in reports.items() if r is not None and now - r[0] <= STALE_S}
        return merge_metrics(texts, aggregate) + self._own_metrics(len(reports), len(texts))

    async def replica_metrics(self, uid: str) -> Optional[str]:
        report = (await self._reports()).get(uid)
        return None if report is None else report[2]

    def _own_metrics(self, replicas: int, answered: int) -> str:
        router = ray_common.get(ENGINE)
        lines = ["# HELP specdec_ingress:replicas Engine replicas the router knows",
                 "# TYPE specdec_ingress:replicas gauge", f"specdec_ingress:replicas {replicas}",
                 "# HELP specdec_ingress:replicas_reporting Replicas whose report is in this scrape "
                 f"(at most {STALE_S:g} s old)",
                 "# TYPE specdec_ingress:replicas_reporting gauge",
                 f"specdec_ingress:replicas_reporting {answered}"]
        for key, doc in (("retries", "Requests retried on another replica after theirs died"),
                         ("busy_retries", "Requests retried on another replica after theirs was full"),
                         ("streams_cut", "Streams ended with an error chunk: their replica died"),
                         ("failed", "Requests answered 503: no replica could take them")):
            lines += [f"# HELP specdec_ingress:{key}_total {doc}", f"# TYPE specdec_ingress:{key}_total counter",
                      f"specdec_ingress:{key}_total {self.counters[key]}"]
        if router is not None:
            lines += ["# HELP specdec_ingress:routed_total Requests routed, by the rule that chose the replica",
                      "# TYPE specdec_ingress:routed_total counter"]
            for key, value in router.stats.items():
                lines.append(f'specdec_ingress:routed_total{{rule="{key}"}} {value}')
            lines += ["# HELP specdec_ingress:prefix_blocks_total Prompt text blocks routed, and those "
                      "found on the chosen replica", "# TYPE specdec_ingress:prefix_blocks_total counter",
                      f'specdec_ingress:prefix_blocks_total{{kind="prompt"}} {router.prompt_blocks}',
                      f'specdec_ingress:prefix_blocks_total{{kind="matched"}} {router.matched_blocks}']
        return "\n".join(lines) + "\n"

    def __serve_build_asgi_app__(self) -> Any:
        return build_ingress_app(self)


async def _awaited(response: Any) -> Any:
    return await response


def _cancel(response: Any) -> None:
    """Cancels a handle's call that timed out or failed (its cancel re-raises a routing error)."""
    if response is not None:
        try:
            response.cancel()
        except Exception:  # noqa: BLE001 - failed already: nothing left to cancel
            pass


class _AppFailed(Exception):
    pass


async def _next_or_none(gen: Any) -> Any:
    try:
        return await gen.__anext__()
    except StopAsyncIteration:
        return None


def _is_busy(content: bytes) -> bool:
    """A replica's 503 because it is full (its --max-pending), not another 503."""
    try:
        return json.loads(content)["error"]["code"] == "server_busy"
    except (ValueError, KeyError, TypeError):
        return False


def routing_text(body: Any) -> str:
    """The text the router matches: a chat's tools and messages, or a completion's (first) prompt."""
    if not isinstance(body, dict):
        return ""
    messages = body.get("messages")
    if isinstance(messages, list):
        parts = []
        if body.get("tools") is not None:
            parts.append(json.dumps(body.get("tools"), sort_keys=True, ensure_ascii=False))
        for m in messages:
            if not isinstance(m, dict):
                continue
            content = m.get("content")
            if isinstance(content, list):
                content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict)
                                    and isinstance(p.get("text"), str))
            parts.append(f"{m.get('role')}\x1e{content if isinstance(content, str) else ''}\x1f")
        return "".join(parts)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):  # token ids
        return ",".join(str(t) for t in prompt)
    return ""


def merge_metrics(texts: Dict[str, str], aggregate: bool) -> str:
    """Several replicas' Prometheus texts as one: each series with a ``replica`` label, or with
    ``aggregate`` summed over the replicas (a percentage gauge averaged)."""
    from prometheus_client.parser import text_string_to_metric_families

    families: Dict[str, Tuple[str, str, Dict[Tuple, float]]] = {}
    order: List[str] = []
    for uid, text in sorted(texts.items()):
        for fam in text_string_to_metric_families(text):
            if fam.name.endswith("_created"):  # when each replica's counter began: left out
                continue
            if fam.name not in families:
                families[fam.name] = (fam.type, fam.documentation, {})
                order.append(fam.name)
            samples = families[fam.name][2]
            for s in fam.samples:
                labels = dict(s.labels)
                if not aggregate:
                    labels["replica"] = uid
                key = (s.name, tuple(sorted(labels.items())))
                samples.setdefault(key, []).append(s.value)
    lines: List[str] = []
    for name in order:
        typ, doc, samples = families[name]
        shown = name + "_total" if typ == "counter" else name  # as prometheus_client writes them
        lines.append(f"# HELP {shown} {doc}")
        lines.append(f"# TYPE {shown} {typ if typ != 'unknown' else 'untyped'}")
        for (sname, labels), values in samples.items():
            if sname.endswith("_created"):
                continue
            if name.endswith("_perc"):
                value = sum(values) / len(values)
            else:
                value = sum(values)
            lab = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
            lines.append(f"{sname}{{{lab}}} {_num(value)}" if lab else f"{sname} {_num(value)}")
    return "\n".join(lines) + ("\n" if lines else "")


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _num(v: float) -> str:
    if v == math.inf:
        return "+Inf"
    if v == -math.inf:
        return "-Inf"
    return repr(float(v)) if v != int(v) or abs(v) >= 1e15 else str(int(v)) + ".0"


def build_ingress_app(ingress: SpecdecIngress) -> Any:
    from specdec.server.app import _ApiKeyGuard, _error
    from specdec.server.limits import parse_json

    app = FastAPI(title="specdec", docs_url=None, redoc_url=None, openapi_url=None)

    async def proxy(request: HttpRequest, route: bool) -> Response:
        try:
            with ingress.bodies.budget.hold() as held:
                body = await ingress.bodies.read(request, held) if request.method == "POST" else b""
                text = ""
                if route and body:
                    try:  # the replica parses it again and says what is wrong, if anything
                        text = routing_text(parse_json(body)) if len(body) <= 1 << 20 else ""
                    except ApiError:
                        text = ""
                return await ingress.forward(request, body, text)
        except ApiError as e:
            return _error(e)

    @app.post("/v1/completions")
    async def completions(request: HttpRequest) -> Response:
        return await proxy(request, True)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: HttpRequest) -> Response:
        return await proxy(request, True)

    @app.api_route("/health", methods=["GET", "HEAD"])
    async def health() -> Response:
        """200 while at least one replica's engine runs (JSON: each replica's state)."""
        reps = await ingress.replicas()
        healthy = sum(1 for r in reps.values() if r.get("healthy"))
        status = 200 if healthy else 503
        return JSONResponse({"healthy_replicas": healthy, "replicas": len(reps)}, status_code=status)

    @app.get("/replicas")
    async def replicas() -> Response:
        return JSONResponse({"replicas": list((await ingress.replicas()).values())})

    @app.get("/replicas/{uid}/health")
    async def replica_health(uid: str) -> Response:
        reps = await ingress.replicas()
        if uid not in reps:
            return _error(ApiError(404, f"no replica {uid!r}; GET /replicas lists them", None, "not_found"))
        return JSONResponse(reps[uid], status_code=200 if reps[uid].get("healthy") else 503)

    @app.get("/replicas/{uid}/metrics")
    async def replica_metrics(uid: str) -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST
        text = await ingress.replica_metrics(uid)
        if text is None:
            return _error(ApiError(404, f"no report from a replica {uid!r}; GET /replicas lists them",
                                   None, "not_found"))
        return Response(text, media_type=CONTENT_TYPE_LATEST)

    @app.get("/metrics")
    async def metrics(aggregate: bool = False) -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST
        return Response(await ingress.metrics_text(aggregate), media_type=CONTENT_TYPE_LATEST)

    @app.api_route("/{path:path}", methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
    async def other(request: HttpRequest, path: str) -> Response:
        """/v1/models and everything else: any replica answers, as a single server would."""
        return await proxy(request, False)

    return _ApiKeyGuard(app, ingress.api_key) if ingress.api_key else app


# ---------------------------------------------------------------- the application
def _options(args: argparse.Namespace) -> Dict[str, Any]:
    return {k: v for k, v in vars(args).items() if k not in ("func", "main_thread")}


def check_ray_args(args: argparse.Namespace) -> None:
    """The replica flags, before Ray starts."""
    _router_kwargs(args)
    lo, hi, n = args.min_replicas, args.max_replicas, args.num_replicas
    if (lo is None) != (hi is None):
        raise ValueError("--min-replicas and --max-replicas: give both (autoscaling) or neither")
    if lo is not None:
        if lo > hi:
            raise ValueError(f"--min-replicas {lo} > --max-replicas {hi}: the minimum must be at most "
                             "the maximum")
        if n is not None and not lo <= n <= hi:
            raise ValueError(f"--num-replicas {n}: the replicas to start with, between --min-replicas "
                             f"{lo} and --max-replicas {hi}")
    elif args.target_waiting is not None:
        raise ValueError("--target-waiting: only with --min-replicas / --max-replicas (autoscaling)")


def _router_kwargs(args: argparse.Namespace) -> Dict[str, int]:
    from specdec.server.ray_router import router_options
    text = getattr(args, "router_kwargs", None)
    if text is None:
        return {}
    try:
        kwargs = json.loads(text)
    except ValueError as e:
        raise ValueError(f"--router-kwargs = {text!r}: not JSON ({e})") from None
    if not isinstance(kwargs, dict):
        raise ValueError(f"--router-kwargs = {text!r}: a JSON object, e.g. '{{\"max_imbalance\": 2}}'")
    if (args.router or "prefix") != "prefix":
        raise ValueError("--router-kwargs: only for --router prefix")
    try:
        router_options(kwargs)
    except ValueError as e:
        raise ValueError(f"--router-kwargs: {e}") from None
    return kwargs


def build_application(args: argparse.Namespace) -> Any:
    """The Ray Serve application of ``specdec serve`` flags (``serve.run`` it)."""
    check_ray_args(args)
    options = _options(args)
    max_pending = args.max_pending or 4 * args.max_num_seqs
    router = args.router or "prefix"
    engine_opts: Dict[str, Any] = dict(
        name=ENGINE, max_ongoing_requests=max_pending, max_queued_requests=max(64, 4 * max_pending),
        ray_actor_options={"num_cpus": args.replica_cpus if args.replica_cpus is not None else 1.0},
        health_check_period_s=2.0, health_check_timeout_s=30.0,
        # a replica taken down (scaling down, a new deployment) first finishes what it serves
        graceful_shutdown_timeout_s=300.0)
    if router == "prefix":
        engine_opts["request_router_config"] = RequestRouterConfig(
            request_router_class=ROUTER_CLASS, request_router_kwargs=_router_kwargs(args))
    if args.min_replicas is not None:
        engine_opts["autoscaling_config"] = AutoscalingConfig(
            min_replicas=args.min_replicas, max_replicas=args.max_replicas,
            initial_replicas=args.num_replicas, upscale_delay_s=2.0, downscale_delay_s=10.0,
            look_back_period_s=2.0, metrics_interval_s=0.5,
            policy={"policy_function": POLICY_CLASS,
                    "policy_kwargs": {"target_waiting": args.target_waiting or 2.0,
                                      "max_num_seqs": args.max_num_seqs}})
    else:
        engine_opts["num_replicas"] = args.num_replicas or 1
    # the replicas' reports: a deployment of its own, so that /health and /metrics never queue
    # behind requests, and part of the application, so that it goes when the application does
    # (checked every second: a dead board is replaced in seconds, not in Serve's default 10 s)
    board = serve.deployment(FleetBoard, name=BOARD, num_replicas=1, max_ongoing_requests=1 << 16,
                             health_check_period_s=1.0, health_check_timeout_s=10.0,
                             ray_actor_options={"num_cpus": 0}).bind()
    engine = serve.deployment(SpecdecEngine, **engine_opts).bind(options, board)
    ingress_cls = serve.ingress()(SpecdecIngress)
    ingress = serve.deployment(ingress_cls, name=INGRESS, num_replicas=1,
                               max_ongoing_requests=max(1, args.limit_concurrency or 1 << 20),
                               ray_actor_options={"num_cpus": 0})
    return ingress.bind(engine, options, board)


def app_builder(config: Dict[str, Any]) -> Any:
    """For Ray's ``serve run`` / ``serve deploy``: ``specdec serve`` flags as a dict, e.g.
    ``{"model": "stories260K", "num_replicas": 2}`` (``serve run
    specdec.server.ray_serve:app_builder model=stories260K num_replicas=2``)."""
    from specdec.cli import build_parser
    argv = ["serve"]
    parser = build_parser()
    serve_parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["serve"]
    switches = {a.dest for a in serve_parser._actions if a.nargs == 0}
    for key, value in config.items():
        flag = "--" + str(key).replace("_", "-")
        if key in switches:  # on / off switches: true or false (a bool, or its text in a YAML file)
            on = value if isinstance(value, bool) else str(value).strip().lower()
            if on not in (True, False, "true", "false"):
                raise ValueError(f"{key} = {value!r}: true or false")
            if on in (True, "true"):
                argv.append(flag)
        elif value is not None:
            argv += [flag, value if isinstance(value, str) else json.dumps(value)]
    args = parser.parse_args(argv + ["--ray"])
    from specdec.cli import check_serve_args
    _absolute(args, check_serve_args(args))
    return build_application(args)


def _absolute(args: argparse.Namespace, template: Optional[str]) -> None:
    """Paths as the replicas need them: their processes start in other directories (and on
    other machines, where a catalog name is fetched into each one's cache)."""
    if os.path.exists(args.model):
        args.model = os.path.abspath(args.model)
    if template is not None:
        args.chat_template = template  # the source, read here: a file need not be on every node
    if args.speculative_config:
        try:
            spec = json.loads(args.speculative_config)
        except ValueError:
            return
        if isinstance(spec, dict):
            for key in ("model", "draft_vocab_file"):
                if isinstance(spec.get(key), str) and os.path.exists(spec[key]):
                    spec[key] = os.path.abspath(spec[key])
            args.speculative_config = json.dumps(spec)


def run_cli(args: argparse.Namespace) -> int:
    """``specdec serve --ray``: starts (or joins) Ray, runs the application, waits for Ctrl-C or
    SIGTERM, then takes it down (a local instance whole; on a cluster it joined, its application)."""
    from specdec.cli import check_serve_args
    check_ray_args(args)
    template = check_serve_args(args)  # a bad flag fails here, before Ray starts or any replica loads
    _absolute(args, template)
    # the key as this process sees it (SPECDEC_API_KEY here need not be in the cluster's workers)
    args.api_key = args.api_key or os.environ.get("SPECDEC_API_KEY") or None
    from specdec.server.limits import ServeLimits
    if args.header_timeout != ServeLimits.header_timeout_s:  # Ray's proxy reads the request heads
        sys.stderr.write(f"specdec serve: warning: --header-timeout {args.header_timeout:g} does not "
                         "apply with --ray: Ray Serve's HTTP proxy holds the connections "
                         "(docs/serving.md, 'What is and is not shared')\n")
    if args.limit_concurrency != ServeLimits.limit_concurrency:
        sys.stderr.write(f"specdec serve: note: with --ray, --limit-concurrency {args.limit_concurrency} "
                         "bounds the requests the ingress serves at once; Ray's proxy queues the "
                         "rest instead of answering 503\n")
    if args.host not in ("127.0.0.1", "localhost", "::1") and not args.api_key:
        sys.stderr.write(f"specdec serve: warning: --host {args.host} without --api-key: anyone who "
                         "reaches this port can use the server\n")
    address = args.ray_address or os.environ.get("RAY_ADDRESS") or None
    stop = threading.Event()
    got: Dict[str, int] = {}

    def on_signal(sig: int, _frame: object) -> None:
        if "closing" in got:  # a second signal while requests in flight finish: stop at once
            raise KeyboardInterrupt
        got["sig"] = sig
        stop.set()

    sys.stderr.write(f"specdec serve: Ray {ray.__version__} "
                     f"({'joining ' + address if address else 'starting a local instance'})\n")
    # "local": a new instance of our own, never a cluster that happens to run on this machine
    try:
        ray.init(address=address or "local", include_dashboard=False, logging_level=logging.WARNING,
                 log_to_driver=args.log_level in ("info", "debug"))
    except Exception as e:  # noqa: BLE001 - a cluster that could not be joined: why, in one line
        if not address:
            raise
        raise ValueError(f"--ray-address {address}: {_join_error(e)}") from None
    for sig in (signal.SIGINT, signal.SIGTERM):  # after ray.init, which sets handlers of its own
        signal.signal(sig, on_signal)
    try:
        serve.start(http_options={"host": args.host, "port": args.port})
        app = build_application(args)
        n = args.num_replicas or args.min_replicas or 1
        auto = (f", autoscaling {args.min_replicas}..{args.max_replicas} on waiting requests"
                if args.min_replicas is not None else "")
        sys.stderr.write(f"specdec serve: starting {n} engine replica(s) of {args.model}{auto}, "
                         f"router {args.router or 'prefix'}\n")
        sys.stderr.flush()
        started: Dict[str, Any] = {}

        def deploy() -> None:
            try:
                serve.run(app, name=APP_NAME, route_prefix="/", blocking=False)
                started["ok"] = True
            except Exception as e:  # noqa: BLE001 - reported below
                started["error"] = e
            stop.set()

        threading.Thread(target=deploy, name="specdec-deploy", daemon=True).start()
        stop.wait()  # deployed, failed, or Ctrl-C / SIGTERM while the replicas load
        if "error" in started:  # a replica could not start: its reason, in one line
            raise ValueError(f"the replicas did not start: {_deploy_error(started['error'])}")
        if "ok" in started and "sig" not in got:
            stop.clear()
            sys.stderr.write(f"specdec serve: listening on http://{args.host}:{args.port} (Ray Serve); "
                             "/health, /metrics and /replicas cover every replica\n")
            sys.stderr.flush()
            while not stop.wait(1.0):
                pass
    finally:
        got["closing"] = 1
        sys.stderr.write("specdec serve: shutting down: requests in flight finish first (up to "
                         "300 s); Ctrl-C again stops at once\n")
        sys.stderr.flush()
        try:
            if address:  # a cluster it joined: only this application goes (its board with it)
                serve.delete(APP_NAME)
            else:
                serve.shutdown()
        finally:
            ray.shutdown()
    sig = got.get("sig", signal.SIGTERM)
    sys.stderr.write(f"specdec serve: shut down ({signal.Signals(sig).name})\n")
    return 0 if sig == signal.SIGTERM else 130


def _join_error(e: BaseException) -> str:
    """Why joining a cluster failed: Ray's token authentication named with its fix (Ray turns it on
    for a cluster whose head has a token, and sends one to an explicit address only with
    RAY_AUTH_MODE=token), else Ray's own first line."""
    chain, seen = [], set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        chain.append(e)
        e = e.__cause__ or e.__context__
    text = " ".join(f"{type(x).__name__}: {x}" for x in chain)
    if "AuthenticationError" in text or "InvalidAuthToken" in text:
        mode = os.environ.get("RAY_AUTH_MODE") or ""
        if mode.lower() != "token":
            why = "this process sends no token (RAY_AUTH_MODE " + (f"= {mode})" if mode else "unset)")
        elif _has_ray_token():
            why = "this process's token is not the cluster's"
        else:
            why = "RAY_AUTH_MODE is token but this process has no token"
        return ("the cluster uses Ray's token authentication and " + why +
                ": set RAY_AUTH_MODE=token and the cluster's token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH "
                "or ~/.ray/auth_token; `ray get-auth-token` on the head prints it); docs/serving.md, "
                "'Several machines'")
    return _last_line(chain[0]) if chain else "could not connect"


def _has_ray_token() -> bool:
    """Whether Ray finds a token for this process (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or
    ~/.ray/auth_token)."""
    try:
        from ray._raylet import AuthenticationTokenLoader
        return bool(AuthenticationTokenLoader.instance().has_token(ignore_auth_mode=True))
    except Exception:  # noqa: BLE001 - Ray's internals moved: say what the variables say
        return bool(os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH")
                    or os.path.exists(os.path.expanduser("~/.ray/auth_token")))


def _deploy_error(e: BaseException) -> str:
    """Why the application did not deploy: the replicas' own error from Serve's status (its
    message holds the replica's traceback), else the exception's."""
    try:
        app = serve.status().applications.get(APP_NAME)
        for name in (ENGINE, INGRESS, BOARD):
            dep = app.deployments.get(name) if app is not None else None
            if dep is not None and dep.message and "Traceback" in dep.message:
                return _last_line(RuntimeError(dep.message))
    except Exception:  # noqa: BLE001 - Serve itself is down: the exception says what it can
        pass
    return _last_line(e)


def _last_line(e: BaseException) -> str:
    """The replica's own error out of Ray's deployment failure (a traceback in its text)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    for kind in ("ValueError: ", "Error: "):
        for ln in reversed(lines):
            if kind in ln:
                return ln[ln.index(kind) + len(kind):] if kind == "ValueError: " else ln
    return lines[-1] if lines else type(e).__name__
