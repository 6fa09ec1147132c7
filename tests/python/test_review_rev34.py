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
