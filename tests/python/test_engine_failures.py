"""An error inside an engine step (a proposer's propose or finish raising) ends every request the
step touched with that error, in every thread, and no thread waits or spins afterwards (issue 20,
finding 1)."""

import resource
import threading
import time

import pytest

import specdec

from paths import STORIES  # noqa: E402
PARAMS = specdec.SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)


class FinishRaises(specdec.Proposer):
    def propose(self, requests):
        return [[r.token_ids[-1]] * r.num_speculative_tokens for r in requests]

    def finish(self, sequence):
        raise RuntimeError("finish failed on purpose")


class ProposeRaisesLater(specdec.Proposer):
    def __init__(self):
        self.calls = 0

    def propose(self, requests):
        self.calls += 1
        if self.calls > 3:
            raise RuntimeError("propose failed on purpose")
        return [[] for _ in requests]


def _llm(proposer):
    return specdec.LLM(STORIES, max_model_len=128, progress=False, speculative_config={
        "method": "custom", "proposer": proposer, "num_speculative_tokens": 2})


def _stream_in_threads(llm, prompts, params, timeout=60.0):
    """Streams each prompt in its own thread; returns what each got (text or error)."""
    results, errors = {}, {}

    def run(i):
        try:
            text = ""
            for item in llm.stream(prompts[i], params):
                text += item.new_text
            results[i] = text
        except Exception as e:  # noqa: BLE001 - what each thread got is checked below
            errors[i] = e

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(len(prompts))]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    stuck = [t for t in threads if t.is_alive()]
    assert not stuck, f"{len(stuck)} thread(s) still waiting after {timeout} s"
    return results, errors


@pytest.mark.parametrize("proposer", [FinishRaises, ProposeRaisesLater])
def test_a_failing_proposer_ends_every_touched_request_in_every_thread(proposer):
    llm = _llm(proposer())
    results, errors = _stream_in_threads(llm, ["Once upon a time", "The dog"], PARAMS)
    assert errors, results  # at least one thread saw the error ...
    for e in errors.values():  # ... and each error is the proposer's own
        assert isinstance(e, RuntimeError) and "on purpose" in str(e)
    assert not llm.engine.has_unfinished_requests()
    assert not llm.engine.core.requests


def test_abort_with_a_failing_finish_ends_the_stream_with_the_error():
    llm = _llm(FinishRaises())
    long = specdec.SamplingParams(temperature=0, max_tokens=10_000, ignore_eos=True)
    stream = llm.stream("Once upon a time", long)
    first = next(stream)
    done = threading.Event()
    got = []

    def consume():
        try:
            for _ in stream:
                pass
        except Exception as e:  # noqa: BLE001
            got.append(e)
        done.set()

    llm.abort(first.request_id)  # the proposer's finish raises inside the abort
    t = threading.Thread(target=consume, daemon=True)
    t.start()
    assert done.wait(30), "the stream of an aborted request never ended"
    assert got and "on purpose" in str(got[0])
    assert not llm.engine.has_unfinished_requests()
    assert not llm.runner.has_request(first.request_id)


def test_a_waiting_thread_sleeps_instead_of_spinning():
    """While one thread's long step runs, a second thread waiting for its own request uses
    almost no CPU (it sleeps on the engine's condition, never polls the step lock)."""
    gate = threading.Event()
    started = threading.Event()

    class Slow(specdec.Proposer):
        def propose(self, requests):
            started.set()
            gate.wait(30)
            return [[] for _ in requests]

    llm = _llm(Slow())
    errors = []

    def run(prompt):
        try:
            llm.generate(prompt, PARAMS)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    a = threading.Thread(target=run, args=("Once upon a time",), daemon=True)
    a.start()
    assert started.wait(30)
    b = threading.Thread(target=run, args=("The dog",), daemon=True)
    t0 = resource.getrusage(resource.RUSAGE_SELF)
    b.start()
    time.sleep(2.0)  # the first step is held in propose: b can only wait
    t1 = resource.getrusage(resource.RUSAGE_SELF)
    gate.set()
    a.join(60)
    b.join(60)
    assert not a.is_alive() and not b.is_alive() and not errors
    busy = (t1.ru_utime + t1.ru_stime) - (t0.ru_utime + t0.ru_stime)
    assert busy < 0.5, f"{busy:.2f} CPU-s used in 2 s of waiting: a thread is spinning"


def test_an_interrupt_in_one_threads_step_is_an_error_in_the_others():
    """Ctrl-C (KeyboardInterrupt) in the thread running a step: that thread gets it; the other
    threads' requests end with a RuntimeError, not a KeyboardInterrupt of their own."""
    class Interrupts(specdec.Proposer):
        def __init__(self):
            self.calls = 0

        def propose(self, requests):
            # once all three requests share a step (so the other threads' requests are in it
            # whatever the threads' start-up order and the machine's load)
            self.calls += 1
            if len(requests) == 3 and not self.raised:
                self.raised = True
                raise KeyboardInterrupt
            return [[] for _ in requests]

        raised = False

    llm = _llm(Interrupts())
    errors = {}
    long = specdec.SamplingParams(temperature=0, max_tokens=96, ignore_eos=True)  # overlap

    def run(i):
        try:
            for _ in llm.stream(["Once upon a time", "The dog", "Lily"][i], long):
                pass
        except BaseException as e:  # noqa: BLE001 - what each thread got is checked below
            errors[i] = e

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    kinds = sorted(type(e).__name__ for e in errors.values())
    assert kinds.count("KeyboardInterrupt") <= 1 and "RuntimeError" in kinds, kinds
    assert not llm.engine.has_unfinished_requests()
