"""``specdec serve`` against slow, stalled and greedy clients (raw sockets to a real server on
127.0.0.1): bodies under a deadline (408) and a byte budget shared by all connections (413, RSS
bounded), headers under a deadline, large bodies parsed off the event loop; the server's paths
hidden from clients; several Authorization headers refused."""

from __future__ import annotations

import json
import os
import select
import socket
import threading
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("prometheus_client")

from serve_helpers import ServerProcess  # noqa: E402
from spec_helpers import STORIES  # noqa: E402

KEY = "k3y"
NAME = os.path.basename(STORIES)  # no --served-model-name: the file name
MIB = 1 << 20
BUDGET = 64 * MIB


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = ServerProcess(["--model", STORIES, "--api-key", KEY, "--max-inflight-body-bytes", str(BUDGET),
                       "--body-timeout", "30", "--header-timeout", "1"],
                      str(tmp_path_factory.mktemp("limits") / "server.log"))
    yield s
    assert s.stop() == 0, s.log()


@pytest.fixture(scope="module")
def impatient(tmp_path_factory):
    s = ServerProcess(["--model", STORIES, "--api-key", KEY, "--body-timeout", "2"],
                      str(tmp_path_factory.mktemp("limits") / "impatient.log"))
    yield s
    assert s.stop() == 0, s.log()


def _connect(server) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _head(length: int, path: str = "/v1/completions", auth: str = f"Bearer {KEY}") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Authorization: {auth}\r\nContent-Length: {length}\r\nConnection: close\r\n\r\n").encode()


def _response(sock: socket.socket, timeout: float) -> bytes:
    """What the server sends until it closes the connection or `timeout` passes."""
    sock.settimeout(timeout)
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except socket.timeout:
        pass
    except ConnectionResetError:
        pass
    return data


def _status(resp: bytes) -> int:
    return int(resp.split(b" ", 2)[1]) if resp.startswith(b"HTTP/1.1 ") else 0


def _rss(server) -> int:
    with open(f"/proc/{server.proc.pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _health_ok(server) -> bool:
    return server.request("GET", "/health")[0] == 200


def test_a_stalled_body_gets_408_within_the_deadline_and_is_closed(impatient):
    server = impatient
    body = json.dumps({"model": NAME, "prompt": "a", "max_tokens": 1}).encode()
    sock = _connect(server)
    start = time.monotonic()
    sock.sendall(_head(len(body)) + body[:10])  # then nothing
    resp = _response(sock, 10)
    took = time.monotonic() - start
    sock.close()
    assert _status(resp) == 408, resp[:300]
    assert b'"request_timeout"' in resp and b"10 bytes came" in resp
    assert 1.5 < took < 5, took  # the deadline is 2 s; the connection closed after the answer
    # a client that drips a byte at a time is held to the same deadline
    sock = _connect(server)
    sock.sendall(_head(len(body)))
    start = time.monotonic()
    got = b""
    for b in body[:-1]:
        try:
            sock.sendall(bytes([b]))
        except OSError:
            break
        if select.select([sock], [], [], 0.1)[0]:
            break
    got = _response(sock, 10)
    sock.close()
    assert _status(got) == 408 and time.monotonic() - start < 5, got[:300]
    assert _health_ok(server)


def test_half_sent_and_idle_connections_are_closed(server):
    socks = []
    for i in range(60):
        s = _connect(server)
        if i % 3:  # two in three send part of their headers, the others nothing
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le")
        socks.append(s)
    start = time.monotonic()
    closed = 0
    for s in socks:
        s.settimeout(max(0.1, 6 - (time.monotonic() - start)))
        try:
            closed += s.recv(100) == b""
        except socket.timeout:
            pass
        except ConnectionResetError:
            closed += 1
        s.close()
    assert closed == len(socks), f"{len(socks) - closed} of {len(socks)} connections still open after 6 s"
    assert _health_ok(server)


def _greedy_client(server, size: int, results: list, i: int) -> None:
    """Sends a body of `size` bytes (all but its last byte, then waits): 'refused' when the server
    answers 413 or closes the connection on the way, 'held' when it takes the body."""
    tail = json.dumps({"model": NAME, "prompt": "a", "max_tokens": 1}).encode()
    body = b" " * (size - len(tail)) + tail
    sock = _connect(server)
    outcome = "held"
    try:
        sock.sendall(_head(len(body)))
        view = memoryview(body)[:-1]
        for off in range(0, len(view), MIB):
            if select.select([sock], [], [], 0)[0]:
                break
            sock.sendall(view[off:off + MIB])
        ready = select.select([sock], [], [], 1.0)[0]
        if ready:
            resp = _response(sock, 5)
            outcome = "413" if _status(resp) == 413 else ("closed" if not resp else resp[:200])
    except (BrokenPipeError, ConnectionResetError):
        outcome = "closed"
    results[i] = (outcome, sock, body[-1:])


def test_many_big_bodies_get_413_past_the_budget_and_memory_stays_bounded(server):
    assert _health_ok(server)
    rss0 = _rss(server)
    n, size = 16, 31 * MIB  # without a budget: ~500 MiB held by the server
    results: list = [None] * n
    threads = [threading.Thread(target=_greedy_client, args=(server, size, results, i)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    grown = _rss(server) - rss0
    outcomes = [r[0] for r in results]
    held = [r for r in results if r[0] == "held"]
    try:
        assert len(held) <= BUDGET // size, outcomes
        assert all(o in ("held", "413", "closed") for o in outcomes), outcomes
        assert outcomes.count("413") >= 1, outcomes
        assert grown < BUDGET + 100 * MIB, f"RSS grew {grown / MIB:.0f} MiB"
        # the held bodies finish: they are answered
        for _, sock, last in held:
            sock.sendall(last)
            resp = _response(sock, 30)
            assert _status(resp) == 200, resp[:300]
    finally:
        for r in results:
            r[1].close()
    assert _health_ok(server)
    # the budget is back: one more big body is taken
    results = [None]
    _greedy_client(server, size, results, 0)
    outcome, sock, last = results[0]
    assert outcome == "held"
    sock.sendall(last)
    assert _status(_response(sock, 30)) == 200
    sock.close()


def test_health_answers_while_a_30_mib_metadata_body_comes_in(server):
    meta = ",".join(f'"{i:07d}":"v"' for i in range(30 * MIB // 14))  # 30 MiB of small pairs
    body = ('{"model":"%s","prompt":"a","max_tokens":1,"metadata":{%s}}' % (NAME, meta)).encode()
    sock = _connect(server)
    sock.sendall(_head(len(body)) + body)
    latencies, done = [], []

    def big():
        done.append(_response(sock, 60))

    t = threading.Thread(target=big)
    t.start()
    while t.is_alive() and len(latencies) < 200:
        start = time.monotonic()
        assert _health_ok(server)
        latencies.append(time.monotonic() - start)
        time.sleep(0.02)
    t.join()
    sock.close()
    resp = done[0]
    assert 30 * MIB - 100 < len(body) <= 30 * MIB + 100
    # refused after its first 64 KiB, not parsed whole
    assert _status(resp) == 400 and b'"param":"metadata"' in resp, resp[:300]
    assert latencies, "no /health answer came"
    assert max(latencies) < 0.5, f"/health took up to {max(latencies):.2f} s"


def test_paths_hidden_and_two_authorization_headers_refused(server):
    status, body, text = server.request("GET", "/v1/models", headers={"Authorization": f"Bearer {KEY}"})
    assert status == 200 and body["data"][0]["root"] == NAME
    status, body, text = server.request("POST", "/v1/chat/completions",
                                        {"model": NAME, "messages": [{"role": "user", "content": "hi"}]},
                                        headers={"Authorization": f"Bearer {KEY}"})
    assert status == 400 and "chat template" in body["error"]["message"]  # stories260K has none
    assert os.path.dirname(os.path.abspath(STORIES)) not in text and os.sep + NAME not in text, text
    # two Authorization headers: refused, whichever comes first
    payload = json.dumps({"model": NAME, "prompt": "a", "max_tokens": 1}).encode()
    for first, second in ((KEY, "wrong"), ("wrong", KEY), (KEY, KEY)):
        head = _head(len(payload), auth=f"Bearer {first}").replace(
            b"\r\n\r\n", f"\r\nAuthorization: Bearer {second}\r\n\r\n".encode())
        sock = _connect(server)
        sock.sendall(head + payload)
        resp = _response(sock, 3)
        sock.close()
        assert _status(resp) == 401 and b"2 Authorization headers" in resp, resp[:300]
    sock = _connect(server)
    sock.sendall(_head(len(payload)) + payload)
    resp = _response(sock, 3)
    sock.close()
    assert _status(resp) == 200, resp[:300]
