"""Proposers: one interface, ``propose(requests) -> drafts`` (one per request) and
``finish(sequence)``. The built-in ones are C++ (``specdec._core.spec_decode``); ``Proposer`` is the base
for research proposers written in Python, called by the engine each step with the same requests
the built-in ones get.

    class Repeat(specdec.Proposer):
        def propose(self, requests):
            return [[r.token_ids[-1]] * r.num_speculative_tokens for r in requests]

    llm = specdec.LLM(model, speculative_config={"method": "custom", "proposer": Repeat(),
                                                 "num_speculative_tokens": 3})

Each request (``ProposeRequest``) has ``request_id``, ``token_ids`` (prompt + accepted output),
``num_prompt_tokens``, ``num_speculative_tokens`` (the most to draft), ``temperature`` and
``greedy``. A draft is a list of token ids (or a ``Draft``); shorter than asked, or empty, is fine.
Drafts from Python carry no probabilities: rejection sampling treats them as point masses, so the
output stays the target's whatever they are.
"""

from __future__ import annotations

import abc
from typing import List, Sequence

from specdec import _core

spec = _core.spec_decode
Draft = spec.Draft
ProposeRequest = spec.ProposeRequest
NgramProposer = spec.NgramProposer
SuffixProposer = spec.SuffixProposer
DraftModelProposer = spec.DraftModelProposer
LayerSkipProposer = spec.LayerSkipProposer
HybridProposer = spec.HybridProposer
ngram_lookup = spec.ngram_lookup


class Proposer(abc.ABC):
    """Base class for Python proposers (``method: "custom"``); a subclass defines ``propose``."""

    name = "custom"

    @abc.abstractmethod
    def propose(self, requests: Sequence["ProposeRequest"]) -> List[Sequence[int]]:
        """One list of token ids (at most ``num_speculative_tokens``) per request, in order."""

    def finish(self, sequence) -> None:
        """The request ended (finished or aborted)."""


__all__ = ["Draft", "DraftModelProposer", "HybridProposer", "LayerSkipProposer", "NgramProposer",
           "ProposeRequest", "Proposer", "SuffixProposer", "ngram_lookup"]
