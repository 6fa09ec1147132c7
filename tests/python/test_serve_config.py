"""Without a server: the serve limits' checks, the path redaction of client messages, the
package's dependencies, and progress output into logs that are not a terminal."""

from __future__ import annotations

import io
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_server_libraries_are_default_dependencies():
    tomllib = pytest.importorskip("tomllib")
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    names = {re.split(r"[<>=!~ \[]", d)[0].lower().replace("_", "-") for d in project["dependencies"]}
    assert {"fastapi", "uvicorn", "prometheus-client"} <= names, names
    assert "serve" in project["optional-dependencies"]  # old commands ('.[serve]') still work


def test_weight_loading_progress_is_plain_lines_outside_a_terminal():
    from specdec.llm import _load_progress
    log = io.StringIO()
    report = _load_progress(log)
    total = 100 << 20
    for done in range(0, total + 1, 1 << 20):
        report(done, total)
    text = log.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert [int(re.search(r"(\d+)%", line).group(1)) for line in lines] == [0, 25, 50, 75, 100], lines
    assert all(line.startswith("loading weights: ") for line in lines)
    # a jump past several quarters prints one line; nothing after 100 %
    log = io.StringIO()
    report = _load_progress(log)
    report(0, 10), report(9, 10), report(10, 10), report(10, 10)
    assert [int(re.search(r"(\d+)%", line).group(1)) for line in log.getvalue().splitlines()] == [0, 90, 100]
    # a terminal still gets the bar redrawn in place
    tty = _Tty()
    report = _load_progress(tty)
    report(0, 10), report(10, 10)
    assert tty.getvalue().startswith("\rloading weights [") and tty.getvalue().endswith("\n")


def test_bench_bar_is_plain_lines_outside_a_terminal():
    from specdec.bench import _Bar
    log = io.StringIO()
    bar = _Bar(4, log)
    for i in range(4):
        bar.step(f"run {i}")
    assert "\r" not in log.getvalue() and len(log.getvalue().splitlines()) == 4


def test_serve_limits_are_checked():
    from specdec.server.limits import ServeLimits
    assert ServeLimits().max_inflight_body_bytes >= ServeLimits().max_body_bytes
    for kwargs, flag in (({"max_body_bytes": 0}, "--max-body-bytes"),
                         ({"body_timeout_s": -1.0}, "--body-timeout"),
                         ({"header_timeout_s": float("nan")}, "--header-timeout"),
                         ({"max_body_bytes": 64 << 20, "max_inflight_body_bytes": 32 << 20},
                          "--max-inflight-body-bytes"),
                         ({"limit_concurrency": -1}, "--limit-concurrency")):
        with pytest.raises(ValueError, match=re.escape(flag)):
            ServeLimits(**kwargs)
    opts = ServeLimits(limit_concurrency=0, header_timeout_s=3).uvicorn_options()
    assert opts["limit_concurrency"] is None and opts["timeout_keep_alive"] == 5
    assert opts["h11_max_incomplete_event_size"] == 16 << 10 and isinstance(opts["http"], type)


def test_the_servers_paths_are_removed_from_client_messages(tmp_path):
    from specdec.server.protocol import ApiError, PathRedactor
    model = tmp_path / "models" / "m.gguf"
    model.parent.mkdir()
    model.write_bytes(b"")
    r = PathRedactor({str(model): "served"})
    e = r.error(ApiError(400, f"{model} has no chat template; also {model.parent}/other.gguf and "
                              f"{os.path.realpath(model)}"))
    assert e.message == "served has no chat template; also other.gguf and served"
    assert str(tmp_path) not in e.message


def test_ignored_fields_are_held_to_openai_limits():
    from specdec.server.protocol import COMPLETION_FIELDS, ApiError, check_fields
    ok = {"model": "m", "prompt": "a", "user": "u" * 1024,
          "metadata": {f"k{i}": "v" * 512 for i in range(16)}}
    check_fields(ok, COMPLETION_FIELDS, "/v1/completions")
    for bad, param in (({"user": "u" * 1025}, "user"),
                       ({"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
                       ({"metadata": {"k": "v" * 513}}, "metadata.'k'"),
                       ({"metadata": {"k" * 65: "v"}}, "metadata." + repr("k" * 65)),
                       ({"metadata": {"k": 1}}, "metadata.'k'"),
                       ({"metadata": ["a"]}, "metadata")):
        with pytest.raises(ApiError) as e:
            check_fields({"model": "m", "prompt": "a", **bad}, COMPLETION_FIELDS, "/v1/completions")
        assert e.value.status == 400 and e.value.param == param, (bad, e.value.message)


def test_large_bodies_are_walked_field_by_field():
    import json
    from specdec.server.limits import FIELD_CHARS, parse_object
    from specdec.server.protocol import ApiError
    body = {"model": "m", "prompt": ["x" * 200000, [1, 2, 3] * 30000], "stop": ["a", "b"],
            "metadata": {"k": "v"}, "messages": [{"role": "user", "content": "\u00e9\"" * 50000}],
            "n": 2, "seed": None, "stream": True}
    for text in (json.dumps(body), json.dumps(body, indent=2), json.dumps(body, ensure_ascii=False)):
        assert parse_object(text.encode()) == body
        assert parse_object(text.encode("utf-16")) == body
    assert parse_object(b" { } ") == {}
    for raw, code, param in ((b'{"metadata": {"k": "' + b"v" * FIELD_CHARS + b'"}}', "invalid_value", "metadata"),
                             (b'{"bogus": [' + b"1," * FIELD_CHARS + b"1]}", "invalid_value", "bogus"),
                             (b"[1, 2]", "invalid_json", None), (b'{"a": 1,}', "invalid_json", None),
                             (b'{"a": 1} x', "invalid_json", None), (b'{"a" 1}', "invalid_json", None),
                             (b'{"prompt": ' + b"[" * 100000 + b"]" * 100000 + b"}", "invalid_json", None),
                             (b'{"a": 1', "invalid_json", None), (b"\xff\xfe\x00", "invalid_json", None)):
        with pytest.raises(ApiError) as e:
            parse_object(raw)
        assert e.value.status == 400 and (e.value.code, e.value.param) == (code, param), (raw[:40], e.value.message)
