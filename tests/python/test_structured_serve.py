"""Structured outputs through ``specdec serve`` with the official ``openai`` client: OpenAI's
``response_format`` (json_object, json_schema) and vLLM's ``structured_outputs`` / ``guided_*``
fields, whole and streamed, plain and speculative, equal to ``LLM`` with the same constraint; bad
and hostile constraints answered with a 400 naming the field while the server keeps serving."""

from __future__ import annotations

import json
import time

import pytest

openai = pytest.importorskip("openai")
jsonschema = pytest.importorskip("jsonschema")

import specdec  # noqa: E402
from serve_helpers import ServerProcess  # noqa: E402
from spec_helpers import STORIES  # noqa: E402

SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 12},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}


def _client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = ServerProcess(["--model", STORIES, "--served-model-name", "stories", "--speculative-config",
                       json.dumps({"method": "draft_model", "model": STORIES, "num_speculative_tokens": 3})],
                      str(tmp_path_factory.mktemp("serve") / "structured.log"))
    yield s
    assert s.stop() == 0, s.log()


@pytest.fixture(scope="module")
def llm():
    return specdec.LLM(STORIES, progress=False)


def _want(llm, prompt, so, max_tokens=60):
    p = specdec.SamplingParams(temperature=0, max_tokens=max_tokens, structured_outputs=so)
    return llm.generate(prompt, p)[0].outputs[0].text


def test_response_format_json_schema_whole_and_streamed(server, llm):
    c = _client(server)
    rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}}
    r = c.completions.create(model="stories", prompt="Once upon a time", max_tokens=60, temperature=0,
                             extra_body={"response_format": rf})
    text = r.choices[0].text
    jsonschema.validate(json.loads(text), SCHEMA)
    assert text == _want(llm, "Once upon a time", {"json": SCHEMA})
    pieces = [ch.choices[0].text for ch in c.completions.create(
        model="stories", prompt="Once upon a time", max_tokens=60, temperature=0, stream=True,
        extra_body={"response_format": rf})]
    assert "".join(pieces) == text


def test_json_object_and_vllm_fields(server, llm):
    c = _client(server)
    r = c.completions.create(model="stories", prompt="The dog", max_tokens=60, temperature=0,
                             extra_body={"response_format": {"type": "json_object"}})
    # stories260K never closes an open object (json_object on a real model: the SmolLM2 test)
    assert r.choices[0].text.startswith("{")
    assert r.choices[0].text == _want(llm, "The dog", {"json_object": True})
    r = c.completions.create(model="stories", prompt="The dog", max_tokens=10, temperature=0,
                             extra_body={"guided_choice": ["happy", "sad"]})
    assert r.choices[0].text in ("happy", "sad")
    r = c.completions.create(model="stories", prompt="The dog", max_tokens=20, temperature=0,
                             extra_body={"structured_outputs": {"regex": "(Tom|Lily) [a-z]{3,6}"}})
    assert r.choices[0].text == _want(llm, "The dog", {"regex": "(Tom|Lily) [a-z]{3,6}"}, 20)
    r = c.completions.create(model="stories", prompt="The dog", max_tokens=20, temperature=0.8, seed=3,
                             extra_body={"structured_outputs": {"grammar": 'start: "a " ("cat" | "dog")'}})
    assert r.choices[0].text in ("a cat", "a dog")


def test_logprobs_of_a_constrained_reply_are_json_numbers(server):
    """Masked tokens have logprob -inf; the reply carries vLLM's -9999.0 instead (valid JSON)."""
    for stream in (False, True):
        got, body, raw = server.request("POST", "/v1/completions", {
            "model": "stories", "prompt": "The dog", "max_tokens": 4, "temperature": 0, "logprobs": 5,
            "stream": stream, "structured_outputs": {"choice": ["happy", "sad"]}})
        assert got == 200, body
        assert "Infinity" not in raw and "NaN" not in raw
        if not stream:
            lp = body["choices"][0]["logprobs"]
            assert all(v >= -9999.0 for top in lp["top_logprobs"] for v in top.values())
            assert min(v for top in lp["top_logprobs"] for v in top.values()) == -9999.0
            # where two tokens read the same, the chosen token's own logprob is kept
            for tok, v, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"]):
                assert top[tok] == v


@pytest.mark.parametrize("extra,param", [
    ({"response_format": {"type": "xml"}}, "response_format"),
    ({"response_format": {"type": "json_schema"}}, "response_format.json_schema"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}}},
     "response_format.json_schema.schema"),
    ({"structured_outputs": {"regex": "(unclosed"}}, "structured_outputs"),
    ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs"),
    ({"guided_json": SCHEMA, "response_format": {"type": "json_object"}}, "guided_json"),
    ({"guided_choice": "yes"}, "guided_json"),
    ({"guided_regex": "a+", "guided_whitespace_pattern": " "}, "guided_whitespace_pattern"),
    ({"structured_outputs": {"regex": "a" * 300000}}, "structured_outputs"),
])
def test_bad_constraints_are_400_naming_the_field(server, extra, param):
    got, body, _ = server.request("POST", "/v1/completions", {"model": "stories", "prompt": "x", **extra})
    assert got == 400, body
    assert body["error"]["param"].startswith(param.split(".")[0]) or body["error"]["param"] == "guided_choice", body


def test_hostile_regex_is_bounded_and_the_server_keeps_serving(server):
    t0 = time.monotonic()
    got, body, _ = server.request("POST", "/v1/completions", {
        "model": "stories", "prompt": "x", "max_tokens": 8,
        "structured_outputs": {"regex": "(a|b)*a(a|b){40}"}})
    assert got in (200, 400), body
    assert time.monotonic() - t0 < 60
    # past the library's limits mid-output: a 400 naming the request's field
    got, body, _ = server.request("POST", "/v1/completions", {
        "model": "stories", "prompt": "x", "max_tokens": 8, "temperature": 0,
        "structured_outputs": {"regex": "(x{1000}){1000}"}})
    assert got == 400 and body["error"]["param"] == "structured_outputs", body
    assert "stopped following this constraint" in body["error"]["message"]
    got, body, _ = server.request("POST", "/v1/completions", {
        "model": "stories", "prompt": "x", "max_tokens": 3, "temperature": 0,
        "structured_outputs": {"choice": ["ok"]}})
    assert got == 200 and body["choices"][0]["text"] == "ok", body


def test_chat_json_schema_on_smollm2(real_model, tmp_path):
    path = real_model("smollm2-135m-instruct-q4_1")
    s = ServerProcess(["--model", path, "--served-model-name", "smol", "--max-model-len", "512",
                       "--max-num-seqs", "2", "--speculative-config",
                       json.dumps({"method": "ngram", "num_speculative_tokens": 3})], str(tmp_path / "chat.log"))
    try:
        c = _client(s)
        msgs = [{"role": "user", "content": "Give the name and age of a person as JSON."}]
        rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}
        r = c.chat.completions.create(model="smol", messages=msgs, max_tokens=60, temperature=0,
                                      response_format=rf)
        jsonschema.validate(json.loads(r.choices[0].message.content), SCHEMA)
        llm = specdec.LLM(path, progress=False, max_model_len=512, max_num_seqs=1)
        want = llm.chat(msgs, specdec.SamplingParams(temperature=0, max_tokens=60,
                                                     structured_outputs={"json": SCHEMA}))[0].outputs[0].text
        assert r.choices[0].message.content == want
        deltas = [ch.choices[0].delta.content or "" for ch in c.chat.completions.create(
            model="smol", messages=msgs, max_tokens=60, temperature=0, response_format=rf, stream=True)
            if ch.choices]
        assert "".join(deltas) == want
    finally:
        s.stop()


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                                    "unit": {"enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The local time in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}},
                   "required": ["city"], "additionalProperties": False}}}


@pytest.fixture(scope="module")
def qwen_server(real_model, tmp_path_factory):
    path = real_model("qwen2.5-coder-0.5b-instruct-q4_k_m")
    s = ServerProcess(["--model", path, "--served-model-name", "qwen", "--max-model-len", "1024",
                       "--max-num-seqs", "2", "--speculative-config",
                       json.dumps({"method": "ngram", "num_speculative_tokens": 3})],
                      str(tmp_path_factory.mktemp("serve") / "qwen.log"))
    yield s
    s.stop()


def _check_call(call, names=("get_weather", "get_time")):
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name in names
    args = json.loads(call.function.arguments)
    assert isinstance(args.get("city"), str)
    return args


@pytest.mark.parametrize("choice", ["auto", "required", "named"])
def test_tool_calls_whole_and_streamed(qwen_server, choice):
    c = _client(qwen_server)
    msgs = [{"role": "user", "content": "What is the weather in Paris right now?"}]
    tool_choice = {"type": "function", "function": {"name": "get_weather"}} if choice == "named" else choice
    kw = dict(model="qwen", messages=msgs, tools=[WEATHER, TIME], tool_choice=tool_choice,
              max_tokens=80, temperature=0)
    r = c.chat.completions.create(**kw)
    msg = r.choices[0].message
    assert msg.tool_calls, (choice, msg)
    assert r.choices[0].finish_reason == "tool_calls"
    for call in msg.tool_calls:
        _check_call(call, ("get_weather",) if choice == "named" else ("get_weather", "get_time"))
    # streamed: the same calls as deltas (ids are new per response), no call text as content
    calls, content = {}, ""
    finish = None
    for ch in c.chat.completions.create(stream=True, **kw):
        for choice_ in ch.choices:
            d = choice_.delta
            content += d.content or ""
            for tc in d.tool_calls or []:
                calls.setdefault(tc.index, {"name": "", "arguments": ""})
                calls[tc.index]["name"] += tc.function.name or ""
                calls[tc.index]["arguments"] += tc.function.arguments or ""
            finish = choice_.finish_reason or finish
    assert finish == "tool_calls" and "<tool_call>" not in content
    assert [(v["name"], json.loads(v["arguments"])) for _, v in sorted(calls.items())] == \
        [(t.function.name, json.loads(t.function.arguments)) for t in msg.tool_calls]
    # the call's result back in a tool message, the reply in words
    msgs2 = msgs + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": t.id, "type": "function", "function": {"name": t.function.name, "arguments": t.function.arguments}}
        for t in msg.tool_calls]}] + [{"role": "tool", "tool_call_id": t.id, "content": '{"celsius": 18}'}
                                     for t in msg.tool_calls]
    r2 = c.chat.completions.create(model="qwen", messages=msgs2, tools=[WEATHER, TIME], max_tokens=40,
                                   temperature=0)
    assert r2.choices[0].message.content and not r2.choices[0].message.tool_calls


def test_tool_choice_none_and_bad_tools(qwen_server):
    c = _client(qwen_server)
    r = c.chat.completions.create(model="qwen", messages=[{"role": "user", "content": "Say hi."}],
                                  tools=[WEATHER], tool_choice="none", max_tokens=8, temperature=0)
    assert r.choices[0].message.content and not r.choices[0].message.tool_calls
    for extra, param in (({"tools": [{"type": "function", "function": {"name": "bad name"}}]},
                          "tools[0].function.name"),
                         ({"tools": [WEATHER], "tool_choice": "sometimes"}, "tool_choice"),
                         ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
                          "tool_choice.function.name"),
                         ({"tool_choice": "required"}, "tool_choice"),
                         ({"tools": [WEATHER], "tool_choice": "required",
                           "response_format": {"type": "json_object"}}, "tool_choice")):
        got, body, _ = qwen_server.request("POST", "/v1/chat/completions", {
            "model": "qwen", "messages": [{"role": "user", "content": "x"}], **extra})
        assert got == 400 and body["error"]["param"] == param, body


def test_tools_on_a_template_without_a_call_format_are_refused(tmp_path):
    s = ServerProcess(["--model", STORIES, "--served-model-name", "stories", "--chat-template",
                       "{% for m in messages %}{{ m['content'] }}{% endfor %}"], str(tmp_path / "t.log"))
    try:
        got, body, _ = s.request("POST", "/v1/chat/completions", {
            "model": "stories", "messages": [{"role": "user", "content": "x"}], "tools": [WEATHER]})
        assert got == 400 and body["error"]["param"] == "tool_choice", body
        assert "no tool-call format" in body["error"]["message"]
        got, body, _ = s.request("POST", "/v1/chat/completions", {
            "model": "stories", "messages": [{"role": "user", "content": "x"}], "tools": [WEATHER],
            "tool_choice": "none", "max_tokens": 4})
        assert got == 200, body
    finally:
        s.stop()


def test_json_schema_on_qwen_equals_llm_plain(qwen_server, real_model):
    """The Qwen 0.5B behind the server speculates (n-gram drafts); its constrained reply is the
    one plain constrained decoding gives through LLM, and it validates."""
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30},
                                               "population": {"type": "integer", "minimum": 0}},
              "required": ["city", "population"], "additionalProperties": False}
    msgs = [{"role": "user", "content": "The largest city of France and its population, as JSON."}]
    r = _client(qwen_server).chat.completions.create(
        model="qwen", messages=msgs, max_tokens=60, temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": schema}})
    text = r.choices[0].message.content
    jsonschema.validate(json.loads(text), schema)
    llm = specdec.LLM(real_model("qwen2.5-coder-0.5b-instruct-q4_k_m"), progress=False, max_model_len=1024,
                      max_num_seqs=1)
    want = llm.chat(msgs, specdec.SamplingParams(temperature=0, max_tokens=60,
                                                 structured_outputs={"json": schema}))[0].outputs[0].text
    assert text == want
