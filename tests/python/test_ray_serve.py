"""``specdec serve --ray``: engine replicas on a local Ray Serve instance, as a client sees them.

A real ``specdec serve --ray`` process (it starts its own local Ray instance) with two stories260K
replicas under speculative decoding: the official ``openai`` client's chat and completions,
streamed and whole, equal ``specdec.LLM`` alone; a session's requests stick to one replica and hit
its prefix cache; /health, /metrics and /replicas cover both replicas; a replica killed under load
loses no request and leaves no stream hanging, and Ray replaces it. A second server autoscales on
the engines' waiting queues. The router's and the policy's rules are tested without Ray running.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("ray.serve")

import specdec  # noqa: E402
from serve_helpers import ServerProcess  # noqa: E402
from spec_helpers import STORIES  # noqa: E402

NAME = "stories"
SPEC = {"method": "draft_model", "model": STORIES, "num_speculative_tokens": 3}
# stories260K has no chat template: one given with --chat-template (passed through to every replica)
TEMPLATE = ("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
            "{% if add_generation_prompt %}assistant:{% endif %}")
SYSTEMS = ["Cats only: you tell short stories about a cat named Tom who likes milk.",
           "Dogs only: you tell short stories about a dog named Max and his red ball."]


def _start(args, log_path, timeout=240.0):
    return ServerProcess(["--ray", "--model", STORIES, "--served-model-name", NAME,
                          "--replica-cpus", "0.5"] + args, log_path, timeout=timeout)


def _stop(server):
    """SIGTERM, and time for Serve and the local Ray instance to go down (more than the helper's
    20 s on a busy machine); killed only past that (then its Ray processes are stopped too)."""
    code = server.stop(timeout=120)
    if code == -signal.SIGKILL:
        subprocess.run([sys.executable, "-m", "ray.scripts.scripts", "stop", "--force"],
                       capture_output=True, timeout=60)
    return code


def _client(server):
    return openai.OpenAI(base_url=server.base + "/v1", api_key="none", max_retries=0, timeout=120)


def _replicas(server):
    status, body, _ = server.request("GET", "/replicas")
    assert status == 200, body
    return body["replicas"]


def _wait_replicas(server, n, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reps = _replicas(server)
        if len(reps) == n and all(r["healthy"] for r in reps):
            return reps
        time.sleep(0.5)
    raise AssertionError(f"not {n} healthy replicas in {timeout} s: {_replicas(server)}")


@pytest.fixture(scope="module")
def ray_server(tmp_path_factory):
    s = _start(["--num-replicas", "2", "--speculative-config", json.dumps(SPEC),
                "--chat-template", TEMPLATE, "--max-num-seqs", "4", "--max-pending", "64"],
               str(tmp_path_factory.mktemp("ray") / "serve.log"))
    try:
        _wait_replicas(s, 2)
    except BaseException:
        _stop(s)
        raise
    yield s
    assert _stop(s) == 0, s.log()[-3000:]


@pytest.fixture(scope="module")
def llm():
    return specdec.LLM(STORIES, progress=False)


def _greedy(llm, prompt, max_tokens):
    return llm.generate([prompt], specdec.SamplingParams(max_tokens=max_tokens, temperature=0))[0].outputs[0].text


def test_openai_client_chat_and_completions_equal_llm(ray_server, llm):
    c = _client(ray_server)
    prompt = "Once upon a time"
    want = _greedy(llm, prompt, 24)
    got = c.completions.create(model=NAME, prompt=prompt, max_tokens=24, temperature=0)
    assert got.choices[0].text == want
    pieces = c.completions.create(model=NAME, prompt=prompt, max_tokens=24, temperature=0, stream=True)
    assert "".join(ch.choices[0].text for ch in pieces if ch.choices) == want
    msgs = [{"role": "system", "content": SYSTEMS[0]}, {"role": "user", "content": "Tell me one."}]
    want_chat = llm.chat(msgs, specdec.SamplingParams(max_tokens=20, temperature=0),
                         chat_template=TEMPLATE)[0].outputs[0].text
    got = c.chat.completions.create(model=NAME, messages=msgs, max_completion_tokens=20, temperature=0)
    assert got.choices[0].message.content == want_chat
    stream = c.chat.completions.create(model=NAME, messages=msgs, max_completion_tokens=20,
                                       temperature=0, stream=True)
    assert "".join(ch.choices[0].delta.content or "" for ch in stream if ch.choices) == want_chat
    # the same code path as one server: its errors and its models list
    with pytest.raises(openai.NotFoundError):
        c.completions.create(model="other", prompt=prompt, max_tokens=4)
    with pytest.raises(openai.BadRequestError) as e:
        c.completions.create(model=NAME, prompt=prompt, max_tokens=4, temperature=-1)
    assert "temperature" in str(e.value)
    assert [m.id for m in c.models.list().data] == [NAME]


def test_sessions_stick_to_a_replica_and_hit_its_prefix_cache(ray_server):
    c = _client(ray_server)
    replicas, cached = {}, {}
    for turn in range(3):
        for s in range(4):
            msgs = [{"role": "system", "content": SYSTEMS[s % 2]}, {"role": "user", "content": f"I am {s}."}]
            msgs += [{"role": "user", "content": f"Part {t} please."} for t in range(turn + 1)]
            r = c.chat.completions.with_raw_response.create(model=NAME, messages=msgs,
                                                            max_completion_tokens=4, temperature=0)
            replicas.setdefault(s, set()).add(r.headers["x-specdec-replica"])
            if turn > 0:
                cached.setdefault(s, []).append(r.parse().usage.prompt_tokens_details.cached_tokens)
    assert all(len(v) == 1 for v in replicas.values()), replicas
    assert all(n > 0 for v in cached.values() for n in v), cached
    assert len(set().union(*replicas.values())) == 2, "the sessions should spread over both replicas"


def test_health_metrics_and_replicas_cover_every_replica(ray_server):
    c = _client(ray_server)
    for p in SYSTEMS * 2:  # routed by affinity the second time, whatever ran before
        c.completions.create(model=NAME, prompt=p, max_tokens=2, temperature=0)
    time.sleep(2.5)  # the replicas' next reports
    status, body, _ = ray_server.request("GET", "/health")
    assert status == 200 and body == {"healthy_replicas": 2, "replicas": 2}, body
    reps = _replicas(ray_server)
    ids = sorted(r["replica"] for r in reps)
    assert len(ids) == 2 and all(r["alive"] and r["pid"] > 0 for r in reps)
    per = ray_server.metrics()
    for rid in ids:
        assert any(f"replica={rid}" in k and k.startswith("specdec:num_requests_waiting") for k in per), per
        status, one, text = ray_server.request("GET", f"/replicas/{rid}/metrics")
        assert status == 200 and "specdec:num_requests_running" in text and "replica=" not in text
        status, one, _ = ray_server.request("GET", f"/replicas/{rid}/health")
        assert status == 200 and one["replica"] == rid
    # summed over the replicas: equal to the labelled series' sum
    _, _, text = ray_server.request("GET", "/metrics?aggregate=true")
    from prometheus_client.parser import text_string_to_metric_families
    total = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
             if s.name == "specdec:generation_tokens_total"}
    labelled = sum(v for k, v in per.items() if k.startswith("specdec:generation_tokens_total{"))
    assert total["specdec:generation_tokens_total"] == labelled > 0
    assert per["specdec_ingress:replicas"] == 2
    assert per["specdec_ingress:routed_total{rule=affinity}"] > 0
    status, body, _ = ray_server.request("GET", "/replicas/nosuch/health")
    assert status == 404 and "GET /replicas" in body["error"]["message"]


def _fleet(server):
    """Over every replica (their latest reports): (aborted requests, running, waiting, KV usage)."""
    m = server.metrics()

    def total(name, cond=""):
        return sum(v for k, v in m.items() if k.startswith(name + "{") and cond in k)

    return (total("specdec:request_success_total", "finished_reason=abort"),
            total("specdec:num_requests_running"), total("specdec:num_requests_waiting"),
            total("specdec:kv_cache_usage_perc"))


def _fleet_idle_after_abort(server, aborted_before, timeout=60.0):
    """Waits (the replicas report every second) until some request has ended as 'abort' since
    `aborted_before` and no replica runs, queues or holds KV blocks; returns the aborted count."""
    deadline = time.monotonic() + timeout
    while True:
        aborted, running, waiting, kv = _fleet(server)
        if aborted > aborted_before and running == waiting == kv == 0:
            return aborted - aborted_before
        if time.monotonic() > deadline:
            m = server.metrics()
            ended = {k: v for k, v in m.items() if k.startswith("specdec:request_success_total{")}
            raise AssertionError(f"after {timeout} s: {aborted - aborted_before} aborted, {running} "
                                 f"running, {waiting} waiting, KV usage {kv}; requests ended: {ended}")
        time.sleep(0.25)


def test_a_client_gone_mid_stream_aborts_it_on_its_replica(ray_server):
    """A client that disconnects mid-stream through Ray's proxy ends its requests on the replica:
    they finish as 'abort' and every KV block comes back, on every replica; the fleet then serves
    as before. (A whole response's client going away: the ingress cancels the replica's stream,
    test_ingress_cancels_the_replica_when_its_client_goes.)"""
    import http.client
    _wait_replicas(ray_server, 2)
    time.sleep(1.5)  # reports taken after any earlier test's requests ended
    aborted_before = _fleet(ray_server)[0]
    # 64 choices of 110 tokens (stories260K's context is 128; --max-pending 64), 4 at a time on
    # one replica: 16 rounds of 110 tokens, and the disconnect comes right after the first chunk
    prompts = ["Once upon a time,", "The cat sat", "A little dog", "In the garden"]
    body = json.dumps({"model": NAME, "prompt": prompts, "n": 16, "max_tokens": 110,
                       "temperature": 0, "ignore_eos": True, "stream": True})
    conn = http.client.HTTPConnection("127.0.0.1", ray_server.port, timeout=60)
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()
    assert resp.read(6) == b"data: "  # the first chunk came
    conn.sock.shutdown(2)
    conn.close()
    assert _fleet_idle_after_abort(ray_server, aborted_before) >= 1
    r = _client(ray_server).completions.create(model=NAME, prompt="The dog", max_tokens=3)
    assert r.usage.completion_tokens == 3


def test_bad_requests_through_the_fleet_get_openai_errors(ray_server):
    """Bad requests through Ray's proxy, the ingress and a replica: the replica's own 4xx with its
    OpenAI error (code and param) comes back as it is, nothing is retried elsewhere, no KV block
    stays taken, and the fleet keeps serving."""
    cases = [
        (b"{not json", 400, "invalid_json", None),
        (json.dumps({"model": "nope", "prompt": "a"}).encode(), 404, "model_not_found", "model"),
        (json.dumps({"model": NAME, "prompt": "a", "n": 99}).encode(), 400, "invalid_value", "n"),
        (json.dumps({"model": NAME, "prompt": "a", "max_tokens": 10**6}).encode(), 400,
         "context_length_exceeded", "max_tokens"),
        (json.dumps({"model": NAME, "prompt": "a", "bogus": 1}).encode(), 400,
         "unsupported_parameter", "bogus"),
    ]
    retries = ray_server.metrics().get("specdec_ingress:retries_total", 0)
    for raw, status, code, param in cases:
        got, body, text = ray_server.request("POST", "/v1/completions", raw=raw)
        assert got == status, (raw[:60], got, text[:300])
        err = body["error"]
        assert err["code"] == code and err["param"] == param and err["message"], (raw[:60], err)
    assert ray_server.metrics().get("specdec_ingress:retries_total", 0) == retries
    deadline = time.monotonic() + 30
    while _fleet(ray_server)[1:] != (0, 0, 0):  # the replicas' next reports
        assert time.monotonic() < deadline, _fleet(ray_server)
        time.sleep(0.25)
    r = _client(ray_server).completions.create(model=NAME, prompt="The dog", max_tokens=3)
    assert r.usage.completion_tokens == 3


def test_a_replica_killed_under_load_loses_no_request(ray_server, llm):
    """Clients keep the replicas busy (whole responses and streams); the busiest replica's
    process is killed. Every whole response is answered in full (retried on the other replica
    when it was in flight there), every stream ends (complete, or with an error chunk and
    [DONE]), nothing hangs, and Ray starts a new replica."""
    prompts = ["Once upon a time", "The dog", "Lily went to the park and", "Tom had a big red"]
    want = {p: _greedy(llm, p, 40) for p in prompts}
    before = {r["replica"]: r["pid"] for r in _replicas(ray_server)}
    stop = threading.Event()
    results = {"whole": [], "stream": [], "errors": []}
    lock = threading.Lock()

    def whole(i):
        c = _client(ray_server)
        while not stop.is_set():
            p = prompts[i % len(prompts)]
            try:
                r = c.completions.create(model=NAME, prompt=p, max_tokens=40, temperature=0)
                with lock:
                    results["whole"].append(r.choices[0].text == want[p])
            except Exception as e:  # noqa: BLE001 - counted: the test requires none
                with lock:
                    results["errors"].append(repr(e))
            i += 1

    def stream(i):
        body = json.dumps({"model": NAME, "prompt": prompts[i % len(prompts)], "max_tokens": 40,
                           "temperature": 0, "stream": True}).encode()
        while not stop.is_set():
            p = prompts[i % len(prompts)]
            body = json.dumps({"model": NAME, "prompt": p, "max_tokens": 40, "temperature": 0,
                               "stream": True}).encode()
            req = urllib.request.Request(ray_server.base + "/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=60) as r:
                    events = [ln[6:] for ln in r.read().decode().split("\n") if ln.startswith("data: ")]
                text = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1]
                               if "choices" in json.loads(e))
                error = [json.loads(e)["error"] for e in events[:-1] if "error" in json.loads(e)]
                with lock:
                    results["stream"].append((events[-1] == "[DONE]", text == want[p], error))
            except Exception as e:  # noqa: BLE001 - a hang ends in the timeout: counted
                with lock:
                    results["errors"].append(repr(e))
            i += 1

    time.sleep(1.5)  # the replicas' reports of the tests before
    per = ray_server.metrics()
    start = {rid: per.get(f"specdec:generation_tokens_total{{replica={rid}}}", 0.0) for rid in before}
    threads = [threading.Thread(target=whole, args=(i,)) for i in range(4)]
    threads += [threading.Thread(target=stream, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    time.sleep(3.0)
    # the replica busiest since the load began (affinity may send every prompt to one): it has
    # requests in flight
    per = ray_server.metrics()
    served = {rid: per.get(f"specdec:generation_tokens_total{{replica={rid}}}", 0.0) - start[rid]
              for rid in before}
    victim = max(served, key=served.get)
    deadline = time.monotonic() + 5.0  # and its last report shows requests in it
    while time.monotonic() < deadline:
        if any(r["replica"] == victim and r.get("inflight", 0) > 0 for r in _replicas(ray_server)):
            break
        time.sleep(0.2)
    os.kill(before[victim], signal.SIGKILL)
    time.sleep(4.0)
    stop.set()
    for t in threads:
        t.join(timeout=90)
    assert not any(t.is_alive() for t in threads), "a client hung"
    assert results["errors"] == [], results["errors"][:5]
    assert results["whole"] and all(results["whole"]), "a whole response differed from LLM's"
    assert results["stream"] and all(done for done, _, _ in results["stream"]), "a stream did not end"
    for done, equal, error in results["stream"]:  # complete and equal, or cut with a clear error
        assert equal or (error and "died" in error[0]["message"]), (equal, error)
    # whether the kill caught requests on that replica is timing (requests of stories260K take
    # tens of ms): the retry and cut-stream rules themselves are tested against a fake engine
    # below; here every request is answered, every stream ends, and the replica is replaced
    reps = _wait_replicas(ray_server, 2)
    assert victim not in {r["replica"] for r in reps}, "the killed replica was not replaced"


def test_autoscaling_on_the_waiting_queue(tmp_path):
    """One replica of one sequence at a time under 6 concurrent long streams: requests wait, a
    second replica starts; idle again, it is taken down."""
    s = _start(["--num-replicas", "1", "--min-replicas", "1", "--max-replicas", "2",
                "--target-waiting", "1", "--max-num-seqs", "1", "--header-timeout", "5",
                "--limit-concurrency", "100"], str(tmp_path / "auto.log"))
    try:
        _wait_replicas(s, 1)
        # flags Ray's proxy takes over, or that mean less there, are named at start
        assert "--header-timeout 5 does not apply with --ray" in s.log()
        assert "--limit-concurrency 100 bounds the requests the ingress serves at once" in s.log()
        stop = threading.Event()

        errors = []

        def load():
            c = _client(s)
            while not stop.is_set():
                try:
                    c.completions.create(model=NAME, prompt="Once", max_tokens=100, temperature=0,
                                         extra_body={"ignore_eos": True})
                except Exception as e:  # noqa: BLE001 - the test requires none
                    errors.append(repr(e))
                    return
        threads = [threading.Thread(target=load, daemon=True) for _ in range(6)]
        for t in threads:
            t.start()
        try:
            _wait_replicas(s, 2, timeout=90)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=60)
        assert errors == [], errors[:3]
        _wait_replicas(s, 1, timeout=120)
    finally:
        _stop(s)


_BUILDER_SCRIPT = r"""
import json, sys, time, urllib.request
import ray
from ray import serve
from specdec.server.ray_serve import app_builder
model, port = sys.argv[1], int(sys.argv[2])
ray.init(address="local", include_dashboard=False, num_cpus=2)
serve.start(http_options={"host": "127.0.0.1", "port": port})
serve.run(app_builder({"model": model, "num_replicas": 1, "replica_cpus": 0.5}), name="builder",
          route_prefix="/")


def healthy(timeout):
    deadline, reps = time.monotonic() + timeout, []
    while time.monotonic() < deadline:  # the replica's reports reach /replicas through the board
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/replicas", timeout=10) as r:
            reps = json.load(r)["replicas"]
        if len(reps) == 1 and reps[0]["healthy"]:
            break
        time.sleep(0.5)
    return reps


reps = healthy(120)
before = sorted(n["name"] for n in ray.util.list_named_actors(all_namespaces=True))
board = next(n for n in before if "SpecdecBoard" in n)
ray.kill(ray.get_actor(board, namespace="serve"), no_restart=True)  # Serve starts another
t0, new_board = time.monotonic(), None
while new_board is None and time.monotonic() - t0 < 90:  # the old one gone, a new one there
    names = [n["name"] for n in ray.util.list_named_actors(all_namespaces=True)]
    new_board = next((n for n in names if "SpecdecBoard" in n and n != board), None)
    time.sleep(0.2)
again = healthy(90)
again_s = time.monotonic() - t0
serve.delete("builder")
time.sleep(1.0)
after = sorted(n["name"] for n in ray.util.list_named_actors(all_namespaces=True))
print("RESULT " + json.dumps({"replicas": reps, "before": before, "after": after, "again": again,
                              "again_s": again_s, "new_board": new_board}), flush=True)
serve.shutdown()
ray.shutdown()
"""


def test_an_application_from_the_builder_reports_and_leaves_nothing_when_deleted(tmp_path):
    """Ray's own entry (``app_builder`` under another application name): its replica's reports
    reach /replicas, again after the board's replica is killed (Ray starts another), and deleting
    the application takes every actor of it along, the board too (it was a detached actor that
    outlived the application)."""
    from serve_helpers import free_port
    script = tmp_path / "builder.py"
    script.write_text(_BUILDER_SCRIPT)
    r = subprocess.run([sys.executable, str(script), STORIES, str(free_port())], capture_output=True,
                       text=True, timeout=400)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    out = json.loads(next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    assert len(out["replicas"]) == 1 and out["replicas"][0]["healthy"], out
    assert out["new_board"] is not None, out  # Serve replaced the killed board
    assert len(out["again"]) == 1 and out["again"][0]["healthy"], out
    assert out["again"][0]["report_age_s"] >= 0, out  # the age is taken after the board's answer
    mine = [n for n in out["before"] if "builder" in n]
    assert any("SpecdecBoard" in n for n in mine) and any("SpecdecEngine" in n for n in mine), out
    assert [n for n in out["after"] if "builder" in n or "board" in n.lower()] == [], out


# ---- without a Ray cluster: flags, the router's rule, the policy, the merged metrics ----
def _cli(*args):
    return subprocess.run([sys.executable, "-m", "specdec", "serve", "--model", STORIES] + list(args),
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args, words", [
    (["--num-replicas", "2"], "--num-replicas: only with --ray"),
    (["--ray", "--min-replicas", "3", "--max-replicas", "2"], "--min-replicas 3 > --max-replicas 2"),
    (["--ray", "--min-replicas", "1"], "give both"),
    (["--ray", "--num-replicas", "5", "--min-replicas", "1", "--max-replicas", "2"], "between"),
    (["--ray", "--target-waiting", "2"], "only with --min-replicas"),
    (["--ray", "--min-replicas", "0", "--max-replicas", "2"], "--min-replicas"),
    (["--ray", "--router-kwargs", "{\"max_imbalance\": -1}"], "--router-kwargs: router kwargs: max_imbalance = -1"),
    (["--ray", "--router-kwargs", "{\"nope\": 1}"], "unknown ['nope']"),
    (["--ray", "--router", "ray-default", "--router-kwargs", "{}"], "only for --router prefix"),
    (["--ray", "--speculative-config", "{\"method\": \"nope\"}"], "--speculative-config"),
])
def test_bad_replica_flags_fail_before_ray_starts(args, words):
    r = _cli(*args)
    assert r.returncode != 0 and words in r.stderr, r.stderr
    assert "Ray 2" not in r.stderr  # refused before Ray started


class _Cache:
    def __init__(self, loads):
        self.loads = loads

    def get(self, rid):
        return self.loads.get(rid.unique_id)


class _Replica:
    def __init__(self, rid):
        self.replica_id = rid


def _router(loads, **kwargs):
    from ray.serve._private.common import DeploymentID, ReplicaID
    from specdec.server.ray_router import PrefixAffinityRouter
    r = PrefixAffinityRouter.__new__(PrefixAffinityRouter)
    r._deployment_id = DeploymentID(name="test-router", app_name="t")
    r._replica_queue_len_cache = _Cache(loads)
    r.initialize_state(**kwargs)
    reps = [_Replica(ReplicaID(unique_id=u, deployment_id=r._deployment_id)) for u in sorted(loads)]
    return r, reps


def _choose(router, reps, **hint):
    """The router's ranks for a request with this hint, and the request (made in an event loop,
    as Ray makes it)."""
    from ray.serve.request_router import PendingRequest
    from specdec.server.ray_common import RoutingHint

    async def go():
        pr = PendingRequest(args=[], kwargs={"routing": RoutingHint(**hint)}, metadata=None)
        return await router.choose_replicas(reps, pr), pr
    return asyncio.run(go())


def _route(router, reps, text):
    ranks, pr = _choose(router, reps, text=text)
    chosen = ranks[0][0]
    router.on_request_routed(pr, chosen.replica_id, None)
    return chosen.replica_id.unique_id, ranks


def test_router_prefers_the_prefix_holder_until_it_is_too_busy():
    router, reps = _router({"a": 0, "b": 0}, block_chars=8, min_match_chars=16, max_imbalance=2)
    shared = "system prompt shared by a session. " * 4
    first, _ = _route(router, reps, shared + "turn one")
    for turn in range(5):  # the same prefix: the same replica
        assert _route(router, reps, shared + f"turn one, and {turn}")[0] == first
    other = "b" if first == "a" else "a"
    # a prompt nobody has seen: the least loaded replica
    router._replica_queue_len_cache.loads.update({first: 1, other: 0})
    assert _route(router, reps, "a new and different prompt of some length")[0] == other
    # the holder busier than the least loaded by more than max_imbalance: load wins
    router._replica_queue_len_cache.loads.update({first: 3, other: 0})
    got, ranks = _route(router, reps, shared + "turn two")
    assert got == other and [r[0].replica_id.unique_id for r in ranks] == [other, first]
    router._replica_queue_len_cache.loads.update({first: 2, other: 0})  # within the bound
    assert _route(router, reps, shared + "turn one, and 4, then three")[0] == first
    assert router.stats["affinity"] >= 5 and router.stats["overloaded"] >= 1
    # a retry avoids the replica that died
    ranks, _ = _choose(router, reps, text=shared + "x", avoid=first)
    assert all(r.replica_id.unique_id != first for rank in ranks for r in rank)


def test_router_spreads_conversations_that_share_only_a_system_prompt():
    """Four replicas, eight sessions over two system prompts: a first turn matches only the shared
    system prompt (where earlier prompts went on otherwise), so it is placed by load, two sessions
    per replica; every later turn matches its own conversation and stays, although its replica is
    busier."""
    reps_ids = ["a", "b", "c", "d"]
    router, reps = _router({u: 0 for u in reps_ids}, block_chars=8, min_match_chars=16, max_imbalance=4)
    loads = router._replica_queue_len_cache.loads
    systems = ["You are a tutor: explain each idea in plain words with one example. " * 2,
               "You plan train journeys in Europe: name the route and the travel time. " * 2]
    prompts, home = {}, {}
    for s in range(8):
        prompts[s] = systems[s % 2] + f"user: question {s} of session {s}, about something of its own"
        home[s], _ = _route(router, reps, prompts[s])
        loads[home[s]] += 1  # its request is in flight
    assert sorted(home.values()) == sorted(reps_ids * 2), home
    assert router.stats["shared"] == 6 and router.stats["affinity"] == 0
    loads.update({home[0]: 4, **{u: 0 for u in reps_ids if u != home[0]}})  # session 0's replica is busier
    for turn in range(2):
        for s in range(8):
            prompts[s] += f" assistant: the answer of turn {turn} to {s}. user: and then what, {s}?"
            assert _route(router, reps, prompts[s])[0] == home[s], (s, turn)
    assert router.stats["affinity"] == 16 and router.stats["shared"] == 6
    # the last message edited, or another branch from the same point: the conversation's history
    # (its previous turn's end, which one continuation followed) is matched, not only a preamble
    for s in range(8):
        edited = prompts[s].rsplit(" user: ", 1)[0] + f" user: no, something else entirely, {s}!"
        assert _route(router, reps, edited)[0] == home[s], s
    assert router.stats["affinity"] == 24 and router.stats["shared"] == 6
    # a third branch of session 0 from that point stays on its (busier) replica; from the fourth
    # on, a point that many prompts went on from is shared: by load
    base = prompts[0].rsplit(" user: ", 1)[0]
    assert _route(router, reps, base + " user: a third thing")[0] == home[0]
    assert _route(router, reps, base + " user: four is next")[0] != home[0]
    assert router.stats["shared"] == 7


def test_router_spreads_sessions_that_start_alike_from_the_fourth_on():
    """Eight sessions with the same system prompt, first message and reply: their first turns
    are one prompt (affinity, within max_imbalance); at the second turn, where they differ, the
    first three keep a replica holding their start and the others are placed by load."""
    reps_ids = ["a", "b", "c", "d"]
    router, reps = _router({u: 0 for u in reps_ids}, block_chars=8, min_match_chars=16, max_imbalance=4)
    loads = router._replica_queue_len_cache.loads
    start = "You are a tutor: explain each idea in plain words with one example. " * 2 + "user: Hi!"
    first = set()
    for s in range(8):
        got, _ = _route(router, reps, start)
        first.add(got)
        loads[got] += 1
    loads.update({u: 0 for u in reps_ids})  # the first turns ended
    second = {}
    for s in range(8):
        p = start + f" assistant: Hello, how can I help you today? user: tell me about topic {s} please"
        second[s], _ = _route(router, reps, p)
        loads[second[s]] += 1
    assert all(second[s] in first for s in range(3)), (first, second)
    assert max(list(second.values()).count(u) for u in reps_ids) <= 3, second
    assert router.stats["shared"] == 5


def test_a_cluster_that_could_not_be_joined_is_named_with_why(monkeypatch):
    """Ray's token authentication failures (the cause three exceptions down, as ray.init raises
    them) come out as what to set; any other failure as Ray's own first line."""
    from ray.exceptions import AuthenticationError
    from specdec.server import ray_serve

    def raised(inner: BaseException) -> BaseException:
        try:
            try:
                try:
                    raise inner
                except BaseException as e:
                    raise RuntimeError("Failed to connect to GCS. Last connection error: ...") from e
            except BaseException as e:
                raise ConnectionError("Failed to connect to Ray cluster at 10.0.0.1:6379") from e
        except BaseException as e:
            return e

    auth = raised(AuthenticationError("RPC error: InvalidAuthToken: Authentication token is missing"))
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    assert "and this process sends no token (RAY_AUTH_MODE unset): set RAY_AUTH_MODE=token" in \
        ray_serve._join_error(auth)
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert "sends no token (RAY_AUTH_MODE = disabled)" in ray_serve._join_error(auth)
    monkeypatch.setenv("RAY_AUTH_MODE", "Token")  # Ray reads it in any case
    monkeypatch.setattr(ray_serve, "_has_ray_token", lambda: True)
    assert "this process's token is not the cluster's" in ray_serve._join_error(auth)
    monkeypatch.setattr(ray_serve, "_has_ray_token", lambda: False)
    assert "RAY_AUTH_MODE is token but this process has no token" in ray_serve._join_error(auth)
    other = raised(OSError("connection refused"))
    assert ray_serve._join_error(other) == "Failed to connect to Ray cluster at 10.0.0.1:6379"


def test_the_header_timeout_default_is_the_servers():
    """run_cli warns about --header-timeout under --ray when it differs from ServeLimits' default:
    the flag's default must be that one, or every start would warn."""
    from specdec.cli import build_parser
    from specdec.server.limits import ServeLimits
    args = build_parser().parse_args(["serve", "--model", "m"])
    assert args.header_timeout == ServeLimits.header_timeout_s


def test_router_kwargs_are_checked():
    with pytest.raises(ValueError, match="block_chars = 0"):
        _router({"a": 0}, block_chars=0)
    with pytest.raises(ValueError, match="unknown"):
        _router({"a": 0}, prefix=True)


class _Ctx:
    def __init__(self, current, waiting, running, target=None):
        self.current_num_replicas = current
        self.target_num_replicas = current if target is None else target
        self.aggregated_metrics = {"waiting": dict(enumerate(waiting)), "running": dict(enumerate(running))}


def test_queue_policy():
    from specdec.server.ray_router import QueuePolicy
    p = QueuePolicy(target_waiting=2, max_num_seqs=4)
    assert p(_Ctx(1, [3], [4]))[0] == 2          # waiting over the target: one more
    assert p(_Ctx(2, [10, 10], [4, 4]))[0] == 10  # far over: enough for the queue at once
    assert p(_Ctx(2, [1, 1], [4, 4]))[0] == 2     # within: stay
    assert p(_Ctx(2, [0, 0], [1, 0]))[0] == 1     # nothing waits, little runs: one fewer
    assert p(_Ctx(2, [0, 0], [4, 4]))[0] == 2     # busy batches: stay
    assert p(_Ctx(1, [0], [0]))[0] == 1
    # a replica still starting (target 2, one running) is kept, never taken back as a scale-down
    assert p(_Ctx(1, [1], [4], target=2))[0] == 2
    assert p(_Ctx(1, [0], [0], target=2))[0] == 2
    assert p(_Ctx(2, [0, 0], [0, 0], target=3))[0] == 3


def test_merged_metrics_label_or_sum_each_replica():
    from specdec.server.ray_serve import merge_metrics, routing_text
    a = ('# HELP x_total X\n# TYPE x_total counter\nx_total{model_name="m"} 2.0\n'
         '# HELP u_perc U\n# TYPE u_perc gauge\nu_perc{model_name="m"} 0.2\n')
    b = a.replace("2.0", "3.0").replace("0.2", "0.4")
    labelled = merge_metrics({"r1": a, "r2": b}, aggregate=False)
    assert "# TYPE x_total counter" in labelled and "# TYPE u_perc gauge" in labelled
    from prometheus_client.parser import text_string_to_metric_families
    fams = {f.name: f for f in text_string_to_metric_families(labelled)}
    assert fams["x"].type == "counter" and len(fams["x"].samples) == 2  # read back as counters
    assert 'x_total{model_name="m",replica="r1"} 2.0' in labelled
    assert 'x_total{model_name="m",replica="r2"} 3.0' in labelled
    summed = merge_metrics({"r1": a, "r2": b}, aggregate=True)
    assert 'x_total{model_name="m"} 5.0' in summed and 'u_perc{model_name="m"} 0.3' in summed
    assert routing_text({"prompt": ["first", "second"]}) == "first"
    assert routing_text({"prompt": [1, 2]}) == "1,2"
    chat = routing_text({"messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]})
    assert "user" in chat and "hi" in chat
    assert routing_text(["not", "an object"]) == ""


def test_app_builder_takes_serve_flags_as_a_config_dict():
    """Ray's `serve run` / `serve deploy` entry: flags by name, switches as true / false (YAML
    text too); the application is built without a cluster."""
    from specdec.server.ray_serve import app_builder
    app = app_builder({"model": STORIES, "num_replicas": 2, "no_enable_prefix_caching": "false",
                       "max_num_seqs": 4})
    assert type(app).__name__ == "Application"
    with pytest.raises(ValueError, match="no_enable_prefix_caching"):
        app_builder({"model": STORIES, "no_enable_prefix_caching": "maybe"})
    with pytest.raises(ValueError, match="--min-replicas"):
        app_builder({"model": STORIES, "min_replicas": 2, "max_replicas": 1})


def test_routing_hint_is_not_sent_to_the_replica():
    import pickle
    from specdec.server.ray_common import RoutingHint
    h = RoutingHint(text="x" * 1000, avoid="r1")
    h.blocks = [1, 2, 3]
    back = pickle.loads(pickle.dumps(h))
    assert back.text == "" and back.blocks is None and back.avoid is None
    assert len(pickle.dumps(h)) < 200


def test_without_ray_installed_the_flag_says_how_to_get_it():
    code = ("import sys; sys.modules['ray'] = None; from specdec.cli import main; "
            f"sys.exit(main(['serve', '--model', {STORIES!r}, '--ray']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "pip install 'specdec[ray]'" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_replica_whose_engine_loop_died_fails_the_health_check():
    """Ray replaces a replica whose check_health raises: it must raise once the engine loop's
    thread has died (a step's own errors end its requests and the loop goes on: not this), and
    not before."""
    from types import SimpleNamespace
    from specdec.server.app import EngineLoop
    from specdec.server.ray_serve import SpecdecEngine

    class Engine:
        def __init__(self):
            self._cond = threading.Condition()
            self.broken = False

        def has_unfinished_requests(self):
            if self.broken:
                raise RuntimeError("the engine's state is lost")
            return False

    engine = Engine()
    loop = EngineLoop(SimpleNamespace(engine=engine))
    loop.start()
    replica = SpecdecEngine.__new__(SpecdecEngine)  # the deployment without its model
    replica.replica, replica.server = "r0", SimpleNamespace(loop=loop)
    try:
        replica.check_health()  # serving: healthy
        engine.broken = True
        with engine._cond:
            engine._cond.notify_all()
        loop.thread.join(timeout=10)
        assert not loop.thread.is_alive()
        with pytest.raises(RuntimeError, match="r0: the engine loop has stopped"):
            replica.check_health()
    finally:
        loop._stop = True
        replica.server = None  # nothing of a real replica's to stop


# ---- the ingress's failover rules, with a fake engine handle (no cluster) ----
class _FakeGen:
    """A replica's response stream: items, then optionally an exception (a dying replica)."""

    def __init__(self, items, error=None):
        self.items, self.error, self.cancelled = list(items), error, False

    def __aiter__(self):
        return self

    async def __anext__(self):
        if self.items:
            return self.items.pop(0)
        if self.error is not None:
            raise self.error
        raise StopAsyncIteration

    def cancel(self):
        self.cancelled = True


class _FakeEngine:
    def __init__(self, gens):
        self.gens, self.hints = list(gens), []

    def options(self, **_kw):
        return self

    @property
    def http(self):
        return self

    def remote(self, payload, routing=None):
        self.hints.append(routing)
        return self.gens.pop(0)


def _ingress(gens):
    from specdec.server.ray_serve import SpecdecIngress
    ing = SpecdecIngress.__new__(SpecdecIngress)
    ing.engine = _FakeEngine(gens)
    ing.counters = {"retries": 0, "busy_retries": 0, "streams_cut": 0, "failed": 0}
    return ing


class _Req:
    method = "POST"
    scope = {"path": "/v1/completions", "root_path": "", "headers": [(b"authorization", b"Bearer k")],
             "query_string": b""}


def _died():
    from ray.exceptions import ActorDiedError
    return ActorDiedError()


def _head(replica, status=200, stream=False):
    ctype = "text/event-stream" if stream else "application/json"
    return {"status": status, "headers": [("content-type", ctype), ("content-length", "9")], "replica": replica}


def _forward(ing, text="hello"):
    async def go():
        resp = await ing.forward(_Req(), b"{}", text)
        body = b""
        if hasattr(resp, "body_iterator"):
            async for chunk in resp.body_iterator:
                body += chunk if isinstance(chunk, bytes) else chunk.encode()
        else:
            body = resp.body
        return resp, body
    return asyncio.run(go())


def test_ingress_retries_a_whole_response_once_on_another_replica():
    first = _FakeGen([_head("r1"), b'{"par'], _died())
    second = _FakeGen([_head("r2"), b'{"ok": 1}'])
    ing = _ingress([first, second])
    resp, body = _forward(ing)
    assert resp.status_code == 200 and body == b'{"ok": 1}' and resp.headers["x-specdec-replica"] == "r2"
    assert ing.counters["retries"] == 1 and first.cancelled
    assert ing.engine.hints[1].avoid == "r1" and ing.engine.hints[1].text == "hello"
    # the key never reaches a replica; the path is the app's own
    ing2 = _ingress([_FakeGen([_head("r1"), b"{}"])])
    payload = ing2._payload(_Req(), b"{}")
    assert payload["path"] == "/v1/completions" and all(k != b"authorization" for k, _ in payload["headers"])


def test_ingress_gives_up_after_one_retry_with_a_503():
    ing = _ingress([_FakeGen([], _died()), _FakeGen([_head("r2")], _died())])
    resp, body = _forward(ing)
    assert resp.status_code == 503 and b"replica_died" in body and resp.headers["retry-after"] == "1"
    assert ing.counters["failed"] == 1


def test_ingress_retries_a_full_replicas_503_elsewhere():
    busy = json.dumps({"error": {"message": "full", "type": "server_overloaded", "param": None,
                                 "code": "server_busy"}}).encode()
    ing = _ingress([_FakeGen([_head("r1", 503), busy]), _FakeGen([_head("r2"), b"{}"])])
    resp, _ = _forward(ing)
    assert resp.status_code == 200 and ing.counters["busy_retries"] == 1
    other = json.dumps({"error": {"code": "engine_dead"}}).encode()  # any other 503: passed on
    ing = _ingress([_FakeGen([_head("r1", 503), other])])
    resp, _ = _forward(ing)
    assert resp.status_code == 503


def test_a_stream_cut_by_a_dying_replica_ends_with_an_error_and_done():
    ing = _ingress([_FakeGen([_head("r1", stream=True), b'data: {"a": 1}\n\n'], _died())])
    resp, body = _forward(ing)
    events = [ln for ln in body.decode().split("\n") if ln.startswith("data: ")]
    assert events[0] == 'data: {"a": 1}' and "replica_died" in events[1] and events[-1] == "data: [DONE]"
    assert ing.counters["streams_cut"] == 1
    # dying after [DONE]: nothing more is added
    ing = _ingress([_FakeGen([_head("r1", stream=True), b"data: [DONE]\n\n"], _died())])
    _, body = _forward(ing)
    assert body == b"data: [DONE]\n\n"
    # dying before the first chunk: retried like a whole response
    ing = _ingress([_FakeGen([_head("r1", stream=True)], _died()),
                    _FakeGen([_head("r2", stream=True), b"data: x\n\n", b"data: [DONE]\n\n"])])
    resp, body = _forward(ing)
    assert body == b"data: x\n\ndata: [DONE]\n\n" and resp.headers["x-specdec-replica"] == "r2"


def _asgi(app, method, path, body=b"", headers=(), length=True):
    """(status, body) of one request through an ASGI app, in-process (with a content-length
    header, or without one as a chunked upload is; 10 s at most)."""
    async def go():
        sent, out = {"body": False}, {"status": None, "body": b""}

        async def receive():
            if not sent["body"]:
                sent["body"] = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.sleep(3600)

        async def send(message):
            if message["type"] == "http.response.start":
                out["status"] = message["status"]
            elif message["type"] == "http.response.body":
                out["body"] += message.get("body", b"")

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
                 "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
                 "root_path": "", "headers": [(b"content-type", b"application/json"), *headers],
                 "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8000)}
        if length:
            scope["headers"].append((b"content-length", str(len(body)).encode()))
        await asyncio.wait_for(app(scope, receive, send), 10)
        return out["status"], out["body"]
    return asyncio.run(go())


def test_ingress_checks_the_key_and_the_body_limit_before_any_replica():
    """The ingress's own checks (the same code as a single server's): /v1 without the key is
    401 and a body over --max-body-bytes 413, and neither reaches a replica."""
    from specdec.server.limits import BodyReader, ServeLimits
    from specdec.server.ray_serve import build_ingress_app
    ok = [_head("r1"), b'{"ok": true}']
    ing = _ingress([_FakeGen(ok)])
    ing.api_key = "k"
    ing.bodies = BodyReader(ServeLimits(max_body_bytes=1000))
    try:
        app = build_ingress_app(ing)
        key = [(b"authorization", b"Bearer k")]
        body = json.dumps({"model": NAME, "prompt": "hi"}).encode()
        assert _asgi(app, "POST", "/v1/completions", body)[0] == 401
        status, text = _asgi(app, "POST", "/v1/completions", body, [(b"authorization", b"Bearer nope")])
        assert status == 401 and b"invalid_api_key" in text
        big = json.dumps({"model": NAME, "prompt": "x" * 2000}).encode()
        for length in (True, False):  # its size said up front, or found while reading
            status, text = _asgi(app, "POST", "/v1/completions", big, key, length=length)
            assert status == 413 and b"--max-body-bytes" in text, (length, text)
        assert ing.engine.hints == []  # none of these reached a replica
        status, text = _asgi(app, "POST", "/v1/completions", body, key)
        assert status == 200 and json.loads(text) == {"ok": True}
        assert ing.engine.hints[0].text  # routed by its prompt
    finally:
        ing.bodies.close()


def test_ingress_cancels_the_replica_when_its_client_goes():
    """A client gone while the ingress waits for a whole response (Ray cancels the ingress's
    handler): the replica's stream is cancelled, so the replica's app sees the disconnect and
    aborts its engine requests, and the cancellation goes on up."""
    class _Pending(_FakeGen):
        async def __anext__(self):
            if self.items:
                return self.items.pop(0)
            await asyncio.sleep(3600)  # the replica still generating

    gen = _Pending([_head("r1")])
    ing = _ingress([gen])

    async def go():
        task = asyncio.create_task(ing.forward(_Req(), b"{}", "hello"))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert gen.cancelled
    assert ing.counters == {"retries": 0, "busy_retries": 0, "streams_cut": 0, "failed": 0}
