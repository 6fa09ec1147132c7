"""Chat templates bounded in time and memory (issue 34, item 1): every template bomb found so far
ends within seconds with a one-line error naming the template and the limit, in a worker process
the parent's memory never sees; the worker survives or is replaced; the server keeps answering
while a template runs away, renders a chat once, and `--chat-template` with a bomb fails at
start. And the template's BOS kept in the text, one BOS in the ids (item 8)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading
import time

import pytest

import specdec
from specdec import _chat_worker
from specdec.chat_template import ChatTemplateError
from spec_helpers import STORIES

N = "100000000"
LOOPS = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
# name: (template, what the error says)
BOMBS = {
    "ljust": ("{{ 'a'.ljust(" + N + ") }}", "str.ljust: a width or precision of 100000000"),
    "zfill": ("{{ 'a'.zfill(" + N + ") }}", "str.zfill"),
    "center": ("{{ 'a'.center(" + N + ") }}", "str.center"),
    "center filter": ("{{ 'a' | center(" + N + ") }}", "center"),
    "expandtabs": ("{{ ('\\t' * 1000).expandtabs(1000000) }}", "expandtabs"),
    "nested format width": ("{{ '{:{w}}'.format('a', w=" + N + ") }}", "nested width"),
    "nested format width, positional": ("{{ '{:{}}'.format('a', " + N + ") }}", "nested width"),
    "percent star": ("{{ '%*d' % (" + N + ", 1) }}", "% format's \\* width"),
    "format filter": ("{{ '%*d' | format(" + N + ", 1) }}", "% format's \\* width"),
    "format filter width": ("{{ '%999999999d' | format(1) }}", "% format"),
    "replace empty": ("{{ ('a' * 1000).replace('', 'b' * 1000000) }}", "replace"),
    "replace filter": ("{{ ('a' * 1000) | replace('', 'b' * 1000000) }}", "replace"),
    "join of a repeated list": ("{% set s = 'a' * 1000000 %}{{ ([s] * 1500) | join }}",
                                "exceeds 16777216 characters"),
    "join of a doubled list": ("{% set ns = namespace(l=['a' * 1000000]) %}{% for i in range(11) %}"
                               "{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l | join }}",
                               "a join of 2048 items"),
    "str.join": ("{% set ns = namespace(l=['a' * 1000000]) %}{% for i in range(11) %}"
                 "{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ''.join(ns.l) }}", "a join"),
    "translate": ("{{ ('a' * 1000000).translate({97: 'b' * 1000}) }}", "translate"),
    "batch": ("{{ [1] | batch(" + N + ", 0) | list | length }}", "batch\\(100000000\\)"),
    "slice": ("{{ [1] | slice(" + N + ") | list | length }}", "slice\\(100000000\\)"),
    "sum of lists": ("{{ ([[1] * 1000] * 1000) | sum(start=[]) | length }}", "sum"),
    "power chain": ("{{ ((2 ** 256) ** 256) ** 256 }}", "integer power"),
    "squaring in a loop": ("{% set ns = namespace(x=3) %}{% for i in range(64) %}"
                           "{% set ns.x = ns.x * ns.x %}{% endfor %}{{ ns.x > 0 }}",
                           "integer product"),
    "output in a loop": ("{% for i in range(100000) %}{{ 'a' * 1000000 }}{% endfor %}",
                         "output longer than 16777216"),
    "exponential macro": ("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}"
                          "{% endmacro %}{{ f(40) }}", "time limit \\(2 s\\)"),
    "exponential macro with text": ("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}"
                                    "{% else %}ab{% endif %}{% endmacro %}{{ f(30) }}",
                                    "time limit|output longer"),
    "nested range loops": (LOOPS, "time limit \\(2 s\\)"),
    # past every check in the sandbox: the worker's address-space limit stops it
    "many long strings kept": ("{% set s = (['\U0001F600' * 1000000] * 16) | join %}"
                               "{% set ns = namespace(l=[]) %}{% for i in range(40) %}"
                               "{% set ns.l = ns.l + [s ~ i] %}{% endfor %}{{ ns.l | length }}",
                               "memory limit \\(1024 MiB\\)|time limit"),
}
CONVO = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def tok():
    return specdec.Tokenizer.from_file(STORIES)


def _peak_rss_mib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10


@pytest.mark.parametrize("name", list(BOMBS))
def test_every_template_bomb_ends_fast_with_a_one_line_error(tok, name):
    source, says = BOMBS[name]
    before, start = _peak_rss_mib(), time.monotonic()
    for tokenize in (False, True):
        with pytest.raises(ChatTemplateError, match=says) as info:
            tok.apply_chat_template(CONVO, tokenize=tokenize, chat_template=source)
        message = str(info.value)
        assert "\n" not in message and "chat template 'given'" in message, message
    assert time.monotonic() - start < 30  # two renders of at most 2 s each, or a start-up
    assert _peak_rss_mib() - before < 64  # the parent never holds what the template built
    assert tok.apply_chat_template(CONVO, chat_template="{{ messages[0].content }}!") == "hi!"


def test_a_bomb_through_llm_chat(tok):
    llm = specdec.LLM(STORIES, progress=False)
    with pytest.raises(ValueError, match="time limit"):
        llm.chat(CONVO, chat_template=LOOPS)
    out = llm.chat(CONVO, specdec.SamplingParams(max_tokens=2),
                   chat_template="{{ bos_token }}{{ messages[0].content }}")
    assert out[0].prompt_token_ids == tok.encode("hi")  # one BOS


def test_a_worker_that_does_not_answer_is_killed_and_replaced(tok, monkeypatch):
    # the worker's own timer set too late to help: the parent's deadline kills it
    monkeypatch.setattr(_chat_worker, "TIME_LIMIT_S", 60.0)
    monkeypatch.setattr(_chat_worker, "WALL_LIMIT_S", 1.0)
    start = time.monotonic()
    with pytest.raises(ChatTemplateError, match="time limit .*killed after 1 s"):
        tok.apply_chat_template(CONVO, chat_template=LOOPS)
    assert time.monotonic() - start < 10
    monkeypatch.undo()
    assert tok.apply_chat_template(CONVO, chat_template="{{ messages[0].content }}") == "hi"


def test_renders_run_concurrently_and_a_bomb_holds_up_only_itself(tok):
    warm = [_chat_worker._POOL.acquire() for _ in range(_chat_worker.MAX_WORKERS)]
    for worker in warm:  # both workers started: the quick render pays no start-up
        _chat_worker._POOL.release(worker)
    done = {}

    def bomb():
        try:
            tok.apply_chat_template(CONVO, chat_template=LOOPS)
        except ChatTemplateError as e:
            done["bomb"] = str(e)
    thread = threading.Thread(target=bomb)
    thread.start()
    time.sleep(0.3)
    start = time.monotonic()
    assert tok.apply_chat_template(CONVO, chat_template="{{ messages[0].content }}") == "hi"
    quick = time.monotonic() - start
    thread.join()
    assert "time limit" in done["bomb"] and quick < 1.5, quick


def test_the_worker_imports_neither_the_core_nor_numpy():
    worker = _chat_worker._Worker()
    try:
        modules = open(f"/proc/{worker.proc.pid}/maps").read() if sys.platform == "linux" else ""
        assert "_core" not in modules and "numpy" not in modules
    finally:
        worker.kill()


# ---- the template's BOS (item 8) ---------------------------------------------------------------

def test_the_text_keeps_the_templates_bos_and_the_ids_have_one(tok):
    bos = tok.token_text(tok.bos_token_id)
    for source in ("{{ bos_token }}[INST] {{ messages[0].content }} [/INST]",
                   "<s>[INST] {{ messages[0].content }} [/INST]"):  # written out, not the variable
        text = tok.apply_chat_template(CONVO, chat_template=source)
        assert text == f"{bos}[INST] hi [/INST]"  # as transformers gives it
        ids = tok.apply_chat_template(CONVO, tokenize=True, chat_template=source)
        assert ids == tok.encode(text, add_special=False, parse_special=True)
        assert ids.count(tok.bos_token_id) == 1 and ids == tok.encode("[INST] hi [/INST]")
        assert tok.chat_prompt(CONVO, chat_template=source) == (text, ids)
    # a message that starts with the BOS text: text, not a second BOS
    mine = [{"role": "user", "content": f"{bos}hi"}]
    ids = tok.apply_chat_template(mine, tokenize=True, chat_template="{{ messages[0].content }}")
    assert ids.count(tok.bos_token_id) == 1 and ids[0] == tok.bos_token_id


# ---- the server and the command line -----------------------------------------------------------

def test_chat_template_bomb_fails_serve_at_start(tmp_path):
    (tmp_path / "t.jinja").write_text(LOOPS)
    start = time.monotonic()
    run = subprocess.run([sys.executable, "-m", "specdec", "serve", "--model", STORIES,
                          "--port", "1", "--chat-template", str(tmp_path / "t.jinja")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode != 0 and time.monotonic() - start < 120
    lines = [line for line in run.stderr.splitlines() if "--chat-template" in line]
    assert lines and "time limit" in lines[-1] and "Traceback" not in run.stderr, run.stderr


GUARDED = ("{{ bos_token }}{% for m in messages %}{% if m.content == 'boom' %}" + LOOPS +
           "{% endif %}{{ m.role }}: {{ m.content }}\n{% endfor %}")


def test_the_server_keeps_answering_while_a_template_runs_away(tmp_path):
    pytest.importorskip("uvicorn")
    from serve_helpers import ServerProcess
    (tmp_path / "t.jinja").write_text(GUARDED)  # renders "hi" at start; runs away on "boom"
    s = ServerProcess(["--model", STORIES, "--served-model-name", "stories",
                       "--chat-template", str(tmp_path / "t.jinja")], str(tmp_path / "s.log"))
    try:
        got = {}

        def boom():
            got["boom"] = s.request("POST", "/v1/chat/completions", {
                "model": "stories", "max_tokens": 2,
                "messages": [{"role": "user", "content": "boom"}]})
        thread = threading.Thread(target=boom)
        thread.start()
        time.sleep(0.3)
        answered = 0
        while thread.is_alive():
            start = time.monotonic()
            assert s.request("GET", "/health")[0] == 200
            assert time.monotonic() - start < 1.0
            answered += 1
            time.sleep(0.1)
        thread.join()
        status, body, _ = got["boom"]
        assert status == 400 and "time limit" in body["error"]["message"], body
        assert answered >= 3
        status, body, _ = s.request("POST", "/v1/chat/completions", {
            "model": "stories", "max_tokens": 2, "messages": [{"role": "user", "content": "Once"}]})
        want = specdec.Tokenizer.from_file(STORIES).encode("user: Once\n")
        assert status == 200 and body["usage"]["prompt_tokens"] == len(want), body
        # SIGTERM while a template runs away: a graceful stop, and no worker left behind
        thread = threading.Thread(target=boom)
        thread.start()
        time.sleep(0.5)
        workers = _worker_pids(s.proc.pid)
        assert workers
    finally:
        assert s.stop() == 0, s.log()
    thread.join()
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in workers):
        assert time.monotonic() < deadline, workers
        time.sleep(0.1)


def _worker_pids(parent: int) -> list:
    """The chat-template workers of process `parent` (Linux /proc)."""
    out = []
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{d}/cmdline") as f:
                cmdline = f.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == parent and "_chat_worker" in cmdline:
            out.append(int(d))
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_the_server_renders_a_chat_once(monkeypatch):
    testclient = pytest.importorskip("fastapi.testclient")
    from specdec.server.app import build_app
    calls = []
    real = _chat_worker.render

    def counting(*args, **kwargs):
        calls.append(threading.current_thread().name)
        return real(*args, **kwargs)
    monkeypatch.setattr(_chat_worker, "render", counting)
    llm = specdec.LLM(STORIES, progress=False)
    app = build_app(llm, "stories", chat_template=GUARDED)
    with testclient.TestClient(app) as client:
        r = client.post("/v1/chat/completions", json={
            "model": "stories", "max_tokens": 2, "messages": [{"role": "user", "content": "Once"}]})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["prompt_tokens"] == len(llm.tokenizer.encode("user: Once\n"))
    assert len(calls) == 1 and calls[0].startswith("specdec-tokenize"), calls  # off the loop
