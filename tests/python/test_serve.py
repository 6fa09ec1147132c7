"""``specdec serve`` as a client sees it: the official ``openai`` client against a real server
process on 127.0.0.1, every output checked against the same request through ``specdec.LLM``.

Servers: stories260K plain, stories260K with a draft model (itself) under a KV budget small
enough to preempt, and SmolLM2-135M for chat (its ChatML template)."""

from __future__ import annotations

import http.client
import json
import threading
import time

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")

import specdec  # noqa: E402
from serve_helpers import ServerProcess  # noqa: E402
from spec_helpers import STORIES  # noqa: E402

NAME = "stories"
SPEC = {"method": "draft_model", "model": STORIES, "num_speculative_tokens": 3}
PROMPTS = ["Once upon a time", "The dog", "Lily went to the park and saw a big red ball. She"]


def _client(server, key="none"):
    return openai.OpenAI(base_url=server.base + "/v1", api_key=key, max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def plain_server(tmp_path_factory):
    s = ServerProcess(["--model", STORIES, "--served-model-name", NAME],
                      str(tmp_path_factory.mktemp("serve") / "plain.log"))
    yield s
    assert s.stop() == 0, s.log()  # SIGTERM: a graceful shutdown


@pytest.fixture(scope="module")
def spec_server(tmp_path_factory):
    # 20 blocks of 16 tokens for the target: 32 clients of ~60 tokens each preempt
    s = ServerProcess(["--model", STORIES, "--served-model-name", NAME, "--speculative-config",
                       json.dumps(SPEC), "--kv-cache-memory", str(2 * 20 * 16 * 720),
                       "--max-num-seqs", "8", "--max-pending", "200"],
                      str(tmp_path_factory.mktemp("serve") / "spec.log"))
    yield s
    s.stop()


@pytest.fixture(scope="module")
def llm():
    return specdec.LLM(STORIES, progress=False)


def _idle(server, timeout=30.0):
    """/metrics once no request is running or waiting and no KV block is in use (a scrape may
    fall between a request leaving the batch and its blocks coming back: it waits for both)."""
    deadline = time.monotonic() + timeout
    while True:
        m = server.metrics()
        if (m["specdec:num_requests_running"] == 0 and m["specdec:num_requests_waiting"] == 0
                and m["specdec:kv_cache_usage_perc"] == 0.0):
            return m
        assert time.monotonic() < deadline, f"blocks still in use after {timeout} s: {m}"
        time.sleep(0.1)


def _greedy(llm, prompt, max_tokens=24, **kw):
    p = specdec.SamplingParams(temperature=0, max_tokens=max_tokens, **kw)
    return llm.generate(prompt, p)[0].outputs[0]


def test_models_health_and_completion_equal_to_llm(plain_server, llm):
    c = _client(plain_server)
    assert [m.id for m in c.models.list().data] == [NAME]
    for prompt in PROMPTS:
        r = c.completions.create(model=NAME, prompt=prompt, max_tokens=24, temperature=0)
        want = _greedy(llm, prompt)
        assert r.choices[0].text == want.text
        assert r.choices[0].finish_reason == "length"
        assert r.usage.completion_tokens == len(want.token_ids)
        assert r.usage.prompt_tokens == len(llm.tokenizer.encode(prompt))
    status, _, _ = plain_server.request("GET", "/health")
    assert status == 200


def test_streaming_completion_pieces_join_to_the_whole(plain_server, llm):
    c = _client(plain_server)
    pieces, usage, finish = [], None, None
    for ch in c.completions.create(model=NAME, prompt=PROMPTS[2], max_tokens=30, temperature=0,
                                   stream=True, stream_options={"include_usage": True}):
        if ch.usage is not None:
            usage = ch.usage
        for choice in ch.choices:
            pieces.append(choice.text)
            finish = choice.finish_reason or finish
    want = _greedy(llm, PROMPTS[2], 30)
    assert "".join(pieces) == want.text
    assert len(pieces) > 5  # streamed token by token, not in one piece
    assert finish == "length" and usage.completion_tokens == len(want.token_ids)


def test_batch_prompts_n_seed_stop_and_token_prompts(plain_server, llm):
    c = _client(plain_server)
    r = c.completions.create(model=NAME, prompt=PROMPTS[:2], max_tokens=12, temperature=0, n=2)
    assert [ch.index for ch in r.choices] == [0, 1, 2, 3]
    for i, prompt in enumerate(PROMPTS[:2]):
        want = _greedy(llm, prompt, 12).text
        assert r.choices[2 * i].text == want and r.choices[2 * i + 1].text == want
    # sampled with a seed: reproducible, and equal to the LLM with the same seed
    a = c.completions.create(model=NAME, prompt=PROMPTS[0], max_tokens=16, temperature=0.8, seed=5)
    b = c.completions.create(model=NAME, prompt=PROMPTS[0], max_tokens=16, temperature=0.8, seed=5)
    ref = llm.generate(PROMPTS[0], specdec.SamplingParams(temperature=0.8, seed=5, max_tokens=16))
    assert a.choices[0].text == b.choices[0].text == ref[0].outputs[0].text
    # stop strings end the text before them, as LLM does
    full = _greedy(llm, PROMPTS[0], 24).text
    stop = full.split()[3]
    r = c.completions.create(model=NAME, prompt=PROMPTS[0], max_tokens=24, temperature=0, stop=[stop])
    assert r.choices[0].text == _greedy(llm, PROMPTS[0], 24, stop=[stop]).text
    assert r.choices[0].finish_reason == "stop" and stop not in r.choices[0].text
    # token-id prompts
    ids = llm.tokenizer.encode(PROMPTS[1])
    r = c.completions.create(model=NAME, prompt=ids, max_tokens=12, temperature=0)
    assert r.choices[0].text == _greedy(llm, PROMPTS[1], 12).text


def test_logprobs_match_llm(plain_server, llm):
    c = _client(plain_server)
    r = c.completions.create(model=NAME, prompt=PROMPTS[1], max_tokens=8, temperature=0, logprobs=3)
    want = llm.generate(PROMPTS[1], specdec.SamplingParams(temperature=0, max_tokens=8, logprobs=3))[0].outputs[0]
    lp = r.choices[0].logprobs
    assert len(lp.token_logprobs) == len(want.token_ids) == 8
    for got, tid, pos in zip(lp.token_logprobs, want.token_ids, want.logprobs):
        assert got == pytest.approx(pos[tid].logprob, abs=1e-5)
    assert all(len(t) >= 3 for t in lp.top_logprobs)
    assert "".join(lp.tokens) == r.choices[0].text


def test_prefix_cache_hits_are_reported(plain_server):
    c = _client(plain_server)
    long = " ".join([PROMPTS[2]] * 4)
    c.completions.create(model=NAME, prompt=long, max_tokens=4, temperature=0)
    before = plain_server.metrics()
    r = c.completions.create(model=NAME, prompt=long, max_tokens=4, temperature=0)
    after = plain_server.metrics()
    cached = r.usage.prompt_tokens_details.cached_tokens
    assert cached >= 16 and cached % 16 == 0 and cached < r.usage.prompt_tokens
    assert after["specdec:prefix_cache_hits_total"] - before["specdec:prefix_cache_hits_total"] == cached
    assert r.choices[0].model_extra["spec_decode"]["num_cached_tokens"] == cached


def test_bad_requests_get_openai_errors_and_the_server_keeps_serving(plain_server):
    cases = [
        ({"raw": b"{not json"}, 400, "invalid_json", None),
        ({"body": [1, 2]}, 400, "invalid_json", None),
        ({"body": {"model": "nope", "prompt": "a"}}, 404, "model_not_found", "model"),
        ({"body": {"prompt": "a"}}, 400, "missing_required_parameter", "model"),
        ({"body": {"model": NAME, "prompt": "a", "max_tokens": "ten"}}, 400, "invalid_value", "max_tokens"),
        ({"body": {"model": NAME, "prompt": "a", "temperature": -1}}, 400, "invalid_value", "temperature"),
        ({"body": {"model": NAME, "prompt": 5}}, 400, "invalid_value", "prompt"),
        ({"body": {"model": NAME, "prompt": [1, 10**9]}}, 400, "invalid_value", "prompt[1]"),
        ({"raw": b'{"model": "stories", "prompt": "a", "\\ud800": 1}'}, 400, "unsupported_parameter",
         "'\\ud800'"),
        ({"raw": b'{"model": "stories", "prompt": "a", "metadata": ' + b"[" * 100000 + b"]" * 100000 + b"}"},
         400, "invalid_json", None),
        ({"body": {"model": NAME, "prompt": ["a"] * 100, "n": 16}}, 400, "invalid_value", "prompt"),
        ({"body": {"model": NAME, "prompt": [[1]] * 100000}}, 400, "invalid_value", "prompt"),
        ({"body": {"model": NAME, "prompt": "Once upon a time " * 300000}}, 400, "context_length_exceeded",
         "prompt"),
        ({"body": {"model": NAME, "prompt": [1] * 500}}, 400, "context_length_exceeded", "prompt"),
        ({"body": {"model": NAME, "prompt": "a", "max_tokens": 127}}, 400, "context_length_exceeded",
         "max_tokens"),
        ({"body": {"model": NAME, "prompt": "a", "user": 5}}, 400, "invalid_value", "user"),
        ({"body": {"model": NAME, "prompt": "a", "stop_token_ids": [2**64]}}, 400, "invalid_value",
         "stop_token_ids"),
        ({"body": {"model": NAME, "prompt": "a", "frequency_penalty": 1.0}}, 400, "unsupported_parameter",
         "frequency_penalty"),
        ({"body": {"model": NAME, "prompt": "a", "tools": [{"type": "function"}]}}, 400,
         "unsupported_parameter", "tools"),
        ({"body": {"model": NAME, "prompt": "a", "bogus": 1}}, 400, "unsupported_parameter", "bogus"),
        ({"body": {"model": NAME, "prompt": "a " * 400}}, 400, "context_length_exceeded", "prompt"),
        ({"body": {"model": NAME, "prompt": "a", "max_tokens": 10**6}}, 400, "context_length_exceeded",
         "max_tokens"),
        ({"body": {"model": NAME, "prompt": "a", "stream_options": {"include_usage": True}}}, 400,
         "invalid_value", "stream_options"),
    ]
    for req, status, code, param in cases:
        got, body, text = plain_server.request("POST", "/v1/completions", req.get("body"), req.get("raw"))
        assert got == status, (req, text)
        err = body["error"]
        assert err["code"] == code and err["param"] == param, (req, err)
        assert set(err) == {"message", "type", "param", "code"} and err["message"]
    got, body, _ = plain_server.request("POST", "/v1/chat/completions",
                                        {"model": NAME, "messages": [{"role": "user", "content": "hi"}]})
    assert got == 400 and "chat template" in body["error"]["message"]  # stories260K has none
    got, body, _ = plain_server.request("GET", "/v1/nothing")
    assert got == 404 and body["error"]["code"] == "not_found"
    assert plain_server.request("HEAD", "/health")[0] == 200
    assert _client(plain_server).models.retrieve(NAME).id == NAME
    assert plain_server.request("GET", "/v1/models/other")[0] == 404
    assert plain_server.request("GET", "/openapi.json")[0] == 404
    # still serving
    r = _client(plain_server).completions.create(model=NAME, prompt="The dog", max_tokens=3)
    assert r.usage.completion_tokens == 3


def _aborted(server, before, timeout=30.0):
    """Requests ended as 'abort' since `before` (the count is taken as the engine ends them)."""
    key = "specdec:request_success_total{finished_reason=abort}"
    deadline = time.monotonic() + timeout
    while True:
        n = server.metrics().get(key, 0) - before.get(key, 0)
        if n or time.monotonic() > deadline:
            return n
        time.sleep(0.1)


def test_disconnect_mid_stream_aborts_and_frees_blocks(plain_server):
    # 48 choices of 120 tokens, 16 at a time: seconds of work, so the disconnect comes mid-way
    body = json.dumps({"model": NAME, "prompt": [PROMPTS[0]] * 3, "max_tokens": 120, "temperature": 0,
                       "ignore_eos": True, "stream": True, "n": 16})
    before = plain_server.metrics()
    conn = http.client.HTTPConnection("127.0.0.1", plain_server.port, timeout=30)
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    assert resp.read(6) == b"data: "  # the first chunk came
    conn.sock.shutdown(2)
    conn.close()
    assert _aborted(plain_server, before) >= 1
    m = _idle(plain_server)  # every block back (cached ones count as free)
    gen = m["specdec:generation_tokens_total"] - before.get("specdec:generation_tokens_total", 0)
    assert gen < 48 * 120  # it stopped early
    r = _client(plain_server).completions.create(model=NAME, prompt="The dog", max_tokens=3)
    assert r.choices[0].finish_reason == "length"


def test_disconnect_while_waiting_for_a_whole_response_aborts(spec_server):
    # 192 choices of 120 tokens, 8 at a time in 20 blocks: 2.5 s of work, where the disconnect is
    # seen at once (stories260K did 48 choices with 16 at a time in 0.3-0.4 s: faster than the
    # half-second polling that once watched for it)
    body = json.dumps({"model": NAME, "prompt": [PROMPTS[0]] * 12, "max_tokens": 120, "temperature": 0,
                       "ignore_eos": True, "n": 16})
    before = spec_server.metrics()
    conn = http.client.HTTPConnection("127.0.0.1", spec_server.port, timeout=30)
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    deadline = time.monotonic() + 30
    while spec_server.metrics()["specdec:num_requests_running"] == 0:  # it is running
        assert time.monotonic() < deadline, "the request never started"
        time.sleep(0.05)
    conn.sock.shutdown(2)
    conn.close()
    assert _aborted(spec_server, before) >= 1  # not run to the end
    m = _idle(spec_server)
    gen = m["specdec:generation_tokens_total"] - before.get("specdec:generation_tokens_total", 0)
    assert gen < 192 * 120 / 2  # it stopped early
    got, body, _ = spec_server.request("POST", "/v1/completions", {"model": NAME, "prompt": "a", "n": 1000})
    assert got == 400 and body["error"]["param"] == "n"


def test_metrics_parse_with_vllm_names(spec_server):
    c = _client(spec_server)
    c.completions.create(model=NAME, prompt=PROMPTS[0], max_tokens=20, temperature=0)
    m = spec_server.metrics()
    for name in ("specdec:num_requests_running", "specdec:num_requests_waiting",
                 "specdec:kv_cache_usage_perc", "specdec:prompt_tokens_total",
                 "specdec:generation_tokens_total", "specdec:time_to_first_token_seconds_count",
                 "specdec:inter_token_latency_seconds_count", "specdec:e2e_request_latency_seconds_count",
                 "specdec:prefix_cache_queries_total", "specdec:prefix_cache_hits_total",
                 "specdec:spec_decode_num_drafts_total", "specdec:spec_decode_num_draft_tokens_total",
                 "specdec:spec_decode_num_accepted_tokens_total", "specdec:num_preemptions_total",
                 "specdec:spec_decode_num_accepted_tokens_per_pos_total{position=0}"):
        assert name in m, name
    assert m["specdec:spec_decode_num_drafts_total"] > 0
    assert m["specdec:spec_decode_num_accepted_tokens_total"] > 0


def test_speculative_server_equals_plain_and_reports_per_request_metrics(spec_server, llm):
    c = _client(spec_server)
    for prompt in PROMPTS:
        r = c.completions.create(model=NAME, prompt=prompt, max_tokens=24, temperature=0)
        assert r.choices[0].text == _greedy(llm, prompt).text
        sd = r.choices[0].model_extra["spec_decode"]
        assert sd["num_drafts"] > 0 and sd["num_accepted_tokens"] > 0
        assert len(sd["num_accepted_tokens_per_pos"]) == 3


def test_load_many_streaming_clients_with_preemption(spec_server, llm):
    """32 concurrent streaming clients x 2 requests through a drafter and a KV cache that preempts:
    every request answered, each output equal to the request alone, every block back after."""
    c = _client(spec_server)
    prompts = [f"{PROMPTS[i % 3]} {'and then' if i % 2 else 'so'} {i}" for i in range(32)]
    want = {p: _greedy(llm, p, 40, ignore_eos=True).text for p in prompts}
    got, errors = {}, []
    before = spec_server.metrics()

    def client(p):
        try:
            for _ in range(2):
                text = "".join(ch.choices[0].text for ch in c.completions.create(
                    model=NAME, prompt=p, max_tokens=40, temperature=0, stream=True,
                    extra_body={"ignore_eos": True}) if ch.choices)
                got.setdefault(p, []).append(text)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=client, args=(p,)) for p in prompts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    assert not errors, errors[:3]
    for p in prompts:
        assert got[p] == [want[p], want[p]], p
    m = _idle(spec_server)
    assert m["specdec:num_preemptions_total"] > before["specdec:num_preemptions_total"]


def test_full_queue_gets_503_and_api_key_is_checked(tmp_path):
    template = "{{ bos_token }}{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
    (tmp_path / "t.jinja").write_text(template)
    s = ServerProcess(["--model", STORIES, "--served-model-name", NAME, "--max-pending", "1",
                       "--api-key", "sekrit", "--chat-template", str(tmp_path / "t.jinja")],
                      str(tmp_path / "small.log"))
    try:
        got, body, _ = s.request("POST", "/v1/completions", {"model": NAME, "prompt": "a"})
        assert got == 401 and body["error"]["code"] == "invalid_api_key"
        with pytest.raises(openai.AuthenticationError):
            _client(s, "wrong").completions.create(model=NAME, prompt="a", max_tokens=2)
        c = _client(s, "sekrit")
        assert c.completions.create(model=NAME, prompt="a", max_tokens=2).usage.completion_tokens == 2
        # one long stream holds the only slot: the next request gets a 503
        stream = c.completions.create(model=NAME, prompt=PROMPTS[0], max_tokens=120, stream=True,
                                      temperature=0, extra_body={"ignore_eos": True})
        next(iter(stream))
        with pytest.raises(openai.APIStatusError) as e:
            c.completions.create(model=NAME, prompt="a", max_tokens=2)
        assert e.value.status_code == 503 and "capacity" in str(e.value)
        rest = "".join(ch.choices[0].text for ch in stream if ch.choices)
        assert rest
        assert c.completions.create(model=NAME, prompt="a", max_tokens=2).usage.completion_tokens == 2
        # /health and /metrics need no key
        assert s.request("GET", "/health")[0] == 200
        # --chat-template gives stories260K (which has none) a chat endpoint
        msgs = [{"role": "user", "content": "Once"}]
        r = c.chat.completions.create(model=NAME, messages=msgs, max_tokens=2)
        want = specdec.Tokenizer.from_file(STORIES).encode("user: Once\n")
        assert r.usage.prompt_tokens == len(want) and r.usage.completion_tokens == 2
    finally:
        s.stop()


def test_chat_equal_to_llm_chat_streaming_and_not(real_model, tmp_path):
    path = real_model("smollm2-135m-instruct-q4_1")
    s = ServerProcess(["--model", path, "--served-model-name", "smol", "--max-model-len", "512",
                       "--max-num-seqs", "2", "--speculative-config",
                       json.dumps({"method": "ngram", "num_speculative_tokens": 3})], str(tmp_path / "chat.log"))
    try:
        msgs = [{"role": "system", "content": "You are brief."},
                {"role": "user", "content": "Name three colours."}]
        llm = specdec.LLM(path, progress=False, max_model_len=512, max_num_seqs=1)
        want = llm.chat(msgs, specdec.SamplingParams(temperature=0, max_tokens=32))[0].outputs[0]
        c = _client(s)
        r = c.chat.completions.create(model="smol", messages=msgs, max_tokens=32, temperature=0)
        assert r.choices[0].message.role == "assistant"
        assert r.choices[0].message.content == want.text
        assert r.usage.completion_tokens == len(want.token_ids)
        deltas, roles = [], []
        for ch in c.chat.completions.create(model="smol", messages=msgs, max_completion_tokens=32,
                                            temperature=0, stream=True):
            for choice in ch.choices:
                roles.append(choice.delta.role)
                deltas.append(choice.delta.content or "")
        assert roles[0] == "assistant" and "".join(deltas) == want.text
        r = c.chat.completions.create(model="smol", messages=msgs, max_tokens=4, temperature=0,
                                      logprobs=True, top_logprobs=2)
        content = r.choices[0].logprobs.content
        assert len(content) == 4 and all(len(t.top_logprobs) == 2 for t in content)
        # a second turn reuses the first turn's blocks
        msgs2 = msgs + [{"role": "assistant", "content": want.text}, {"role": "user", "content": "More."}]
        r = c.chat.completions.create(model="smol", messages=msgs2, max_tokens=4, temperature=0)
        assert r.usage.prompt_tokens_details.cached_tokens >= 16
        # vLLM's template fields: continue the last (assistant) message instead of a new turn
        msgs3 = msgs + [{"role": "assistant", "content": "Red, green", "name": "bot"}]
        want3 = llm.chat(msgs3, specdec.SamplingParams(temperature=0, max_tokens=4),
                         add_generation_prompt=False, continue_final_message=True)[0]
        assert want3.prompt.endswith("<|im_start|>assistant\nRed, green")
        r = c.chat.completions.create(model="smol", messages=msgs3, max_tokens=4, temperature=0,
                                      extra_body={"add_generation_prompt": False,
                                                  "continue_final_message": True,
                                                  "chat_template_kwargs": {"unused": 1}})
        assert r.choices[0].message.content == want3.outputs[0].text
        for bad, param in (({"role": "user", "content": "x", "weird": 1}, "messages[0].weird"),
                           ({"role": "user", "content": None}, "messages[0].content"),
                           ({"role": "im_end", "content": "x"}, "messages[0].role")):
            got, body, _ = s.request("POST", "/v1/chat/completions",
                                     {"model": "smol", "messages": [bad]})
            assert got == 400 and body["error"]["param"] == param, body
        got, body, _ = s.request("POST", "/v1/chat/completions", {
            "model": "smol", "messages": msgs, "chat_template_kwargs": {"tools": [{}]}})
        assert got == 400 and body["error"]["param"] == "chat_template_kwargs.tools", body
    finally:
        s.stop()
