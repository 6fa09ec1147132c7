"""What the speculative tests share: the tiny real model, its prompts, greedy parameters, and
plain decoding's tokens (the output every method must reproduce token for token)."""

from __future__ import annotations

import specdec
from paths import STORIES  # noqa: F401  (re-exported: the method tests import it from here)
PROMPTS = ["Once upon a time", "The dog", "Lily went to the park and saw a big red ball. She"]
GREEDY = specdec.SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)


def plain(path, prompts, params, **kw):
    """Token ids of plain decoding of each prompt (no speculative_config)."""
    llm = specdec.LLM(path, progress=False, **kw)
    return [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
