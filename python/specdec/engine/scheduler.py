"""The scheduler: which tokens of which requests one engine step computes, within the target's
free KV blocks, ``max_num_batched_tokens``, ``max_num_seqs`` and the logit rows of a step.

Running requests come first (oldest first), each with its last token and its draft: ``1 + k``
rows to verify (k = 0 is a plain decode). When the blocks for a request's draft do not fit it
verifies without a draft; when not even one token fits, the most recently admitted request is
preempted (vLLM's recompute preemption: its blocks are freed, it goes back to the front of the
queue and is recomputed later from its prompt and the tokens it had produced). Then prefill
chunks of waiting requests, first come first served.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Deque, Dict, List, Optional

from specdec import _core
from specdec.engine.request import Request, RequestStatus


@dataclass
class ScheduledRequest:
    request: Request
    tokens: List[int]            # the new tokens, at positions num_computed, ...
    num_computed: int            # the request's tokens in the target's cache before the step
    num_logits: int              # logit rows (verify: 1 + len(draft); prefill: 0, 1 or prompt rows)
    draft: Optional[object] = None  # the Draft verified this step (None: prefill or plain decode)
    is_prefill: bool = False
    planned: int = 0  # draft tokens to come: rows reserved; propose_and_step appends them (and their logit rows)

    def as_step(self) -> _core.StepRequest:
        return _core.StepRequest(self.request.request_id, self.tokens,
                                 num_computed_tokens=self.num_computed, num_logits=self.num_logits)


@dataclass
class SchedulerOutput:
    scheduled: List[ScheduledRequest] = field(default_factory=list)
    preempted: List[Request] = field(default_factory=list)

    @property
    def num_tokens(self) -> int:
        return sum(len(s.tokens) for s in self.scheduled)


class Scheduler:
    def __init__(self, runner, max_num_seqs: int, max_num_batched_tokens: int,
                 max_num_logits: int, enable_prefix_caching: bool = False,
                 prefix_followers=()) -> None:
        self.runner = runner
        self.enable_prefix_caching = enable_prefix_caching
        # runners whose cache for a request is written by the target's steps (a DFlash drafter's
        # context): a prefix is taken only as far as each of them holds it too
        self.prefix_followers = list(prefix_followers)
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_num_logits = max_num_logits
        self.waiting: Deque[Request] = deque()
        self.running: List[Request] = []
        self.num_preemptions = 0

    def add(self, r: Request) -> None:
        self.waiting.append(r)

    def remove(self, r: Request) -> None:
        """Takes r out of the queues and frees its target blocks (finish or abort)."""
        if r in self.running:
            self.running.remove(r)
        if r in self.waiting:
            self.waiting.remove(r)
        if self.runner.has_request(r.request_id):
            self.runner.free(r.request_id)

    def _claim(self, r: Request) -> int:
        """Takes the longest cached prefix of r's tokens that the target and every follower
        hold (the same length in each); returns it (0: nothing taken)."""
        rid, tokens = r.request_id, r.sequence.token_ids
        limit = r.num_tokens - 1
        while limit > 0:
            hit = self.runner.claim_prefix(rid, tokens, limit)
            if not hit:
                return 0
            short = hit
            for f in self.prefix_followers:
                if f.has_request(rid):  # preempted, its context still there: held that far
                    short = min(short, f.num_cached_tokens(rid))
                else:
                    got = f.claim_prefix(rid, tokens, hit)
                    if got < hit and got:
                        f.unclaim_prefix(rid)  # claimed again below, for the shorter length
                    short = min(short, got)
            if short == hit:
                return hit
            self.runner.unclaim_prefix(rid)  # a follower holds less: again, for what it holds
            limit = short
        return 0

    def _unclaim(self, r: Request) -> None:
        """Undoes _claim (the request waits): the target's claim and the followers'."""
        self.runner.unclaim_prefix(r.request_id)
        for f in self.prefix_followers:
            if f.has_request(r.request_id) and f.num_cached_tokens(r.request_id) == r.num_computed_tokens:
                f.unclaim_prefix(r.request_id)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def _preempt(self, r: Request, out: SchedulerOutput) -> None:
        self.remove(r)
        r.num_computed_tokens = 0
        r.status = RequestStatus.WAITING
        r.num_preemptions += 1
        if r.prompt_logprobs is not None and not r.prompt_logprobs_done:
            del r.prompt_logprobs[1:]  # recomputed with the prompt
        self.num_preemptions += 1
        self.waiting.appendleft(r)
        out.preempted.append(r)

    def schedule(self, drafts: Dict[str, object], planned: Optional[Dict[str, int]] = None) -> SchedulerOutput:
        """drafts: request id -> Draft to verify. planned: request id -> the length of a draft still
        to come (a drafting model proposes right before the forward): its rows and blocks are
        reserved and the ScheduledRequest's `planned` says how many (0 when they did not fit)."""
        out = SchedulerOutput()
        planned = planned or {}
        blocks = _core.StepBlockBudget(self.runner)  # the step's KV blocks, reserved in C++
        budget = self.max_num_batched_tokens
        rows_left = self.max_num_logits
        i = 0
        while i < len(self.running):
            r = self.running[i]
            draft = drafts.get(r.request_id)
            k = len(draft) if draft is not None else planned.get(r.request_id, 0)
            rid, done = r.request_id, r.num_computed_tokens
            if k and (1 + k > budget or 1 + k > rows_left or not blocks.take(rid, done, 1 + k)):
                draft, k = None, 0  # verify without a draft rather than wait
            if k or (budget >= 1 and rows_left >= 1 and blocks.take(rid, done, 1)):
                if draft is None:  # a plain decode, or a draft to come (planned)
                    out.scheduled.append(ScheduledRequest(r, [r.sequence.last_token], done, 1, planned=k))
                else:
                    out.scheduled.append(ScheduledRequest(
                        r, [r.sequence.last_token] + (list(draft.tokens) if k else []),
                        done, 1 + k, draft if k else None))
                budget -= 1 + k
                rows_left -= 1 + k
                i += 1
                continue
            if budget < 1 or rows_left < 1:
                i += 1  # this step is full; the request decodes next step
                continue
            # short of blocks: a partly prefilled waiting request goes first, then the newest
            # running one (possibly r itself)
            partial = [w for w in self.waiting if w.num_computed_tokens > 0]
            victim = partial[-1] if partial else self.running[-1]
            self._preempt(victim, out)
            blocks.refresh()
        num_seqs = len(self.running)
        for r in list(self.waiting):
            if budget <= 0 or num_seqs >= self.max_num_seqs or rows_left <= 0:
                break
            want_prompt_rows = r.prompt_logprobs is not None and not r.prompt_logprobs_done
            if (self.enable_prefix_caching and r.num_computed_tokens == 0 and not want_prompt_rows
                    and not self.runner.has_request(r.request_id)):
                # automatic prefix caching: start after the cached blocks of this prefix (they
                # are taken now, so the free counts change)
                hit = self._claim(r)
                if hit:
                    r.num_computed_tokens = hit
                    blocks.refresh()
                    if blocks.overdrawn():  # those blocks were counted for this step: later
                        self._unclaim(r)
                        r.num_computed_tokens = 0
                        blocks.refresh()
                        break
                    if r.num_preemptions == 0:  # the prompt's share, as admitted first
                        r.num_cached_tokens = min(hit, r.sequence.num_prompt_tokens)
            left = r.num_tokens - r.num_computed_tokens
            chunk = min(budget, left)
            if want_prompt_rows:
                chunk = min(chunk, rows_left)  # a logit row per prompt token
            chunk = blocks.largest_chunk(r.request_id, r.num_computed_tokens, chunk)
            if chunk == 0:
                if not out.scheduled:  # alone and still short: nothing else holds blocks to wait for
                    need = self.runner.num_blocks_needed(r.request_id, r.num_computed_tokens, 1)
                    raise ValueError(
                        f"kv_cache_memory_bytes: request {r.request_id} cannot get a KV block even "
                        f"with nothing else running (needs {need}, free "
                        f"{self.runner.num_free_blocks()}); give a larger kv_cache_memory_bytes")
                break  # first come, first served: later requests wait too
            blocks.take(r.request_id, r.num_computed_tokens, chunk)
            last = chunk == left
            num_logits = chunk if want_prompt_rows else (1 if last else 0)
            start = r.num_computed_tokens
            out.scheduled.append(ScheduledRequest(
                r, r.sequence.token_ids[start:start + chunk], start, num_logits, None, True))
            budget -= chunk
            rows_left -= num_logits
            num_seqs += 1
            if not last:
                break  # a chunked prompt continues next step, before later ones start
        return out
