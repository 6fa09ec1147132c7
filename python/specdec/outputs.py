"""Sampling parameters and request outputs, shaped like vLLM's (``vllm.SamplingParams``,
``vllm.RequestOutput``), so code written against vLLM reads the same here."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Union


@dataclass
class SamplingParams:
    """How to sample one request. ``temperature=0`` is greedy.

    Bad values raise ValueError naming the field, the value and what is allowed.
    """

    temperature: float = 1.0
    top_k: int = 0  # 0 or -1: all tokens
    top_p: float = 1.0
    min_p: float = 0.0
    seed: Optional[int] = None
    max_tokens: Optional[int] = 16
    stop: Optional[Union[str, List[str]]] = None
    stop_token_ids: Optional[List[int]] = None
    ignore_eos: bool = False
    logprobs: Optional[int] = None
    prompt_logprobs: Optional[int] = None
    skip_special_tokens: bool = True
    n: int = 1

    def __post_init__(self) -> None:
        self.stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        self.stop_token_ids = list(self.stop_token_ids or [])
        self._validate()

    def _validate(self) -> None:
        def bad(name: str, allowed: str) -> ValueError:
            return ValueError(f"SamplingParams.{name} = {getattr(self, name)!r}: {allowed}")

        if not isinstance(self.temperature, (int, float)) or not math.isfinite(self.temperature) \
                or self.temperature < 0:
            raise bad("temperature", "a finite number >= 0 (0 is greedy)")
        if not isinstance(self.top_k, int) or self.top_k < -1:
            raise bad("top_k", "-1 or 0 (all tokens) or a positive integer")
        if not isinstance(self.top_p, (int, float)) or not 0 < self.top_p <= 1:
            raise bad("top_p", "a number in (0, 1]")
        if not isinstance(self.min_p, (int, float)) or not 0 <= self.min_p <= 1:
            raise bad("min_p", "a number in [0, 1]")
        if self.seed is not None and (not isinstance(self.seed, int) or not 0 <= self.seed < 2**64):
            raise bad("seed", "None or an integer in [0, 2^64)")
        if self.max_tokens is not None and (not isinstance(self.max_tokens, int) or self.max_tokens < 1):
            raise bad("max_tokens", "None (up to the model length) or an integer >= 1")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise bad("stop", "a non-empty string or a list of them")
        if any(not isinstance(t, int) or t < 0 for t in self.stop_token_ids):
            raise bad("stop_token_ids", "a list of token ids >= 0")
        for name in ("logprobs", "prompt_logprobs"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or not 0 <= v <= 1000):
                raise bad(name, "None or an integer in [0, 1000]")
        if self.n != 1:
            raise bad("n", "1 (several completions per prompt are not supported yet)")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class Logprob:
    """The log-probability of a token under the model (raw logits), its rank, and its text."""

    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


# One position: token id -> Logprob (the top-n and the actual token).
PositionLogprobs = Dict[int, Logprob]


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: List[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[List[PositionLogprobs]]
    finish_reason: Optional[str] = None  # "stop" or "length"
    stop_reason: Union[int, str, None] = None  # the stop string or token id that ended it

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    request_id: str
    prompt: Optional[str]
    prompt_token_ids: List[int]
    prompt_logprobs: Optional[List[Optional[PositionLogprobs]]]
    outputs: List[CompletionOutput]
    finished: bool = True
    metrics: Dict[str, float] = field(default_factory=dict)


def position_logprobs(top: Sequence, actual_id: Optional[int], actual_logprob: Optional[float],
                      actual_rank: Optional[int], decode) -> PositionLogprobs:
    """vLLM's per-position dict from the top (id, logprob) pairs and the actual token."""
    out: PositionLogprobs = {}
    for rank, (tid, lp) in enumerate(top, start=1):
        out[int(tid)] = Logprob(float(lp), rank, decode(int(tid)))
    if actual_id is not None and actual_id not in out:
        out[int(actual_id)] = Logprob(float(actual_logprob), actual_rank, decode(int(actual_id)))
    return out


__all__ = ["CompletionOutput", "Logprob", "RequestOutput", "SamplingParams", "position_logprobs"]
