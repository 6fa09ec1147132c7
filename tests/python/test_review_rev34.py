"""Review of adafed6 / 38c682b (issue 34): regressions found by a hostile review."""

import specdec

from paths import STORIES

GREEDY = specdec.SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)


def _want(prompt):
    return list(specdec.LLM(STORIES, progress=False).generate(prompt, GREEDY)[0].outputs[0].token_ids)


def test_engine_step_returns_each_steps_news_for_a_request_made_without_stream():
    """LLMEngine.step() is documented to return the step's outputs (and queue them). A request
    built by LLM._make_request without stream=True (as cli/bench/tests build them) is now marked
    final_only, so a caller driving the engine by step() gets nothing until the request finishes,
    and the queue holds one item with only the last step's tokens."""
    llm = specdec.LLM(STORIES, progress=False)
    eng = llm.engine
    r = llm._make_request("Once upon a time", GREEDY)
    sink = eng.add_request(r)
    per_step = []
    while eng.has_unfinished_requests():
        per_step.append(eng.step())
    queued = []
    while not sink.empty():
        queued.append(sink.get())
    assert queued and queued[-1].finished
    assert sum(len(outs) for outs in per_step) > 1  # one output per step that made a token
    assert sum((list(i.new_token_ids) for i in queued), []) == _want("Once upon a time")


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def test_keeping_a_small_array_of_a_step_does_not_pin_its_logits(context):
    """StepOutput's arrays are now views whose base is the whole StepOutput: keeping a step's
    argmax (rows int32) keeps its logits [rows, vocab] float32 (and hidden states) alive too.
    Before, each array owned its own vector. 100 steps x 119 rows: ~48 KB of argmax kept, ~23 MB
    of logits pinned."""
    import gc

    from specdec import _core
    from specdec._core import StepRequest

    runner = _core.ModelRunner(context, STORIES, "", 128, 16 << 20)
    kept = []
    gc.collect()
    before = _rss_bytes()
    for i in range(100):
        out = runner.step([StepRequest(f"x{i}", list(range(1, 120)), num_computed_tokens=0, num_logits=119)])
        kept.append(out.argmax)
        del out
        runner.free(f"x{i}")
    gc.collect()
    logits_bytes = 100 * 119 * runner.config.vocab_size * 4
    assert _rss_bytes() - before < logits_bytes // 2
