"""Sampling parameters and request outputs, shaped like vLLM's (``vllm.SamplingParams``,
``vllm.RequestOutput``), so code written against vLLM reads the same here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Sequence, Union


if TYPE_CHECKING:
    from specdec.structured import StructuredOutputsParams

from specdec._checks import (INT32_MAX, check_bool, check_int, check_real, check_text,
                             check_token_ids, error, is_int)


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
    # constrain the output to a JSON schema / regex / choice / grammar (vLLM's name; a dict of
    # StructuredOutputsParams' fields is taken too): specdec.structured
    structured_outputs: Optional["StructuredOutputsParams"] = None

    def __post_init__(self) -> None:
        self._validate()

    def _validate(self) -> None:
        def f(name: str) -> str:
            return f"SamplingParams.{name}"

        self.temperature = check_real(f("temperature"), self.temperature,
                                      "a finite number >= 0 (0 is greedy)", lambda v: v >= 0)
        self.top_k = check_int(f("top_k"), self.top_k, -1, INT32_MAX,
                               f"-1 or 0 (all tokens) or a positive integer up to {INT32_MAX}")
        self.top_p = check_real(f("top_p"), self.top_p, "a number in (0, 1]",
                                lambda v: 0 < v <= 1)
        self.min_p = check_real(f("min_p"), self.min_p, "a number in [0, 1]",
                                lambda v: 0 <= v <= 1)
        if self.seed is not None:
            self.seed = check_int(f("seed"), self.seed, 0, 2**64 - 1,
                                  "None or an integer in [0, 2^64)")
        if self.max_tokens is not None:
            self.max_tokens = check_int(f("max_tokens"), self.max_tokens, 1, None,
                                        "None (up to the model length) or an integer >= 1")
        stop = self.stop
        allowed = "None, a non-empty string or a list of non-empty strings"
        if stop is None:
            stop = []
        elif isinstance(stop, str):
            stop = [stop]
        elif isinstance(stop, (bytes, bytearray, dict)) or not isinstance(stop, Iterable):
            raise error(f("stop"), stop, allowed)
        stop = sorted(stop, key=repr) if isinstance(stop, (set, frozenset)) else list(stop)
        for i, s in enumerate(stop):
            check_text(f(f"stop[{i}]") if not isinstance(self.stop, str) else f("stop"),
                       s, allowed, empty_ok=False)
        self.stop = stop
        ids = self.stop_token_ids
        if ids is None:
            ids = []
        if isinstance(ids, (str, bytes, dict)) or not isinstance(ids, Iterable):
            raise error(f("stop_token_ids"), ids, "None or a list of token ids (integers >= 0)")
        self.stop_token_ids = check_token_ids(
            f("stop_token_ids"), sorted(ids, key=repr) if isinstance(ids, (set, frozenset)) else list(ids))
        self.ignore_eos = check_bool(f("ignore_eos"), self.ignore_eos)
        self.skip_special_tokens = check_bool(f("skip_special_tokens"), self.skip_special_tokens)
        for name in ("logprobs", "prompt_logprobs"):
            v = getattr(self, name)
            if v is not None:
                setattr(self, name, check_int(f(name), v, 0, 1000, "None or an integer in [0, 1000]"))
        if not is_int(self.n) or self.n != 1:
            raise error(f("n"), self.n, "1 (several completions per prompt are not supported yet)")
        if self.structured_outputs is not None:
            from specdec.structured import StructuredOutputsParams
            self.structured_outputs = StructuredOutputsParams.from_any(self.structured_outputs, f("structured_outputs"))

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
