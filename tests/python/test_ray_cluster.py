"""``specdec serve --ray --ray-address``: joining a Ray cluster that was started on its own (``ray
start --head``, as docs/serving.md's several-machines recipe does), with Ray 2.60's token
authentication on. Without the cluster's token the server says so in one line, naming the fix;
with it the application serves and, when the server stops, only the application goes: the
cluster stays up with nothing of it left.

Its own module, so that no other Ray instance of the suite runs beside the head."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("ray.serve")

from serve_helpers import ServerProcess, free_port  # noqa: E402
from spec_helpers import STORIES  # noqa: E402

TOKEN = "specdec-test-" + "0123456789abcdef" * 2


def _env(token: bool) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")}
    if token:
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=TOKEN)
    return env


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    """A one-node cluster with token authentication (its own process group, taken down whole)."""
    port = free_port()
    log = open(tmp_path_factory.mktemp("head") / "head.log", "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--port", str(port),
         "--num-cpus", "2", "--include-dashboard=false", "--disable-usage-stats",
         "--ray-client-server-port", str(free_port()),
         "--dashboard-agent-listen-port", str(free_port()), "--block"],
        stdout=log, stderr=subprocess.STDOUT, env=_env(token=True), start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:  # the head's GCS answers
            assert proc.poll() is None, open(log.name).read()[-3000:]
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, open(log.name).read()[-3000:]
                time.sleep(0.5)
        yield f"127.0.0.1:{port}"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)  # its graceful stop took 30 s: what is left is killed below
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever of the group is left
        except ProcessLookupError:
            pass
        log.close()
        # `ray start` noted the head as this machine's cluster (for ray.init() / "auto"); `ray
        # stop` would forget it, killing the group does not
        from ray._common.utils import get_ray_address_file
        note = get_ray_address_file(None)
        try:
            with open(note) as f:
                noted = f.read().strip()
            if noted.endswith(f":{port}"):  # this head's (its node's address, this port)
                os.remove(note)
        except OSError:
            pass


def test_without_the_clusters_token_the_server_says_how_to_join(head):
    env = _env(token=False)
    env["RAY_gcs_server_port_wait_time_s"] = "3"  # Ray's connection retries: 3 s, not 20
    r = subprocess.run([sys.executable, "-m", "specdec", "serve", "--model", STORIES, "--ray",
                        "--ray-address", head, "--port", str(free_port())],
                       capture_output=True, text=True, timeout=180, env=env)
    assert r.returncode != 0, r.stderr[-3000:]
    last = next((ln for ln in r.stderr.splitlines() if ln.startswith("specdec: error:")), r.stderr[-3000:])
    assert last.startswith(f"specdec: error: --ray-address {head}: the cluster uses Ray's token "
                           "authentication and this process sends no token (RAY_AUTH_MODE unset)"), last
    assert "set RAY_AUTH_MODE=token" in last and "ray get-auth-token" in last, last


def test_the_application_joins_serves_and_leaves_the_cluster_as_it_was(head, tmp_path, monkeypatch):
    for name in ("RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH"):  # ServerProcess adds its env to this one
        monkeypatch.delenv(name, raising=False)
    s = ServerProcess(["--ray", "--ray-address", head, "--model", STORIES, "--served-model-name",
                       "stories", "--num-replicas", "1", "--replica-cpus", "0.5"],
                      str(tmp_path / "serve.log"), timeout=240, env=_env(token=True))
    try:
        assert f"joining {head}" in s.log()
        deadline = time.monotonic() + 120
        while True:  # the replica reports (through the board) before it shows healthy
            status, body, _ = s.request("GET", "/replicas")
            if status == 200 and len(body["replicas"]) == 1 and body["replicas"][0]["healthy"]:
                break
            assert time.monotonic() < deadline, body
            time.sleep(0.5)
        status, body, _ = s.request("POST", "/v1/completions", {"model": "stories", "prompt": "Once",
                                                               "max_tokens": 8, "temperature": 0})
        assert status == 200 and body["usage"]["completion_tokens"] == 8, body
    finally:
        code = s.stop(timeout=120)
    assert code == 0, s.log()[-3000:]
    # the cluster is still up (this connects to it) and holds nothing of the application
    probe = ("import json, ray\n"
             f"ray.init(address={head!r}, logging_level='ERROR')\n"
             "from ray import serve\n"
             "print('RESULT ' + json.dumps({'actors': sorted(a['name'] for a in "
             "ray.util.list_named_actors(all_namespaces=True)), "
             "'apps': sorted(serve.status().applications)}))\n")
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120,
                       env=_env(token=True))
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    assert out["apps"] == [], out
    assert [a for a in out["actors"] if a.startswith("SERVE_REPLICA")] == [], out
