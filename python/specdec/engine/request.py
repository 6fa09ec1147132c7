"""One request's state, owned by the engine: its tokens (a C++ ``Sequence`` that proposers read
without copies), how many of them are in the target's KV cache, its status and its metrics.

The length lives in one place: ``sequence`` holds the prompt and every accepted token;
``num_computed_tokens`` counts those in the target's cache. A running request always has
``num_computed_tokens == len(sequence) - 1`` between steps (its last token is the next input).
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any, List, Optional, Union

from specdec import _core
from specdec.outputs import SamplingParams


class RequestStatus(enum.Enum):
    WAITING = "waiting"          # queued, or preempted and waiting to be recomputed
    RUNNING = "running"          # prefilled; decodes / verifies each step
    FINISHED_STOPPED = "stop"
    FINISHED_LENGTH = "length"
    FINISHED_ABORTED = "abort"

    @property
    def finished(self) -> bool:
        return self.is_finished


# a plain attribute per member, read on every request of every step (an Enum's .value is a slow
# descriptor)
for _status in RequestStatus:
    _status.is_finished = _status.value in ("stop", "length", "abort")
del _status


@dataclass
class Request:
    request_id: str
    prompt: Optional[str]
    params: SamplingParams
    sequence: "_core.spec_decode.Sequence"
    generator: Optional["_core.SamplingGenerator"]
    num_computed_tokens: int = 0
    status: RequestStatus = RequestStatus.WAITING
    stop_reason: Union[int, str, None] = None
    text: str = ""                       # the output text (set at the end, or per token with stop strings)
    logprobs: Optional[list] = None
    prompt_logprobs: Optional[list] = None
    prompt_logprobs_done: bool = False
    cumulative_logprob: float = 0.0
    verify: Any = None                   # its _core VerifyRequest (set when the engine takes it)
    ask: Any = None                      # its _core ProposeRequest for ask_k draft tokens (kept while k stays)
    ask_k: int = 0
    needs_logits: bool = False           # the step must return logits rows (sampled, or logprobs)
    constraint: Any = None               # structured outputs: its grammar state (specdec.structured.Constraint)
    stream: Any = None                   # a StreamDecoder: the text of new tokens as they come
    final_only: bool = False             # its queue gets only the finished output (all its tokens), not each step's
    num_streamed_chars: int = 0          # with stop strings: how much of ``text`` was streamed
    text_decoder: Any = None             # with stop strings: keeps ``text`` current per token
    arrival_time: float = field(default_factory=time.monotonic)
    first_scheduled_time: Optional[float] = None
    first_token_time: Optional[float] = None
    finished_time: Optional[float] = None
    num_preemptions: int = 0
    num_cached_tokens: int = 0           # prompt tokens taken from the prefix cache (first admission)

    @property
    def prompt_token_ids(self) -> List[int]:
        return self.sequence.token_ids[:self.sequence.num_prompt_tokens]

    @property
    def output_token_ids(self) -> List[int]:
        return self.sequence.output_token_ids

    @property
    def num_tokens(self) -> int:
        return len(self.sequence)

    @property
    def num_output_tokens(self) -> int:
        return self.sequence.num_output_tokens

    @property
    def stats(self) -> "_core.spec_decode.SpecDecodingStats":
        """The request's speculative-decoding counters (kept by the C++ verifier)."""
        return self.verify.stats if self.verify is not None else _core.spec_decode.SpecDecodingStats()

    @property
    def finished(self) -> bool:
        return self.status.is_finished

    @property
    def finish_reason(self) -> Optional[str]:
        return self.status.value if self.status.finished else None

    def metrics(self) -> dict:
        """Per-request metrics with vLLM's names (spec decoding) plus timings."""
        s = self.stats
        end = self.finished_time or time.monotonic()
        start = self.first_scheduled_time or self.arrival_time
        gen_time = (end - self.first_token_time) if self.first_token_time else 0.0
        out = {
            "num_drafts": s.num_drafts,
            "num_draft_tokens": s.num_draft_tokens,
            "num_accepted_tokens": s.num_accepted_tokens,
            "num_accepted_tokens_per_pos": list(s.num_accepted_tokens_per_pos),
            "acceptance_rate_per_pos": list(s.acceptance_rate_per_pos),
            "acceptance_rate": s.acceptance_rate,
            "mean_acceptance_length": s.mean_acceptance_length,
            "num_prompt_tokens": self.sequence.num_prompt_tokens,
            "num_output_tokens": self.num_output_tokens,
            "num_preemptions": self.num_preemptions,
            "num_cached_tokens": self.num_cached_tokens,
            # as vLLM: from arrival (queueing included) to the first generated token
            "time_to_first_token": (self.first_token_time - self.arrival_time) if self.first_token_time else None,
            "queue_seconds": start - self.arrival_time,
            "e2e_seconds": end - self.arrival_time,
            # tokens after the first over the time after the first (decode speed)
            "tokens_per_s": (self.num_output_tokens - 1) / gen_time if gen_time > 0 else 0.0,
        }
        return out
