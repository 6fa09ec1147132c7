"""A drafting model proposes inside the verifying forward's call (spec_decode.propose_and_step):
the scheduler reserves k + 1 rows first, the drafts are appended in C++, one return to Python."""

import pytest

import specdec
from specdec import _core
from specdec._core import StepRequest

from paths import STORIES

spec = _core.spec_decode


def test_which_proposers_draft_full_length(context):
    assert not spec.NgramProposer(1, 3).drafts_full_length
    assert not spec.SuffixProposer().drafts_full_length
    drafter = _core.ModelRunner(context, STORIES, "", 128, 8 << 20)
    assert spec.DraftModelProposer(drafter, drafter.config.vocab_size).drafts_full_length


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_engine_drafts_in_the_forward_call_and_stays_lossless(temperature):
    spec_cfg = {"method": "draft_model", "model": STORIES, "num_speculative_tokens": 3}
    llm = specdec.LLM(STORIES, progress=False, speculative_config=spec_cfg)
    calls = []
    fused = llm.engine.core.propose_and_step
    llm.engine.core.propose_and_step = lambda *a: calls.append(len(a[1])) or fused(*a)
    params = specdec.SamplingParams(temperature=temperature, max_tokens=24, ignore_eos=True, seed=7)
    prompts = ["Once upon a time", "The cat", "A girl named Lily"]
    got = [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
    plain = specdec.LLM(STORIES, progress=False)
    want = [o.outputs[0].token_ids for o in plain.generate(prompts, params)]
    assert got == want  # greedy: plain decoding's tokens; seeded sampling: coupled, the same
    assert calls and max(calls) == 3  # the three requests drafted in one call
    m = llm.last_metrics
    assert m["num_draft_tokens"] > 0 and m["num_accepted_tokens"] <= m["num_draft_tokens"]
    if temperature == 0:  # the drafter is the target itself: every greedy draft is accepted
        assert m["num_accepted_tokens"] == m["num_draft_tokens"]


def test_bad_rows_are_refused_naming_the_field(context):
    runner = _core.ModelRunner(context, STORIES, "", 128, 8 << 20)
    drafter = _core.ModelRunner(context, STORIES, "", 128, 8 << 20)
    proposer = spec.DraftModelProposer(drafter, drafter.config.vocab_size)
    seq = spec.Sequence("a", [1, 2, 3])
    asks = [spec.ProposeRequest(seq, 2)]
    steps = [StepRequest("a", [1, 2, 3], num_computed_tokens=0, num_logits=1)]
    with pytest.raises(ValueError, match="rows"):
        spec.propose_and_step(proposer, asks, [], runner, steps)
    with pytest.raises(ValueError, match="rows"):
        spec.propose_and_step(proposer, asks, [1], runner, steps)
    other = [StepRequest("b", [1, 2, 3], num_computed_tokens=0, num_logits=1)]
    with pytest.raises(ValueError, match=r"steps\[0\].request_id = b.*asks\[0\] \(a\)"):
        spec.propose_and_step(proposer, asks, [0], runner, other)
    prefill = [StepRequest("a", [1, 2, 3], num_computed_tokens=0, num_logits=1)]
    with pytest.raises(ValueError, match=r"steps\[0\] = 3 tokens after 0.*one token"):
        spec.propose_and_step(proposer, asks, [0], runner, prefill)
    runner.step([StepRequest("a", [1, 2], num_computed_tokens=0, num_logits=0)])
    steps = [StepRequest("a", [3], num_computed_tokens=2, num_logits=1)]
    drafts, out, seconds = spec.propose_and_step(proposer, asks, [0], runner, steps)
    assert len(drafts) == 1 and len(drafts[0]) == 2 and seconds >= 0
    assert list(out.logits_start) == [0, 3]  # the last token's row + one per draft token


def test_no_drafting_in_the_forward_call_when_the_step_is_tight():
    """Rows reserved for a draft that comes back short would be taken from other requests when
    the step's budget is binding (or requests wait): then the proposer runs first, as before."""
    spec_cfg = {"method": "draft_model", "model": STORIES, "num_speculative_tokens": 3}
    llm = specdec.LLM(STORIES, progress=False, speculative_config=spec_cfg, max_num_batched_tokens=8)
    calls = []
    fused = llm.engine.core.propose_and_step
    llm.engine.core.propose_and_step = lambda *a: calls.append(len(a[1])) or fused(*a)
    params = specdec.SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    prompts = ["Once upon a time", "The cat", "A girl named Lily"]
    got = [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
    want = [o.outputs[0].token_ids for o in specdec.LLM(STORIES, progress=False).generate(prompts, params)]
    assert got == want
    assert 3 not in calls  # 3 requests x (1 + 3) rows > 8: they propose first
