"""Stop strings are never streamed: what ``stream()`` and ``generate(on_token=...)`` send, joined,
equals the final text, for plain decoding and every speculative method (issue 20, finding 2)."""


import pytest

import specdec
from specdec.engine.core import stable_text_end

from paths import STORIES  # noqa: E402
PROMPTS = ["Once upon a time", "The dog", "Lily went to the park"]


class Echo(specdec.Proposer):
    def propose(self, requests):
        return [[r.token_ids[-1]] * r.num_speculative_tokens for r in requests]


METHODS = {
    "plain": None,
    "ngram": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1,
              "prompt_lookup_max": 3},
    "suffix": {"method": "suffix", "num_speculative_tokens": 5},
    "draft_model": {"method": "draft_model", "model": STORIES, "num_speculative_tokens": 4},
    "custom": {"method": "custom", "proposer": Echo(), "num_speculative_tokens": 3},
}


@pytest.fixture(scope="module")
def stops():
    """Stop strings cut out of each prompt's plain output: a word that starts in the middle (it
    spans tokens, so a step may emit it and more at once) and a two-word string after it."""
    llm = specdec.LLM(STORIES, max_model_len=128, progress=False)
    out = llm.generate(PROMPTS, specdec.SamplingParams(temperature=0, max_tokens=40, ignore_eos=True))
    cases = []
    for o in out:
        text = o.outputs[0].text
        words = text.split()
        mid = words[len(words) // 3]
        assert mid in text[1:]
        cases.append([mid[1:] if len(mid) > 2 else mid, " ".join(words[-3:-1])])
    return cases


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_streamed_text_equals_final_text_with_stop_strings(method, temperature, stops):
    llm = specdec.LLM(STORIES, max_model_len=128, progress=False,
                      speculative_config=METHODS[method])
    for prompt, stop in zip(PROMPTS, stops):
        for stop_list in ([stop[0]], stop, [stop[1]]):
            params = specdec.SamplingParams(temperature=temperature, seed=7, max_tokens=40,
                                            ignore_eos=True, stop=stop_list)
            streamed, last = "", None
            for item in llm.stream(prompt, params):
                streamed += item.new_text
                last = item
            final = last.output.outputs[0].text
            assert streamed == final, (method, stop_list, streamed, final)
            if last.output.outputs[0].finish_reason == "stop":
                assert not any(s in streamed for s in stop_list)
            pieces = []
            out = llm.generate(prompt, params, on_token=lambda _rid, t: pieces.append(t))[0]
            assert "".join(pieces) == out.outputs[0].text
            if temperature == 0:  # sampled drafts may differ between runs (the suffix cache)
                assert out.outputs[0].text == final


def test_streamed_text_equals_final_text_without_stop_strings_and_with_special_tokens():
    llm = specdec.LLM(STORIES, max_model_len=128, progress=False)
    for skip in (True, False):
        params = specdec.SamplingParams(temperature=0, max_tokens=60, skip_special_tokens=skip)
        streamed, last = "", None
        for item in llm.stream("Once upon a time", params):
            streamed += item.new_text
            last = item
        assert streamed == last.output.outputs[0].text


def test_an_aborted_stream_with_stop_strings_gets_its_held_back_text():
    llm = specdec.LLM(STORIES, max_model_len=128, progress=False)
    params = specdec.SamplingParams(temperature=0, max_tokens=100, ignore_eos=True,
                                    stop=["zzzz-never"])
    streamed = ""
    stream = llm.stream("Once upon a time", params)
    for i, item in enumerate(stream):
        streamed += item.new_text
        if i == 5:
            llm.abort(item.request_id)
        last = item
    assert last.output.outputs[0].finish_reason == "abort"
    assert streamed == last.output.outputs[0].text


@pytest.mark.parametrize("text,stops,end", [
    ("hello wor", ["world"], 6),          # "wor" may become "world"
    ("hello w", ["world", "x"], 6),
    ("hello", ["world"], 5),
    ("abc\ufffd", ["zz"], 3),             # an unfinished character waits
    ("ab", ["abc"], 0),
    ("", ["a"], 0),
    ("aXa", ["aXaY", "aY"], 0),           # the longest matching tail is held
])
def test_stable_text_end(text, stops, end):
    assert stable_text_end(text, stops) == end


def test_the_earliest_stop_string_ends_the_text_whatever_the_order():
    llm = specdec.LLM(STORIES, max_model_len=128, progress=False)
    plain = llm.generate("Once upon a time", specdec.SamplingParams(temperature=0, max_tokens=30))
    text = plain[0].outputs[0].text
    words = text.split()
    early, late = words[1], words[4]
    assert text.find(early) < text.find(late)
    out = llm.generate("Once upon a time", specdec.SamplingParams(
        temperature=0, max_tokens=30, stop=[late, early]))[0].outputs[0]
    assert out.stop_reason == early and out.text == text[:text.find(early)]


@pytest.mark.parametrize("method", ["ngram", "draft_model", "custom"])
@pytest.mark.parametrize("logprobs", [None, 1])
def test_logprobs_stop_where_a_stop_string_cuts_a_verified_draft(method, logprobs, stops):
    """A stop string inside a step's accepted drafts keeps neither the tokens after it nor their
    log-probabilities: the cumulative logprob and the logprobs list are plain decoding's."""
    plain = specdec.LLM(STORIES, max_model_len=128, progress=False)
    spec = specdec.LLM(STORIES, max_model_len=128, progress=False, speculative_config=METHODS[method])
    for prompt, stop in zip(PROMPTS, stops):
        params = specdec.SamplingParams(temperature=0, max_tokens=40, ignore_eos=True, stop=[stop[0]],
                                        logprobs=logprobs)
        want = plain.generate(prompt, params)[0].outputs[0]
        got = spec.generate(prompt, params)[0].outputs[0]
        assert got.token_ids == want.token_ids and got.text == want.text
        assert got.cumulative_logprob == pytest.approx(want.cumulative_logprob, abs=1e-4)
        if logprobs is not None:
            assert len(got.logprobs) == len(got.token_ids) == len(want.logprobs)
