"""Tool-call formats (specdec.server.tools) on real chat templates (llama.cpp's models/templates
from the pinned llama-cpp-python sdist): each template's format is recognised, renders the tools,
and a reply in that format parses into OpenAI's tool_calls — whole, and streamed through the
holder that keeps call text out of the content; the grammars of required / named calls take a
well-formed call and refuse another function's name."""

from __future__ import annotations

import json

import pytest

import specdec
from specdec.server import tools as T
from specdec.structured import StructuredOutputs
from spec_helpers import STORIES

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The time in a zone.",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}}

TEMPLATES = {
    "Qwen-Qwen2.5-7B-Instruct.jinja": "hermes",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja": "hermes",
    "meta-llama-Llama-3.1-8B-Instruct.jinja": "llama3_json",
    "meta-llama-Llama-3.2-3B-Instruct.jinja": "llama3_json",
    "meta-llama-Llama-3.3-70B-Instruct.jinja": "llama3_json",
    "mistralai-Mistral-Nemo-Instruct-2407.jinja": "mistral",
    "Mistral-Small-3.2-24B-Instruct-2506.jinja": None,  # v11: [TOOL_CALLS]name[ARGS]{...}, not parsed
    "Qwen3-Coder.jinja": None,  # XML calls (<function=...>): not parsed, refused unless tool_choice none
    "google-gemma-2-2b-it.jinja": None,
}
REPLIES = {
    "hermes": 'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
              '<tool_call>\n{"name": "get_time", "arguments": {"tz": "CET"}}\n</tool_call>',
    "llama3_json": '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}; '
                   '{"name": "get_time", "parameters": {"tz": "CET"}}',
    "mistral": '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}, '
               '{"name": "get_time", "arguments": {"tz": "CET"}}]',
}


@pytest.fixture(scope="module")
def stories_tokenizer():
    return specdec.Tokenizer.from_file(STORIES)


@pytest.mark.parametrize("name", list(TEMPLATES))
def test_formats_of_real_templates(vocab_dir, stories_tokenizer, name):
    source = (vocab_dir / "templates" / name).read_text()
    assert T.detect_format(source) == TEMPLATES[name]
    if TEMPLATES[name] is None:
        return
    msgs = [{"role": "user", "content": "Weather in Paris?"}]
    text = stories_tokenizer.apply_chat_template(msgs, tools=[WEATHER, TIME], chat_template=source)
    assert "get_weather" in text and "get_time" in text


@pytest.mark.parametrize("fmt", T.FORMATS)
def test_replies_parse_whole_and_streamed(fmt):
    text = REPLIES[fmt]
    content, calls = T.parse(fmt, text, ["get_weather", "get_time"])
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == \
        [("get_weather", {"city": "Paris"}), ("get_time", {"tz": "CET"})]
    assert all(c["type"] == "function" and c["id"].startswith("call_") for c in calls)
    assert content == ("Let me look." if fmt == "hermes" else None)
    for step in (1, 3, 7):  # the reply in pieces of several sizes
        h = T.StreamHolder(fmt, ["get_weather", "get_time"])
        streamed = "".join(h.push(text[i:i + step]) for i in range(0, len(text), step))
        rest, got = h.finish()
        assert [c["function"]["name"] for c in got] == ["get_weather", "get_time"]
        assert (streamed + rest).strip() == (content or "")
        assert "get_weather" not in streamed


@pytest.mark.parametrize("fmt", T.FORMATS)
def test_plain_replies_are_content(fmt):
    for text in ("The weather is fine.", "{not json", "[TOOL_CALLS] nope", "<tool_call>{bad}</tool_call>"):
        content, calls = T.parse(fmt, text, ["get_weather"])
        assert calls == [] and content == text
        h = T.StreamHolder(fmt, ["get_weather"])
        streamed = "".join(h.push(text[i:i + 4]) for i in range(0, len(text), 4))
        rest, got = h.finish()
        assert got == [] and streamed + rest == text


@pytest.mark.parametrize("fmt", T.FORMATS)
@pytest.mark.parametrize("choice", ["required", "named"])
def test_call_grammars_take_a_call_and_refuse_other_names(stories_tokenizer, fmt, choice):
    body = {"tools": [WEATHER, TIME], "tool_choice": "required" if choice == "required" else
            {"type": "function", "function": {"name": "get_weather"}}}
    tr = T.parse_request(body)
    tr.format = fmt
    so = StructuredOutputs(stories_tokenizer, stories_tokenizer.vocab_size)
    key = "parameters" if fmt == "llama3_json" else "arguments"
    call = json.dumps({"name": "get_weather", key: {"city": "Paris"}})
    other = json.dumps({"name": "get_time", key: {"tz": "CET"}})
    wrap = {"hermes": lambda c: f"<tool_call>\n{c}\n</tool_call>",
            "llama3_json": lambda c: c, "mistral": lambda c: f"[TOOL_CALLS] [{c}]"}[fmt]
    good = stories_tokenizer.encode_continuation(wrap(call))
    c = so.constraint(T.constraint(tr))
    assert c.valid_prefix(good) == len(good)
    assert c.accept(good) and c.matcher.is_accepting()
    bad = stories_tokenizer.encode_continuation(wrap(other))
    n = so.constraint(T.constraint(tr)).valid_prefix(bad)
    if choice == "named":
        assert n < len(bad)  # another function's name is refused
    else:
        assert n == len(bad)


def test_auto_and_none_add_no_constraint():
    for choice in ("auto", "none", None):
        tr = T.parse_request({"tools": [WEATHER], **({"tool_choice": choice} if choice else {})})
        tr.format = "hermes"
        assert T.constraint(tr) is None
    assert T.parse_request({"tools": []}) is None


def test_review_edge_cases():
    # JSON that names no tool of the request is an answer (Llama 3 format)
    assert T.parse("llama3_json", '{"name": "Alice", "age": 3}', ["get_weather"]) == ('{"name": "Alice", "age": 3}', [])
    assert T.parse("mistral", '[TOOL_CALLS] [{"name": "x", "arguments": {}}]', ["get_weather"])[1] == []
    # Mistral's array followed by an end-of-generation token's text
    _, calls = T.parse("mistral", '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "P"}}]</s>',
                       ["get_weather"])
    assert [c["function"]["name"] for c in calls] == ["get_weather"]
    # a bare Hermes call after a newline is held back, not streamed and then called too
    h = T.StreamHolder("hermes", ["get_weather"])
    text = '\n{"name": "get_weather", "arguments": {"city": "Paris"}}'
    streamed = "".join(h.push(ch) for ch in text)
    rest, calls = h.finish()
    assert "get_weather" not in streamed and [c["function"]["name"] for c in calls] == ["get_weather"]
    # tool_choice naming a function with a non-string
    from specdec.server.protocol import ApiError
    with pytest.raises(ApiError) as e:
        T.parse_request({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": ["x"]}}})
    assert e.value.param == "tool_choice.function.name"
    # Mistral v11 calls ([TOOL_CALLS]name[ARGS]{...}) are not the format parsed here
    assert T.detect_format("[TOOL_CALLS]{{ name }}[ARGS]{{ args }}") is None
    # a marker that is a control token is named by id in the grammar
    tr = T.parse_request({"tools": [WEATHER], "tool_choice": "required"})
    tr.format, tr.control = "mistral", {"[TOOL_CALLS]": 9}
    assert T.constraint(tr).grammar.startswith("start: <[9]>")
