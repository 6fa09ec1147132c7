"""The engine step: propose -> schedule -> one target forward -> accept -> roll back.

    drafts = proposer.propose(running requests)        # C++ (n-gram, suffix, draft model) or Python
    plan   = scheduler.schedule(drafts)                 # prefill chunks + [last token + draft] rows
    out    = runner.step(plan)                          # one ragged forward of the target
    for each request: tokens = rejection_sample(draft, out rows)   # C++
                      append tokens, roll the target's cache back past the first rejection,
                      check stops, stream

A drafting model (draft_model, layer_skip, dflash: drafts as long as asked) is scheduled first,
with k + 1 rows reserved, and proposes inside the forward's call (spec_decode.propose_and_step):
one return to Python per step, whose first statements after a forward run from cold caches. When
nothing waits and every row fits the step's budgets, the same call schedules too
(spec_decode.decode_step: the KV blocks of each request's rows reserved in C++); it declines
(nothing run) when a request is short of blocks, and the Python scheduler plans the step.

Plain decoding is this same step with no proposer (every draft empty: k = 0, one row per request).
Greedy requests without logprobs are verified on the device's per-row argmax: no logits cross to
the host. Time is split per step into draft, forward (verify), sampling and host overhead.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

from specdec import _core
from specdec.engine.request import Request, RequestStatus
from specdec.engine.scheduler import Scheduler, SchedulerOutput
from specdec.outputs import position_logprobs

spec = _core.spec_decode


@dataclass
class StepTimes:
    """Seconds per part of the engine's steps, added up by EngineCore.step."""
    draft: float = 0.0
    forward: float = 0.0
    sampling: float = 0.0
    host: float = 0.0


@dataclass
class EngineStats:
    """Totals over the engine's life (reset with reset_stats)."""
    spec: object = field(default_factory=lambda: spec.SpecDecodingStats())
    times: StepTimes = field(default_factory=StepTimes)
    num_steps: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0        # tokens produced by decode / verify steps
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0   # wall time of steps that produced decode tokens, split by rows
    num_preemptions: int = 0

    def as_dict(self) -> Dict[str, object]:
        s, t = self.spec, self.times
        total = t.draft + t.forward + t.sampling + t.host
        return {
            "num_drafts": s.num_drafts, "num_draft_tokens": s.num_draft_tokens,
            "num_accepted_tokens": s.num_accepted_tokens,
            "num_accepted_tokens_per_pos": list(s.num_accepted_tokens_per_pos),
            "acceptance_rate_per_pos": list(s.acceptance_rate_per_pos),
            "acceptance_rate": s.acceptance_rate, "mean_acceptance_length": s.mean_acceptance_length,
            "num_steps": self.num_steps,
            "prefill_tokens": self.prefill_tokens, "prefill_seconds": self.prefill_seconds,
            "prefill_tokens_per_s": self.prefill_tokens / self.prefill_seconds if self.prefill_seconds else 0.0,
            "decode_tokens": self.decode_tokens, "decode_seconds": self.decode_seconds,
            "decode_tokens_per_s": self.decode_tokens / self.decode_seconds if self.decode_seconds else 0.0,
            "num_preemptions": self.num_preemptions,
            "draft_seconds": t.draft, "forward_seconds": t.forward, "sampling_seconds": t.sampling,
            "host_seconds": t.host, "total_step_seconds": total,
            "host_fraction": t.host / total if total else 0.0,
        }


@dataclass
class StepUpdate:
    """What one step did to one request: its new tokens (and their text), finished or not."""
    request: Request
    new_token_ids: List[int]
    new_text: str


class EngineCore:
    """Owns the target runner, the scheduler and the proposer; ``step`` runs one engine step.
    Not thread-safe by itself: ``LLMEngine`` serialises calls and feeds it requests from threads."""

    def __init__(self, runner, tokenizer, proposer=None, num_speculative_tokens: int = 0,
                 disable_by_batch_size: int = 0, max_num_seqs: int = 16,
                 max_num_batched_tokens: int = 512, max_num_logits: int = 128,
                 adaptive: bool = False, enable_prefix_caching: bool = False,
                 prefix_followers=(), structured=None, mask_while_forward: bool = True) -> None:
        self.runner = runner
        self.tokenizer = tokenizer
        self.proposer = proposer
        self.k = num_speculative_tokens if proposer is not None else 0
        self.disable_by_batch_size = disable_by_batch_size
        self.max_model_len = runner.max_model_len
        self.vocab_size = runner.config.vocab_size
        self.scheduler = Scheduler(runner, max_num_seqs, max_num_batched_tokens, max_num_logits,
                                   enable_prefix_caching, prefix_followers)
        self.requests: Dict[str, Request] = {}
        self._is_custom = proposer is not None and not isinstance(proposer, spec.Proposer)
        # adaptive speculation: k per request and step from measured acceptance and costs
        self.adaptive = spec.AdaptiveK(self.k) if adaptive and self.k else None
        # the step's verification, counters, rollback and token-level stops: one C++ call
        self.verifier = spec.StepVerifier(runner, list(tokenizer.eog_token_ids), self.max_model_len,
                                          self.adaptive)
        self.stats = EngineStats(spec=self.verifier.stats)
        self.propose_and_step = spec.propose_and_step  # attributes: benchmarks time them
        self.decode_step = spec.decode_step
        # structured outputs (specdec.structured): masks of constrained requests' rows; while any
        # is in the engine, steps take the path that returns logits to the host before verifying
        self.structured = structured
        self.num_constrained = 0
        # compute the masks in a worker thread while the forward runs (llguidance drops the GIL):
        # free on a GPU; on the 2-core Zen 3's native device, SmolLM2 constrained, it measured the
        # same as computing them before / after the forward (206/206/190/199 against
        # 208/210/197/187 tok/s alternating), so it is on everywhere
        self.mask_while_forward = mask_while_forward
        # (request id, error) of requests a step ended on their own error (a grammar that grew past
        # the library's limits mid-output): LLMEngine hands each its error, the others go on
        self.failures: List[tuple] = []

    # ---- requests ----
    def add_request(self, r: Request) -> None:
        p = r.params
        if p.structured_outputs is not None and r.constraint is None:
            r.constraint = self._structured().constraint(p.structured_outputs)
        constrained = r.constraint is not None
        r.verify = spec.VerifyRequest(
            r.sequence, p.temperature, p.top_k, p.top_p, p.min_p, r.generator,
            # a constrained output ends where its grammar lets the end of generation in, whatever
            # ignore_eos says (after it the grammar allows nothing)
            on_argmax=p.greedy and p.logprobs is None and not constrained,
            ignore_eos=p.ignore_eos and not constrained,
            stop_token_ids=list(p.stop_token_ids), max_tokens=p.max_tokens, append=not p.stop)
        r.needs_logits = not p.greedy or p.logprobs is not None or constrained
        self.num_constrained += constrained
        if p.stop:  # stop strings are looked for in the text of new tokens only
            r.text_decoder = self.tokenizer.stream_decoder(special=not p.skip_special_tokens,
                                                           continuation=True)
        self.requests[r.request_id] = r
        self.scheduler.add(r)

    def abort_request(self, request_id: str) -> Optional[Request]:
        r = self.requests.get(request_id)
        if r is None or r.finished:
            return None
        self._finish(r, RequestStatus.FINISHED_ABORTED)
        return r

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished()

    def reset_stats(self) -> None:
        self.verifier.reset_stats()
        self.stats = EngineStats(spec=self.verifier.stats)
        self.scheduler.num_preemptions = 0

    def _structured(self):
        if self.structured is None:
            from specdec.structured import StructuredOutputs
            self.structured = StructuredOutputs(self.tokenizer, self.vocab_size)
        return self.structured

    def _finish(self, r: Request, status: RequestStatus) -> None:
        if r.constraint is not None and not r.finished:
            self.num_constrained -= 1
        r.status = status
        r.finished_time = time.monotonic()
        self.requests.pop(r.request_id, None)
        self.scheduler.remove(r)
        if self.adaptive is not None:
            self.adaptive.forget(r.request_id)
        finish = getattr(self.proposer, "finish", None)
        if finish is not None:
            finish(r.sequence)
        if not r.params.stop:  # with stop strings the text is kept current per token
            r.text = self.tokenizer.decode(r.output_token_ids, special=not r.params.skip_special_tokens,
                                           continuation=True)
        elif status != RequestStatus.FINISHED_STOPPED or not isinstance(r.stop_reason, str):
            r.text += r.text_decoder.flush()  # an unfinished character at the end, as decode gives it

    # ---- proposing ----
    def _num_draft_tokens(self, r: Request, batch_rows: int = 1) -> int:
        k = self.k
        if r.params.max_tokens is not None:  # the step yields up to k + 1 tokens
            k = min(k, r.params.max_tokens - r.num_output_tokens - 1)
        k = max(0, min(k, self.max_model_len - r.num_tokens))
        if self.adaptive is not None and k > 0:
            k = self.adaptive.choose(r.request_id, k, batch_rows)
        return k

    def _asks(self):
        """(ProposeRequests, [(request, k)], per running request its ProposeRequest or None) for the
        running requests that draft this step. A request keeps its ProposeRequest while its k stays
        (one object per request, not per step)."""
        if self.proposer is None or not self.k:
            return [], [], None
        running = self.scheduler.running
        if self.disable_by_batch_size and len(running) >= self.disable_by_batch_size:
            return [], [], None
        asks, reqs, per = [], [], []
        for r in running:
            k = self._num_draft_tokens(r, len(running))
            if k <= 0:
                per.append(None)
                continue
            if r.ask_k != k:
                p = r.params
                r.ask = spec.ProposeRequest(r.sequence, k, p.temperature, p.top_k, p.top_p, p.min_p,
                                            r.generator)
                r.ask_k = k
            asks.append(r.ask)
            per.append(r.ask)
            reqs.append((r, k))
        return asks, reqs, per

    def _room_for(self, reqs) -> bool:
        """Whether every running request's step, with its whole draft, fits the step's budgets and
        no request waits: then rows reserved for a draft that comes back short (a drafter at its
        own length or out of KV blocks) take nothing from anyone, and drafting inside the forward's
        call leaves the schedule as proposing first would make it."""
        if self.scheduler.waiting:
            return False
        rows = len(self.scheduler.running) + sum(k for _, k in reqs)
        return rows <= min(self.scheduler.max_num_batched_tokens, self.scheduler.max_num_logits)

    def _propose(self, asks, reqs) -> Dict[str, object]:
        if not asks:
            return {}
        t0 = time.perf_counter()
        drafts = self.proposer.propose(asks)
        if self.adaptive is not None:
            self.adaptive.observe_proposer(sum(k for _, k in reqs), time.perf_counter() - t0)
        if self._is_custom:
            drafts = self._check_custom(drafts, reqs)
        if self.num_constrained:
            drafts = [_grammar_cut(r, d) for (r, _), d in zip(reqs, drafts)]
        return {r.request_id: d for (r, _), d in zip(reqs, drafts) if len(d)}

    def _propose_and_step(self, asks, reqs, plan: SchedulerOutput, steps, need_logits: bool):
        """Proposes for the scheduled requests with planned rows, runs the forward and verifies the
        step, in one call (when every row is a decode / verify); fills each one's draft in.
        Returns (StepOutput, seconds proposing, seconds in the forward, outcomes or None)."""
        by_id = {r.request_id: a for (r, _), a in zip(reqs, asks)}
        rows = [i for i, s in enumerate(plan.scheduled) if s.planned]
        mine = [by_id[plan.scheduled[i].request.request_id] for i in rows]
        # a request the scheduler preempted can come back as a prefill chunk in the same plan:
        # then the step is verified after the call, prefill rows and all
        inside = not any(s.is_prefill for s in plan.scheduled)
        drafts, out, seconds, forward, outcomes = self.propose_and_step(
            self.proposer, mine, rows, self.runner, steps, need_logits,
            self.verifier if inside else None, [s.request.verify for s in plan.scheduled] if inside else None)
        scheduled = plan.scheduled
        for i, d in zip(rows, drafts):
            tokens = d.tokens
            if tokens:
                s = scheduled[i]
                s.tokens += tokens
                s.draft = d
                s.num_logits = 1 + len(tokens)
        if self.adaptive is not None and mine:
            self.adaptive.observe_proposer(sum(a.num_speculative_tokens for a in mine), seconds)
        return out, seconds, forward, outcomes

    def _check_custom(self, drafts, reqs) -> list:
        name = type(self.proposer).__name__
        if not isinstance(drafts, (list, tuple)) or len(drafts) != len(reqs):
            raise ValueError(f"{name}.propose returned {type(drafts).__name__} "
                             f"{'of ' + str(len(drafts)) if hasattr(drafts, '__len__') else ''}: "
                             f"a list of {len(reqs)} drafts (one per request) is allowed")
        out = []
        for (r, k), d in zip(reqs, drafts):
            if isinstance(d, spec.Draft):
                toks = list(d.tokens)
            else:
                if isinstance(d, (str, bytes, dict)) or not hasattr(d, "__iter__"):
                    raise ValueError(f"{name}.propose: draft for request {r.request_id} = {d!r}: "
                                     "a list of token ids is allowed")
                toks = list(d)
                if not all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in toks):
                    raise ValueError(f"{name}.propose: draft for request {r.request_id} = {d!r}: "
                                     "a list of integer token ids is allowed")
                toks = [int(t) for t in toks]
            if len(toks) > k:
                raise ValueError(f"{name}.propose: draft for request {r.request_id} has "
                                 f"{len(toks)} tokens: at most num_speculative_tokens = {k}")
            bad = [t for t in toks if not 0 <= t < self.vocab_size]
            if bad:
                raise ValueError(f"{name}.propose: draft token {bad[0]} for request "
                                 f"{r.request_id}: token ids in [0, {self.vocab_size})")
            out.append(spec.Draft(toks))  # point masses: probabilities from Python are not trusted
        return out

    # ---- the step ----
    def step(self) -> List[StepUpdate]:
        t0 = time.perf_counter()
        asks, reqs, per = self._asks()
        # Nothing waits and every row fits the step's budgets, whole drafts and all: a C++ proposer
        # drafts, and the step is scheduled, run and verified in one call (unless a request is
        # short of KV blocks: then the scheduler below plans it, with preemption).
        whole = bool(asks) and not self._is_custom and self._room_for(reqs)
        if whole:
            kept = self._decode_step(t0, reqs, per)
            if kept is not None:
                return kept
        # A drafting model (drafts as long as asked) proposes inside the forward's call, after the
        # schedule reserved its rows, and the same call verifies: one return to Python per step.
        fused = whole and self.proposer.drafts_full_length and not self.num_constrained
        drafts = {} if fused else self._propose(asks, reqs)
        t1 = time.perf_counter()
        plan: SchedulerOutput = self.scheduler.schedule(
            drafts, {r.request_id: k for r, k in reqs} if fused else None)
        if plan.preempted:
            self.stats.num_preemptions += len(plan.preempted)
        if not plan.scheduled:
            return []
        need_logits, rows_pre, steps = False, 0, []
        scheduled_at = time.monotonic()
        for s in plan.scheduled:  # one pass: what the forward needs
            r = s.request
            if r.first_scheduled_time is None:
                r.first_scheduled_time = scheduled_at
            if s.is_prefill:
                rows_pre += len(s.tokens)
                need_logits = need_logits or (r.prompt_logprobs is not None and not r.prompt_logprobs_done)
            need_logits = need_logits or r.needs_logits
            steps.append(s.as_step())
        t2 = time.perf_counter()
        if fused:  # drafting and verifying inside the forward's call: their time is not forward time
            out, t_draft, t_forward, outcomes = self._propose_and_step(asks, reqs, plan, steps, need_logits)
            rows_dec = (out.num_rows if outcomes is not None  # every row a decode / verify row
                        else sum(len(s.tokens) for s in plan.scheduled) - rows_pre)
        else:
            # structured outputs: the masks of the rows to sample depend on the drafts only, so
            # they are computed while the forward runs (see mask_while_forward)
            pending = self._start_masks(plan) if self.num_constrained else None
            out = self.runner.step(steps, return_logits=need_logits)
            t_draft, t_forward, outcomes = 0.0, time.perf_counter() - t2, None
            rows_dec = sum(len(s.tokens) for s in plan.scheduled) - rows_pre
        failed = []
        if outcomes is None:
            if self.num_constrained:
                failed = self._mask(plan, out, pending)
            outcomes = self._verify(plan, out)
        kept, decoded = self._update(((i, s.request, len(s.draft.tokens) if s.draft is not None else 0,
                                       s.is_prefill) for i, s in enumerate(plan.scheduled)), out, outcomes,
                                     skip=failed)
        for r in failed:
            if not r.finished:
                self._fail(r, r.constraint.failure())
        self._count(t0, t1, t2, t_draft, t_forward, rows_pre, rows_dec, decoded)
        return kept

    def _decode_step(self, t0: float, reqs, per) -> Optional[List[StepUpdate]]:
        """The step of running requests that all decode or verify, scheduled, drafted, run and
        verified in one C++ call; None (nothing run) when a request is short of KV blocks."""
        running = list(self.scheduler.running)  # finishing a request takes it out of the list
        need_logits = False
        for r in running:
            if r.needs_logits:
                need_logits = True
                break
        t1 = time.perf_counter()
        masker = (_StepMasker(self._structured(), running, self.mask_while_forward)
                  if self.num_constrained else None)
        got = self.decode_step(self.proposer, self.runner, self.verifier, [r.verify for r in running],
                               per, need_logits, masker)
        t2 = time.perf_counter()
        if got is None:
            return None
        if masker is not None:
            for r in running:
                if r.constraint is not None and r.constraint.error:
                    self._fail(r, r.constraint.failure())
        lens, out, t_draft, t_forward, outcomes, asked = got
        if self.adaptive is not None and asked:
            self.adaptive.observe_proposer(asked, t_draft)
        kept, decoded = self._update(((i, r, n, False) for i, (r, n) in enumerate(zip(running, lens))),
                                     out, outcomes)
        # the call's own time beside drafting and the forward (scheduling, binding, verification)
        # is host time; what follows it, sampling's post-processing
        self._count(t0, t1, t1, t_draft, t_forward, 0, out.num_rows, decoded,
                    in_call=t2 - t1 - t_draft - t_forward)
        return kept

    def _count(self, t0, t1, t2, t_draft, t_forward, rows_pre, rows_dec, decoded, in_call=0.0) -> None:
        """The step's times and counters: t0 the step's start, t1 after proposing outside the
        forward's call, t2 when the forward's call began; in_call: host time inside that call
        (the one-call decode step schedules and verifies there)."""
        if self.adaptive is not None and not rows_pre:
            self.adaptive.observe_forward(rows_dec, t_forward)
        t4 = time.perf_counter()
        st = self.stats
        times = st.times
        times.draft += t1 - t0 + t_draft
        times.forward += t_forward
        times.sampling += t4 - t2 - t_draft - t_forward - in_call
        times.host += t2 - t1 + in_call
        st.num_steps += 1
        # the step's wall time split between prefill and decode/verify rows
        dt = t4 - t0
        st.prefill_tokens += rows_pre
        st.prefill_seconds += dt * rows_pre / (rows_pre + rows_dec)
        st.decode_seconds += dt * rows_dec / (rows_pre + rows_dec)
        st.decode_tokens += decoded

    def _mask_items(self, plan: SchedulerOutput) -> List[tuple]:
        """(scheduled index, constraint, draft) of every constrained request that samples this
        step (a verify, or a prompt's last chunk)."""
        items = []
        for i, s in enumerate(plan.scheduled):
            r = s.request
            if r.constraint is None or r.finished:
                continue
            if s.is_prefill and s.num_computed + len(s.tokens) < r.num_tokens:
                continue  # a prompt chunk with more to come: nothing sampled
            items.append((i, r.constraint, list(s.draft.tokens) if s.draft is not None else []))
        return items

    def _start_masks(self, plan: SchedulerOutput):
        """The step's constrained items, and their masks or the future computing them (in the
        structured outputs' worker thread while the forward runs, when mask_while_forward)."""
        items = self._mask_items(plan)
        if not items or not self.mask_while_forward:
            return items, None
        return items, self._structured().masks_async([(c, d) for _, c, d in items])

    def _mask(self, plan: SchedulerOutput, out: _core.StepOutput, pending=None) -> None:
        """Structured outputs: every row a constrained request samples from (a verify's k + 1, a
        finished prompt's last) gets its grammar's mask, the row after draft token j masked by the
        state after the draft's first j tokens; forbidden tokens' logits become -inf in place."""
        items, future = pending if pending is not None else (self._mask_items(plan), None)
        starts = out.logits_start
        rows = []
        for i, _, draft in items:
            row0 = starts[i + 1] - 1 - len(draft)
            rows.extend(range(row0, row0 + 1 + len(draft)))
        if items:
            so = self._structured()
            masks = future.result() if future is not None else so.masks([(c, d) for _, c, d in items])
            t0 = time.perf_counter()
            _core.apply_token_bitmask(out.logits, rows, masks)
            so.apply_seconds += time.perf_counter() - t0
        # a grammar the library gave up on (its mask then allows only the end): the request is
        # failed after this step's verification and bookkeeping (_update), never before them
        return [s.request for i, c, _ in items for s in (plan.scheduled[i],) if c.error]

    def _fail(self, r: Request, error: BaseException) -> None:
        """Ends one request on its own error (its outcome this step is dropped)."""
        self._finish(r, RequestStatus.FINISHED_ABORTED)
        self.failures.append((r.request_id, error))

    def _verify(self, plan: SchedulerOutput, out: _core.StepOutput):
        """Verification, counters, rollback and token-level stops in one C++ call, after the prefill
        bookkeeping (prompt logprobs, a finished prompt starts running)."""
        starts = out.logits_start
        items = []
        for i, s in enumerate(plan.scheduled):
            r = s.request
            if s.is_prefill:
                if r.prompt_logprobs is not None and not r.prompt_logprobs_done:
                    self._prompt_logprobs(r, out.logits[starts[i]:starts[i + 1]], s.num_computed)
                r.num_computed_tokens = s.num_computed + len(s.tokens)
                if r.num_computed_tokens < r.num_tokens:
                    items.append(None)  # a prompt chunk with more to come: no outcome
                    continue
                r.prompt_logprobs_done = True
                r.status = RequestStatus.RUNNING
                self.scheduler.waiting.remove(r)
                self.scheduler.running.append(r)
            items.append((r.verify, s.draft, starts[i + 1], -1 if s.is_prefill else s.num_computed))
        got = iter(self.verifier.verify([x for x in items if x is not None], out))
        return [None if x is None else next(got) for x in items]

    def _update(self, rows, out: _core.StepOutput, outcomes, skip=()):
        """What needs Python after verification: logprobs, stop strings, streamed text, finishing.
        rows: (row index, request, draft length, is_prefill) per outcome (None: no tokens yet).
        Returns (the updates of requests that got tokens or finished, in the plan's order; decode /
        verify tokens)."""
        starts = out.logits_start
        now = time.monotonic()
        kept, decoded = [], 0
        for (i, r, ndraft, is_prefill), outcome in zip(rows, outcomes):
            if outcome is None or r.finished or any(r is f for f in skip):  # ended on its own error
                continue
            tokens, accepted, argmax_lp, finish, num_computed = outcome
            r.num_computed_tokens = num_computed
            if r.first_token_time is None:
                r.first_token_time = now
            status = _FINISH[finish]
            if finish == 2:
                r.stop_reason = tokens[-1]
            text = ""
            kept_tokens = len(tokens)
            if r.params.stop:
                tokens, status = self._stop_strings(r, tokens, status)
            elif r.stream is not None:
                text = r.stream.push_many(tokens)
            if r.constraint is not None and not r.constraint.accept(tokens):
                self._fail(r, r.constraint.failure())
                continue
            if r.verify.on_argmax:  # the C++ sum, unless a stop string cut the tokens it covers
                if len(tokens) == kept_tokens:
                    r.cumulative_logprob += argmax_lp
                else:
                    row0 = starts[i + 1] - 1 - ndraft
                    r.cumulative_logprob += float(out.argmax_logprob[row0:row0 + len(tokens)].astype(float).sum())
            else:
                row0 = starts[i + 1] - 1 - ndraft
                for j, tid in enumerate(tokens):
                    self._logprobs(r, out.logits[row0 + j], tid)
            if status is not None:
                self._finish(r, status)
            if r.stream is not None:
                text = self.stream_text(r, text)
            if not is_prefill:
                decoded += len(tokens)
            if tokens or r.finished:
                kept.append(StepUpdate(r, tokens, text))
        return kept, decoded

    def _stop_strings(self, r: Request, tokens: List[int], status):
        """Appends tokens one by one while no stop string appears in the text (only the new text
        and the tail a stop string could straddle are searched); the tokens kept and the status."""
        stops = r.params.stop
        longest = max(len(x) for x in stops)
        for n, tid in enumerate(tokens):
            r.sequence.append([tid])
            start = max(0, len(r.text) - longest + 1)
            r.text += r.text_decoder.push(tid)
            found = [(i, m, x) for m, x in enumerate(stops) for i in (r.text.find(x, start),) if i >= 0]
            if found:  # the earliest stop string in the text ends it (ties: the first listed)
                i, _, x = min(found)
                r.text = r.text[:i]
                r.stop_reason = x
                return tokens[:n + 1], RequestStatus.FINISHED_STOPPED
        return tokens, status

    def stream_text(self, r: Request, pushed: str = "") -> str:
        """The text a streaming request may send now; the pieces joined equal its final text.
        Without stop strings: the stream decoder's text (``pushed``), flushed at the end. With
        stop strings: the new part of ``r.text`` except a tail that could still become a stop
        string (or an unfinished UTF-8 character), which waits until it cannot (as vLLM holds
        it back), so a stop string and what follows it are never streamed."""
        if not r.params.stop:
            return pushed + (r.stream.flush() if r.finished else "")
        end = len(r.text) if r.finished else stable_text_end(r.text, r.params.stop)
        if end <= r.num_streamed_chars:
            return ""
        out = r.text[r.num_streamed_chars:end]
        r.num_streamed_chars = end
        return out

    def _logprobs(self, r: Request, row: np.ndarray, tid: int) -> None:
        p = r.params
        if r.logprobs is None:  # the cumulative logprob only
            r.cumulative_logprob += _core.token_logprob(row, tid)
            return
        top, of_ids, ranks = _core.token_logprobs(row, p.logprobs or 0, [tid])
        r.cumulative_logprob += of_ids[0]
        if r.logprobs is not None:
            r.logprobs.append(position_logprobs(top, tid, of_ids[0], ranks[0], self._piece))

    def _piece(self, tid: int) -> str:
        return self.tokenizer.decode([tid], special=True)

    def _prompt_logprobs(self, r: Request, rows: np.ndarray, start: int) -> None:
        # logits row j is the model after prompt token start + j: it scores token start + j + 1.
        n = r.params.prompt_logprobs or 0
        prompt = r.prompt_token_ids
        for j in range(rows.shape[0]):
            pos = start + j + 1
            if pos >= len(prompt):
                break
            actual = prompt[pos]
            top, of_ids, ranks = _core.token_logprobs(rows[j], n, [actual])
            r.prompt_logprobs.append(position_logprobs(top, actual, of_ids[0], ranks[0], self._piece))


class _StepMasker:
    """Structured outputs inside the one-call decode step (spec_decode.decode_step's constraints):
    each constrained request's draft cut at its first token the grammar forbids, the masks of its
    rows computed before the forward, and handed back after it to be applied to the logits."""

    __slots__ = ("structured", "running", "items", "computed", "overlap")

    def __init__(self, structured, running, overlap: bool = False) -> None:
        self.structured = structured
        self.running = running
        self.items: List[Optional[tuple]] = []
        self.computed = None
        self.overlap = overlap

    def cut(self, drafts: List[List[int]], has_probs: List[bool]) -> List[int]:
        keep = []
        for r, d, probs in zip(self.running, drafts, has_probs):
            c = r.constraint
            if c is None:
                keep.append(len(d))
                self.items.append(None)
                continue
            n = _keep(c, d, probs)
            keep.append(n)
            self.items.append((c, d[:n]))
        live = [x for x in self.items if x is not None]
        if live:
            self.computed = self.structured.masks_async(live) if self.overlap else self.structured.masks(live)
        return keep

    def masks(self, row_end: List[int]):
        if self.computed is None:
            return None
        t0 = time.perf_counter()
        rows = []
        for x, end in zip(self.items, row_end):
            if x is not None:
                rows.extend(range(end - 1 - len(x[1]), end))
        computed = self.computed.result() if self.overlap else self.computed
        self.structured.apply_seconds += time.perf_counter() - t0  # the -inf writes follow in C++
        return rows, computed


def _grammar_cut(r: Request, d):
    """A constrained request's draft up to its first token the grammar forbids (see _keep)."""
    if r.constraint is None or not len(d):
        return d
    n = _keep(r.constraint, list(d.tokens), d.has_probs)
    return d if n == len(d) else d.truncated(n)


def _keep(c, tokens: List[int], has_probs: bool) -> int:
    """How many draft tokens to verify: those the grammar allows, and, for a draft with its
    probabilities, the first forbidden one too. Rejection sampling then rejects it (its masked
    probability is 0) and draws from the residual (p - q)+; ending the draft before it would draw
    from p instead, which over the drafts that reached it is not p (q's mass on forbidden tokens
    would tilt the output). A point-mass draft's residual is p itself: it is cut before."""
    n = c.valid_prefix(tokens) if tokens and not c.error else 0
    return n + 1 if has_probs and n < len(tokens) else n


_FINISH = {0: None, 1: RequestStatus.FINISHED_STOPPED, 2: RequestStatus.FINISHED_STOPPED,
           3: RequestStatus.FINISHED_LENGTH}


def stable_text_end(text: str, stops) -> int:
    """Where the part of ``text`` that no further token can change ends: before a trailing
    unfinished character (U+FFFD) and before the longest tail that is the start of a stop string."""
    end = len(text)
    while end and text[end - 1] == "\ufffd":
        end -= 1
    hold = 0
    for stop in stops:
        for n in range(min(len(stop) - 1, end), hold, -1):
            if text.endswith(stop[:n], 0, end):
                hold = n
                break
    return end - hold
