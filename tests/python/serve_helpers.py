"""A real ``specdec serve`` process on 127.0.0.1 for the server tests and the load benchmark."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional, Tuple


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    def __init__(self, args: List[str], log_path: str, timeout: float = 180.0,
                 env: Optional[Dict[str, str]] = None) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "specdec", "serve", "--port", str(self.port), "--log-level", "warning"] + args,
            stdout=self._log, stderr=subprocess.STDOUT,
            env={k: v for k, v in {**os.environ, **(env or {})}.items() if v is not None})  # None: unset
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"specdec serve exited with {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"specdec serve did not answer /health in {timeout} s:\n{self.log()}")
            time.sleep(0.3)

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        with open(self.log_path) as f:
            return f.read()

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, then SIGKILL past `timeout` seconds; the exit status."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode

    def request(self, method: str, path: str, body: Any = None, raw: Optional[bytes] = None,
                headers: Optional[Dict[str, str]] = None) -> Tuple[int, Dict[str, Any], str]:
        """(status, JSON body or {}, text) of one request; errors are returned, not raised."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                text = r.read().decode()
                status = r.status
        except urllib.error.HTTPError as e:
            text = e.read().decode()
            status = e.code
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = {}
        return status, parsed, text

    def metrics(self) -> Dict[str, float]:
        """Every sample of /metrics, parsed with prometheus_client's parser: name{labels} -> value."""
        from prometheus_client.parser import text_string_to_metric_families
        _, _, text = self.request("GET", "/metrics")
        out = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()) if k != "model_name")
                out[s.name + (f"{{{labels}}}" if labels else "")] = s.value
        return out
