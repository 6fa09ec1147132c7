"""Child processes that never outlive their caller: each runs in its own process group (a new
session), which is ended (SIGTERM, then SIGKILL after a grace period) on every exit path: when
the call returns or raises (KeyboardInterrupt included) and, through ``end`` from another thread,
when the CLI leaves at once on Ctrl-C or SIGTERM (``specdec._files.on_abort``). A terminal's
Ctrl-C no longer reaches such a child by itself (its group is not the terminal's), so ending it
is the caller's job, done here.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from typing import List, Optional

__all__ = ["ChildProcesses", "end_process_group"]


class ChildProcesses:
    """Runs commands one at a time (``run``); ``end`` ends the running one, from any thread, and
    no new one starts after it."""

    def __init__(self, grace_s: float = 1.0) -> None:
        self.grace_s = grace_s
        self._lock = threading.Lock()
        self._proc: Optional[subprocess.Popen] = None
        self._ended = False

    def run(self, cmd: List[str]) -> "subprocess.CompletedProcess[str]":
        """Runs ``cmd`` (stdin from /dev/null, output captured as text) to completion."""
        with self._lock:
            if self._ended:
                raise ChildProcessError(f"{cmd[0]}: not started, the work was ended")
            proc = self._proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True, start_new_session=True)
        try:
            out, err = proc.communicate()
        finally:
            end_process_group(proc, self.grace_s)  # nothing to do when it exited by itself
            with self._lock:
                self._proc = None
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)

    def end(self) -> None:
        with self._lock:
            self._ended = True
            proc = self._proc
        if proc is not None:
            end_process_group(proc, self.grace_s)


def end_process_group(proc: subprocess.Popen, grace_s: float) -> None:
    """Ends the process group ``proc`` leads (started with start_new_session): SIGTERM, SIGKILL
    after ``grace_s``; waits for ``proc``."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        if proc.poll() is not None:  # the leader is gone: what it left in its group goes too
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait_s)
            return
        except subprocess.TimeoutExpired:
            pass
