"""Chat templates rendered in a worker process, under a time and a memory budget that a template
cannot escape.

A template comes with the model, from whoever published it. jinja2's sandbox keeps it from
Python's objects, and specdec._chat_limits refuses the large values it asks for by name; what is
left (loops, recursion) is bounded here. Each render runs in a warm worker process started with
``python -c`` (not forked: the parent holds OpenCL contexts and threads), which imports only
jinja2 and the sandbox, and runs under

- an address-space limit of MEMORY_LIMIT_BYTES (RLIMIT_AS, for the worker's life);
- TIME_LIMIT_S per render: a timer (SIGALRM) in the worker ends the render with an error;
- if the timer cannot (a long call into C, or code that got past the sandbox): the parent's
  deadline, WALL_LIMIT_S, after which it kills the worker, and RLIMIT_CPU, which kills a worker
  that used WALL_LIMIT_S of CPU time in one render even without its parent.

A worker that is killed or dies is replaced at the next render. Up to MAX_WORKERS renders run at
once (one worker each), each worker reused render after render, so a chat pays no start-up.
Requests and answers are JSON frames on the worker's stdin and stdout.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

TIME_LIMIT_S = 2.0                # time one render may take (seconds)
WALL_LIMIT_S = TIME_LIMIT_S + 2.0  # time the parent waits for one render before killing it
MEMORY_LIMIT_BYTES = 1 << 30      # address space of a worker process
MAX_WORKERS = 2                   # renders at once
START_LIMIT_S = 60.0              # wall-clock time a new worker may take to start

_HEADER = struct.Struct("!Q")
_BOOT = ("import json, sys, types\n"
         "sys.path[:] = json.loads(sys.argv[2])\n"
         "package = types.ModuleType('specdec'); package.__path__ = [sys.argv[1]]\n"
         "sys.modules['specdec'] = package  # specdec/__init__ (the C++ core) is not imported\n"
         "from specdec import _chat_worker\n"
         "_chat_worker.serve(int(sys.argv[3]))\n")


def _dump(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _load(data: bytes) -> Any:
    return json.loads(data.decode("utf-8", "surrogatepass"))


# ---- the worker process ------------------------------------------------------------------------

class _Overrun(BaseException):
    """The render's time is up (BaseException: a template's own error handling is not
    given it)."""


def _on_timer(signum: int, frame: Any) -> None:
    raise _Overrun()


def _read_exact(stream: Any, n: int) -> Optional[bytes]:
    data = b""
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _write_frame(stream: Any, payload: bytes) -> None:
    stream.write(_HEADER.pack(len(payload)) + payload)
    stream.flush()


def serve(memory_limit: int) -> None:
    """The worker's loop: one request frame in, one answer frame out, until stdin ends."""
    import resource

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    try:
        from specdec import chat_template
        chat_template.compile_template("{{ messages }}")  # jinja2 imported and warm
    except Exception as e:  # noqa: BLE001 - reported to the parent as the start's answer
        _write_frame(stdout, _dump({"error": f"{type(e).__name__}: {e}"}))
        return
    for limit, value in ((resource.RLIMIT_CORE, 0), (resource.RLIMIT_AS, memory_limit)):
        try:  # (a system without the limit still has the timer and the parent's deadline)
            hard = resource.getrlimit(limit)[1]
            value = value if hard == resource.RLIM_INFINITY else min(value, hard)
            resource.setrlimit(limit, (value, value))
        except (ValueError, OSError):
            pass
    signal.signal(signal.SIGALRM, _on_timer)
    _write_frame(stdout, _dump({"ready": os.getpid()}))
    while True:
        header = _read_exact(stdin, _HEADER.size)
        if header is None:
            return
        body = _read_exact(stdin, _HEADER.unpack(header)[0])
        if body is None:
            return
        answer = _answer(_load(body), chat_template, memory_limit)
        _write_frame(stdout, _dump(answer))
        if answer.get("retire"):
            return


def _answer(request: Dict[str, Any], chat_template: Any, memory_limit: int) -> Dict[str, Any]:
    import resource

    name, seconds = request["name"], float(request["seconds"])
    usage = resource.getrusage(resource.RUSAGE_SELF)
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = int(usage.ru_utime + usage.ru_stime + request["kill_seconds"]) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (soft if hard < 0 else min(soft, hard), hard))
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            return _render(request, chat_template)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _Overrun:
        return {"error": f"chat template {name!r} ran past its time limit ({seconds:g} s); "
                         "the render was stopped"}
    except MemoryError:  # the heap may stay grown: this worker retires, the next starts clean
        return {"error": f"chat template {name!r} ran past its memory limit "
                         f"({memory_limit >> 20} MiB); the render was stopped", "retire": True}
    except chat_template.ChatTemplateError as e:
        return {"error": str(e)}
    except Exception as e:  # noqa: BLE001 - a template's failure, as one line
        text = " ".join(str(e).split())[:400]
        return {"error": f"chat template {name!r} failed: {type(e).__name__}: {text}"}


def _render(request: Dict[str, Any], chat_template: Any) -> Dict[str, Any]:
    control = request.get("control")
    table = None if control is None else {text: spans for text, spans in control}
    text, markup = chat_template.render_chat(
        request["source"], request["messages"], name=request["name"],
        add_generation_prompt=request["add_generation_prompt"],
        continue_final_message=request["continue_final_message"], tools=request.get("tools"),
        documents=request.get("documents"), special_tokens=request.get("special_tokens"),
        control_spans=None if table is None else (lambda s: table.get(s, [])),
        extra=request.get("extra"))
    return {"text": text, "markup": markup}


# ---- the parent's side -------------------------------------------------------------------------

class _WorkerGone(Exception):
    """The worker died or was killed; the message says why."""


class _Worker:
    """One worker process and its pipes."""

    def __init__(self) -> None:
        package = os.path.dirname(os.path.abspath(__file__))
        paths = [os.path.abspath(p) for p in sys.path if p]
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _BOOT, package, json.dumps(paths), str(MEMORY_LIMIT_BYTES)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            bufsize=0, close_fds=True, start_new_session=True)
        try:
            first = _load(self._read(time.monotonic() + START_LIMIT_S))
        except _WorkerGone as e:
            raise RuntimeError(f"the chat-template worker process did not start: {e}") from None
        if "ready" not in first:
            self.kill()
            raise RuntimeError(f"the chat-template worker process did not start: "
                               f"{first.get('error')}")

    def call(self, request: Dict[str, Any], wall_seconds: float) -> Dict[str, Any]:
        payload = _dump(request)
        view = memoryview(_HEADER.pack(len(payload)) + payload)
        try:  # an idle worker reads its stdin: this returns
            while view:
                view = view[os.write(self.proc.stdin.fileno(), view):]
        except OSError:
            self.kill()
            raise _WorkerGone(f"it had ended (exit status {self.proc.returncode})") from None
        return _load(self._read(time.monotonic() + wall_seconds))

    def _read(self, deadline: float) -> bytes:
        fd = self.proc.stdout.fileno()
        poller = select.poll()  # (not select(): a server's descriptors pass 1024)
        poller.register(fd, select.POLLIN)
        data = bytearray()
        need = _HEADER.size
        while len(data) < need:
            left = deadline - time.monotonic()
            if left <= 0 or not poller.poll(left * 1000):
                self.kill()
                raise _WorkerGone("timeout")
            chunk = os.read(fd, need - len(data))
            if not chunk:
                self.kill()
                raise _WorkerGone(f"exit status {self.proc.returncode}")
            data += chunk
            if need == _HEADER.size and len(data) >= _HEADER.size:
                need = _HEADER.size + _HEADER.unpack(bytes(data[:_HEADER.size]))[0]
        return bytes(data[_HEADER.size:])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


class _Pool:
    """Up to MAX_WORKERS warm workers, each used by one render at a time."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._idle: List[_Worker] = []
        self._count = 0
        self._pid = os.getpid()

    def acquire(self) -> _Worker:
        with self._cond:
            if self._pid != os.getpid():  # a forked child: its parent's workers are not its own
                self._idle, self._count, self._pid = [], 0, os.getpid()
            while not self._idle and self._count >= MAX_WORKERS:
                self._cond.wait()
            if self._idle:
                return self._idle.pop()
            self._count += 1
        try:
            return _Worker()
        except BaseException:
            self.release(None)
            raise

    def release(self, worker: Optional[_Worker]) -> None:
        """Gives a worker back (None or a dead one: its place is freed)."""
        with self._cond:
            if worker is not None and worker.proc.poll() is None:
                self._idle.append(worker)
            else:
                self._count -= 1
            self._cond.notify()

    def close(self) -> None:
        with self._cond:
            idle, self._idle = self._idle, []
            self._count -= len(idle)
        for worker in idle:
            worker.kill()


_POOL = _Pool()
atexit.register(_POOL.close)


def _gone_message(name: str, worker: _Worker, why: str) -> str:
    code = worker.proc.returncode
    if why == "timeout" or code in (-signal.SIGXCPU, -signal.SIGKILL):
        return (f"chat template {name!r} ran past its time limit ({TIME_LIMIT_S:g} s; killed "
                f"after {WALL_LIMIT_S:g} s)")
    return (f"chat template {name!r} ended its render process ({why}); limits: "
            f"{MEMORY_LIMIT_BYTES >> 20} MiB of memory, {TIME_LIMIT_S:g} s")


def render(source: str, messages: List[Dict[str, Any]], *, name: str,
           add_generation_prompt: bool, continue_final_message: bool = False,
           tools: Optional[List[Any]] = None, documents: Optional[List[Any]] = None,
           special_tokens: Optional[Dict[str, str]] = None,
           control: Optional[Sequence[Tuple[str, List[Tuple[int, int]]]]] = None,
           extra: Optional[Dict[str, Any]] = None) -> Tuple[str, List[Tuple[int, int]]]:
    """chat_template.render_chat in a worker (module docstring); its arguments are checked,
    JSON-like data. `control`: (string, control-token spans) for each of the caller's strings
    that holds control-token text (None: nothing protected, the markup is the whole text).
    ChatTemplateError for a template that fails or runs past a limit."""
    from specdec.chat_template import ChatTemplateError

    request = dict(source=source, messages=messages, name=name,
                   add_generation_prompt=add_generation_prompt,
                   continue_final_message=continue_final_message, tools=tools,
                   documents=documents, special_tokens=special_tokens, extra=extra,
                   control=None if control is None else [list(c) for c in control],
                   seconds=TIME_LIMIT_S, kill_seconds=WALL_LIMIT_S)
    worker = _POOL.acquire()
    try:
        answer = worker.call(request, WALL_LIMIT_S)
    except _WorkerGone as e:
        _POOL.release(None)
        raise ChatTemplateError(_gone_message(name, worker, str(e))) from None
    except BaseException:
        worker.kill()  # interrupted mid-render: its answer would be read by the next render
        _POOL.release(None)
        raise
    if answer.get("retire"):
        worker.kill()
    _POOL.release(worker)
    if "error" in answer:
        raise ChatTemplateError(answer["error"])
    return answer["text"], [(b, e) for b, e in answer["markup"]]
