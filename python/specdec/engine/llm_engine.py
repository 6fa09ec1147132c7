"""``LLMEngine``: one engine loop that requests join from any thread (vLLM's add_request / step /
abort shape). Threads add requests to an inbox; whichever thread drives the next ``step`` (an
explicit caller, or a thread waiting for its own stream) takes them in, so every running request
shares each batched forward. Outputs of each step go to the queue of the consumer that added the
request; ``stream``/``iterate`` drive the loop themselves when no other thread is stepping.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import Dict, Iterable, Iterator, List, Optional

from specdec.engine.core import EngineCore, StepUpdate
from specdec.engine.request import Request
from specdec.outputs import CompletionOutput, RequestOutput


@dataclass
class StreamOutput:
    """One step's news for one request: the new token ids and their text; ``output`` is the
    complete RequestOutput once the request has finished."""
    request_id: str
    new_token_ids: List[int]
    new_text: str
    finished: bool
    output: Optional[RequestOutput] = None


def request_output(r: Request) -> RequestOutput:
    comp = CompletionOutput(0, r.text, list(r.output_token_ids), r.cumulative_logprob, r.logprobs,
                            r.finish_reason, r.stop_reason)
    return RequestOutput(r.request_id, r.prompt, list(r.prompt_token_ids), r.prompt_logprobs,
                         [comp], r.finished, r.metrics())


class LLMEngine:
    def __init__(self, core: EngineCore) -> None:
        self.core = core
        self._inbox_lock = threading.Lock()
        self._inbox: List[tuple] = []
        self._aborts: List[str] = []
        self._step_lock = threading.Lock()
        self._cond = threading.Condition()
        self._steps = 0
        self._queues: Dict[str, "queue.SimpleQueue[StreamOutput]"] = {}
        self._pending: set = set()  # request ids added and not yet finished
        self._owner: Optional[int] = None  # the thread running a step
        self._idle = False  # the last step found no request to run

    # ---- from any thread ----
    def add_request(self, request: Request, sink: Optional["queue.SimpleQueue"] = None) -> "queue.SimpleQueue":
        """Queues a request for the next step; returns the queue its StreamOutputs go to."""
        sink = sink if sink is not None else queue.SimpleQueue()
        with self._inbox_lock:
            if request.request_id in self._pending:
                raise ValueError(f"request_id = {request.request_id!r}: already running; "
                                 "a request id not in use is allowed")
            self._pending.add(request.request_id)
            self._queues[request.request_id] = sink
            self._inbox.append(request)
        with self._cond:
            self._cond.notify_all()
        return sink

    def abort_request(self, request_id: str) -> None:
        """Ends a request (finish_reason 'abort'); unknown or finished ids are ignored. Returns
        once the request has left the loop and its blocks are free (waits for a running step),
        except when called from inside a step (a proposer): then at the next step."""
        with self._inbox_lock:
            if request_id not in self._pending:
                return
            self._aborts.append(request_id)
        if self._owner == threading.get_ident():
            return  # inside this thread's own step: taken in at the next one
        with self._step_lock:
            self._owner = threading.get_ident()
            try:
                self._take_inbox()
            finally:
                self._owner = None
        with self._cond:
            self._cond.notify_all()

    def has_unfinished_requests(self) -> bool:
        with self._inbox_lock:
            return bool(self._pending)

    def step(self) -> List[StreamOutput]:
        """Runs one engine step (waits while another thread runs one) and returns its outputs
        (they also go to each request's queue)."""
        self._check_not_in_step()
        with self._step_lock:
            return self._step_locked()

    def _check_not_in_step(self) -> None:
        if self._owner == threading.get_ident():
            raise RuntimeError("the engine was called from inside its own step (a proposer's "
                               "propose or finish); generate from another thread or after it returns")

    def iterate(self, sink: "queue.SimpleQueue", request_ids: Iterable[str]) -> Iterator[StreamOutput]:
        """StreamOutputs of these requests (all added with ``sink``) as they come, until every one
        has finished; drives the loop whenever no other thread is stepping."""
        self._check_not_in_step()
        left = set(request_ids)
        while left:
            try:
                item = sink.get_nowait()
            except queue.Empty:
                item = None
            if item is not None:
                if item.finished:
                    left.discard(item.request_id)
                if isinstance(item, _Failure):
                    raise item.error
                yield item
                continue
            seen = self._steps
            if self._step_lock.acquire(blocking=False):
                try:
                    self._step_locked()
                    idle = self._idle
                finally:
                    self._step_lock.release()
                if not idle:
                    continue
                seen = self._steps
                with self._inbox_lock:
                    lost = sink.empty() and not any(rid in self._pending for rid in left)
                if lost:  # finished without a final output: an engine bug, never a hang
                    raise RuntimeError(f"requests {sorted(left)} left the engine without an output")
            # another thread is stepping, or there was nothing to step (this thread's requests
            # are in another thread's hands): sleep until a step ends or news arrives, never spin
            with self._cond:
                self._cond.wait_for(lambda: self._steps != seen or not sink.empty(), timeout=0.5)

    # ---- the loop ----
    def _take_inbox(self) -> None:
        if not (self._inbox or self._aborts):  # nothing came (one that comes now is taken next step)
            return
        with self._inbox_lock:
            inbox, self._inbox = self._inbox, []
            aborts, self._aborts = self._aborts, []
        for r in inbox:
            self.core.add_request(r)
        for rid in aborts:
            try:
                r = self.core.abort_request(rid)
            except Exception as e:  # noqa: BLE001 - a proposer's finish raised: the request
                self._fail(rid, e)  # is out of the core; its consumer gets the error
                continue
            if r is None:
                continue  # unknown or already finished
            self._deliver(StepUpdate(r, [], self.core.stream_text(r) if r.stream is not None else ""))

    def _deliver(self, u: StepUpdate) -> Optional[StreamOutput]:
        r = u.request
        finished = r.finished
        if r.final_only:
            if not finished:  # nobody reads it: no output, no queue traffic
                return None
            # its one output: every token and the whole text
            u = StepUpdate(r, list(r.output_token_ids), r.text)
        out = StreamOutput(r.request_id, u.new_token_ids, u.new_text, finished,
                           request_output(r) if finished else None)
        with self._inbox_lock:  # put under the lock: pending and the sink change together
            sink = self._queues.get(r.request_id)
            if finished:
                self._queues.pop(r.request_id, None)
                self._pending.discard(r.request_id)
            if sink is not None:
                sink.put(out)
        return out

    def _step_locked(self) -> List[StreamOutput]:
        self._owner = threading.get_ident()
        try:
            self._take_inbox()
            self._idle = not self.core.has_unfinished_requests()
            outs = []
            if not self._idle:
                for u in self.core.step():
                    o = self._deliver(u)
                    if o is not None:
                        outs.append(o)
                failures, self.core.failures = self.core.failures, []
                for rid, error in failures:  # requests that failed on their own: the others go on
                    self._fail(rid, error)
            self._take_inbox()  # aborts that came during the step
        except BaseException as e:  # every running request fails with the step's error
            self.core.failures = []  # (those it ended on their own errors are among them)
            self._fail_all(e)
            raise
        finally:
            self._owner = None
            with self._cond:
                self._steps += 1
                self._cond.notify_all()
        return outs

    def _fail_all(self, error: BaseException) -> None:
        """Ends every request the failed step (or abort) touched with its error: all that were
        taken into the core, including those it had already finished or popped when the error
        came (a proposer's finish raising), so no consumer waits forever. Requests that arrived in
        the inbox during the step were not touched and run at the next one."""
        if not isinstance(error, Exception):  # Ctrl-C in the stepping thread: others get an error
            interrupted = RuntimeError(f"the engine step was interrupted ({type(error).__name__}) "
                                       "in the thread running it; this request was ended")
            interrupted.__cause__ = error
            error = interrupted
        with self._inbox_lock:
            waiting = {r.request_id for r in self._inbox}
            failed = [rid for rid in self._pending if rid not in waiting]
        for rid in failed:
            try:
                self.core.abort_request(rid)
            except Exception:  # noqa: BLE001 - the first error is the one reported
                pass
            self._fail(rid, error)

    def _fail(self, rid: str, error: BaseException) -> None:
        with self._inbox_lock:
            sink = self._queues.pop(rid, None)
            self._pending.discard(rid)
            if rid in self._aborts:
                self._aborts.remove(rid)
            if sink is not None:
                sink.put(_Failure(rid, [], "", True, None, error))


@dataclass
class _Failure(StreamOutput):
    error: BaseException = None  # type: ignore[assignment]
