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
    core = llm.engine.core
    fused, whole = core.propose_and_step, core.decode_step
    core.propose_and_step = lambda *a: calls.append(len(a[1])) or fused(*a)
    # nothing waiting: the step is scheduled in the same call too
    core.decode_step = lambda *a: calls.append(sum(x is not None for x in a[4])) or whole(*a)
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
    drafts, out, seconds, forward, outcomes = spec.propose_and_step(proposer, asks, [0], runner, steps)
    assert len(drafts) == 1 and len(drafts[0]) == 2 and seconds >= 0 and forward > 0
    assert outcomes is None  # no verifier given
    assert list(out.logits_start) == [0, 3]  # the last token's row + one per draft token


def test_verifying_inside_the_call_equals_verifying_after_it(context):
    """The same drafts and forward, verified in the call or by StepVerifier.verify after it: the
    same tokens, counters and rollback; verifies that do not match the steps are refused."""
    results = []
    for inside in (False, True):
        runner = _core.ModelRunner(context, STORIES, "", 128, 8 << 20)
        drafter = _core.ModelRunner(context, STORIES, "", 128, 8 << 20)
        proposer = spec.DraftModelProposer(drafter, drafter.config.vocab_size)
        verifier = spec.StepVerifier(runner, [], 128)
        seqs = [spec.Sequence("a", [1, 2, 3]), spec.Sequence("b", [1, 5, 6, 7])]
        vreqs = [spec.VerifyRequest(s, 0.0, on_argmax=True) for s in seqs]
        for s in seqs:
            runner.step([StepRequest(s.request_id, s.token_ids[:-1], num_computed_tokens=0, num_logits=0)])
        asks = [spec.ProposeRequest(s, 3) for s in seqs]
        steps = [StepRequest(s.request_id, [s.token_ids[-1]], num_computed_tokens=len(s) - 1, num_logits=1)
                 for s in seqs]
        if inside:
            with pytest.raises(ValueError, match=r"verifies = 1 items.*2 VerifyRequests"):
                spec.propose_and_step(proposer, asks, [0, 1], runner, steps, False, verifier, vreqs[:1])
            with pytest.raises(ValueError, match=r"verifies\[0\] = b.*steps\[0\] \(a\)"):
                spec.propose_and_step(proposer, asks, [0, 1], runner, steps, False, verifier, vreqs[::-1])
            drafts, out, _, _, outcomes = spec.propose_and_step(proposer, asks, [0, 1], runner, steps, False,
                                                                verifier, vreqs)
        else:
            drafts, out, _, _, _ = spec.propose_and_step(proposer, asks, [0, 1], runner, steps)
            starts = list(out.logits_start)
            outcomes = verifier.verify([(v, d, starts[i + 1], steps[i].num_computed_tokens)
                                        for i, (v, d) in enumerate(zip(vreqs, drafts))], out)
        results.append(([list(d.tokens) for d in drafts], [tuple(o[:2]) + tuple(o[3:]) for o in outcomes],
                        [s.token_ids for s in seqs], [runner.num_cached_tokens(s.request_id) for s in seqs],
                        verifier.stats.num_accepted_tokens))
    assert results[0] == results[1]
    assert results[1][4] > 0  # the stories model drafting for itself: drafts accepted


def test_no_drafting_in_the_forward_call_when_the_step_is_tight():
    """Rows reserved for a draft that comes back short would be taken from other requests when
    the step's budget is binding (or requests wait): then the proposer runs first, as before."""
    spec_cfg = {"method": "draft_model", "model": STORIES, "num_speculative_tokens": 3}
    llm = specdec.LLM(STORIES, progress=False, speculative_config=spec_cfg, max_num_batched_tokens=8)
    calls = []
    core = llm.engine.core
    fused, whole = core.propose_and_step, core.decode_step
    core.propose_and_step = lambda *a: calls.append(len(a[1])) or fused(*a)
    # nothing waiting: the step is scheduled in the same call too
    core.decode_step = lambda *a: calls.append(sum(x is not None for x in a[4])) or whole(*a)
    params = specdec.SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    prompts = ["Once upon a time", "The cat", "A girl named Lily"]
    got = [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
    want = [o.outputs[0].token_ids for o in specdec.LLM(STORIES, progress=False).generate(prompts, params)]
    assert got == want
    assert 3 not in calls  # 3 requests x (1 + 3) rows > 8: they propose first


def test_a_prefill_in_a_fused_step_is_verified_after_the_call():
    """The scheduler can put a prefill chunk into a step planned for drafting inside the forward's
    call (a request it preempted comes back at once; here one arrives during scheduling): the
    step then verifies after the call, prefill rows and all, and every output stays plain
    decoding's."""
    spec_cfg = {"method": "draft_model", "model": STORIES, "num_speculative_tokens": 3}
    llm = specdec.LLM(STORIES, progress=False, speculative_config=spec_cfg)
    core = llm.engine.core
    params = specdec.SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    original, injected = core.scheduler.schedule, []

    def schedule(drafts, planned=None):
        if planned and not injected:
            r = llm._make_request("The dog", params)
            core.add_request(r)
            injected.append(r)
        return original(drafts, planned)

    core.scheduler.schedule = schedule
    # as when a request is short of KV blocks: the C++ decode step declines, the scheduler plans
    core.decode_step = lambda *a: None
    prompts = ["Once upon a time", "The cat"]
    got = [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
    while core.has_unfinished_requests():
        core.step()
    plain = specdec.LLM(STORIES, progress=False)
    want = [o.outputs[0].token_ids for o in plain.generate(prompts + ["The dog"], params)]
    assert injected and got + [list(injected[0].output_token_ids)] == want


def test_decode_step_equals_propose_and_step_then_verify(context):
    """spec_decode.decode_step (schedule, draft, forward and verify in one call) gives the tokens,
    counters, rollback and sequences of propose_and_step with verification; a request without an
    ask decodes plainly in the same step."""
    results = []
    for whole in (False, True):
        runner = _core.ModelRunner(context, STORIES, "", 128, 8 << 20)
        drafter = _core.ModelRunner(context, STORIES, "", 128, 8 << 20)
        proposer = spec.DraftModelProposer(drafter, drafter.config.vocab_size)
        verifier = spec.StepVerifier(runner, [], 128)
        seqs = [spec.Sequence("a", [1, 2, 3]), spec.Sequence("b", [1, 5, 6, 7]), spec.Sequence("c", [1, 9])]
        vreqs = [spec.VerifyRequest(s, 0.0, on_argmax=True) for s in seqs]
        for s in seqs:
            runner.step([StepRequest(s.request_id, s.token_ids[:-1], num_computed_tokens=0, num_logits=0)])
        asks = [spec.ProposeRequest(seqs[0], 3), None, spec.ProposeRequest(seqs[2], 2)]
        for _ in range(3):
            if whole:
                lens, out, seconds, forward, outcomes, asked = spec.decode_step(proposer, runner, verifier,
                                                                                vreqs, asks, False)
                assert seconds >= 0 and forward > 0 and asked == 5
            else:
                steps = [StepRequest(s.request_id, [s.token_ids[-1]], num_computed_tokens=len(s) - 1, num_logits=1)
                         for s in seqs]
                drafts, out, _, _, outcomes = spec.propose_and_step(
                    proposer, [asks[0], asks[2]], [0, 2], runner, steps, False, verifier, vreqs)
                lens = [len(drafts[0]), 0, len(drafts[1])]
            assert lens == [3, 0, 2]
            results.append((whole, lens, [tuple(o[:2]) + tuple(o[3:]) for o in outcomes]))
        results.append(([s.token_ids for s in seqs], [runner.num_cached_tokens(s.request_id) for s in seqs],
                        verifier.stats.num_accepted_tokens, verifier.stats.num_draft_tokens))
    n = len(results) // 2
    assert [r[1:] for r in results[:n - 1]] == [r[1:] for r in results[n:-1]]
    assert results[n - 1] == results[-1]
    assert results[-1][2] > 0  # the stories model drafting for itself: drafts accepted


def test_one_call_steps_count_their_scheduling_and_verification_as_host_time():
    """The one-call decode step schedules and verifies inside the call: that time is host time in
    the engine's step times (not sampling, not zero)."""
    spec_cfg = {"method": "draft_model", "model": STORIES, "num_speculative_tokens": 3}
    llm = specdec.LLM(STORIES, progress=False, speculative_config=spec_cfg)
    calls = []
    core = llm.engine.core
    whole = core.decode_step
    core.decode_step = lambda *a: calls.append(1) or whole(*a)
    llm.generate(["Once upon a time"], specdec.SamplingParams(temperature=0, max_tokens=24, ignore_eos=True))
    times = core.stats.times
    assert len(calls) >= 3 and times.host > 0 and times.sampling > 0 and times.forward > times.host


def test_decode_step_short_of_blocks(context):
    """A draft whose KV blocks do not fit is dropped (the request decodes without it); a request
    that cannot get the block of its one decode token makes the call decline: None, nothing run,
    nothing changed (the scheduler preempts)."""
    runner = _core.ModelRunner(context, STORIES, "", 32, 32768)  # 2 blocks of 16 tokens
    drafter = _core.ModelRunner(context, STORIES, "", 128, 8 << 20)
    proposer = spec.DraftModelProposer(drafter, drafter.config.vocab_size)
    verifier = spec.StepVerifier(runner, [], 32)
    assert runner.num_free_blocks() == [2]
    seq = spec.Sequence("a", list(range(1, 17)))
    runner.step([StepRequest("a", seq.token_ids[:-1], num_computed_tokens=0, num_logits=0)])
    runner.step([StepRequest("z", [1], num_computed_tokens=0, num_logits=0)])  # the last free block
    assert runner.num_free_blocks() == [0]
    vreq = spec.VerifyRequest(seq, 0.0, on_argmax=True)
    ask = spec.ProposeRequest(seq, 3)
    lens, out, _, _, outcomes, asked = spec.decode_step(proposer, runner, verifier, [vreq], [ask], False)
    assert lens == [0] and out.num_rows == 1 and asked == 0  # the draft's positions 16.. need a block: dropped
    assert len(outcomes[0][0]) == 1 and outcomes[0][4] == 16 and len(seq) == 17
    assert verifier.stats.num_draft_tokens == 0
    assert spec.decode_step(proposer, runner, verifier, [vreq], [ask], False) is None  # position 16: no block
    assert len(seq) == 17 and runner.num_cached_tokens("a") == 16 and not drafter.has_request("a")
    runner.free("z")
    lens, out, _, _, outcomes, asked = spec.decode_step(proposer, runner, verifier, [vreq], [ask], False)
    assert lens == [3] and asked == 3 and outcomes[0][4] >= 17


def test_decode_step_refuses_bad_rows_naming_the_field(context):
    runner = _core.ModelRunner(context, STORIES, "", 128, 8 << 20)
    proposer = spec.DraftModelProposer(runner, runner.config.vocab_size)
    verifier = spec.StepVerifier(runner, [], 128)
    a, b = spec.Sequence("a", [1, 2, 3]), spec.Sequence("b", [1, 2])
    va = spec.VerifyRequest(a, 0.0, on_argmax=True)
    with pytest.raises(ValueError, match=r"asks = 0 items.*1 \(one per VerifyRequest"):
        spec.decode_step(proposer, runner, verifier, [va], [], False)
    with pytest.raises(ValueError, match=r"asks\[0\] = b.*ProposeRequest of a or None"):
        spec.decode_step(proposer, runner, verifier, [va], [spec.ProposeRequest(b, 2)], False)
    with pytest.raises(ValueError, match=r"verifies\[0\] = 'a': a VerifyRequest"):
        spec.decode_step(proposer, runner, verifier, ["a"], [None], False)
    with pytest.raises(ValueError, match=r"asks\[0\] = 3: a ProposeRequest or None"):
        spec.decode_step(proposer, runner, verifier, [va], [3], False)
