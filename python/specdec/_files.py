"""Every file specdec writes, the model cache's way: the data goes to a fresh temporary file created
exclusively beside the target (``mkstemp``: never through a symlink planted there) and is moved
into place with ``os.replace`` (readers see the old file or the new one, never part of one). The
temporary file is removed on any failure, KeyboardInterrupt included.

A file the user names (``--out``) must be a regular file or a new name in an existing folder: a
symlink, directory, device, FIFO or socket there is refused with a one-line error naming the
flag (a symlink is neither followed nor replaced: name the file it points to), and a missing
folder is not created (a mistyped path must not grow a tree).

Abort hooks: the CLI leaves at once on Ctrl-C or SIGTERM (``os._exit``: the command's thread may
be inside a device step), so nothing else gets to run its ``finally`` blocks. What must not
outlive the process (a temporary file, a child process and its group) registers a hook with
``on_abort`` while it exists; the CLI runs them before it exits.
"""

from __future__ import annotations

import itertools
import os
import stat as _stat
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Dict, Iterator, Optional, Union

__all__ = ["check_output_file", "file_kind", "output_folder", "write_file_atomic", "on_abort",
           "run_abort_hooks"]

PathLike = Union[str, "os.PathLike[str]"]


def _error(field: str, path: PathLike, allowed: str) -> ValueError:
    return ValueError(f"{field} = {os.fspath(path)!r}: {allowed}")


def file_kind(mode: int) -> str:
    """'a directory', 'a FIFO (named pipe)', ... for a st_mode that is not a regular file."""
    return ("a symbolic link" if _stat.S_ISLNK(mode) else "a directory" if _stat.S_ISDIR(mode)
            else "a FIFO (named pipe)" if _stat.S_ISFIFO(mode) else "a character device"
            if _stat.S_ISCHR(mode) else "a block device" if _stat.S_ISBLK(mode)
            else "a socket" if _stat.S_ISSOCK(mode) else "not a regular file")


def check_output_file(path: PathLike, field: str = "--out", *, create_folder: bool = False) -> Path:
    """``path`` as a Path when it is a regular file or a new name in an existing folder;
    ValueError naming ``field`` otherwise. Nothing is created, except the folder (and its
    parents) with ``create_folder`` (for a default such as ``bench/out``)."""
    p = Path(os.fspath(path))
    if create_folder:
        output_folder(p.parent, field, parents=True)
    try:
        mode = os.lstat(p).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as err:
        raise _error(field, p, f"cannot be checked ({err.strerror})") from None
    if mode is not None and not _stat.S_ISREG(mode):
        hint = (" (specdec never writes through a link: name the file itself)"
                if _stat.S_ISLNK(mode) else "")
        raise _error(field, p, f"is {file_kind(mode)}; a regular file or a new file name{hint}")
    folder = p.parent
    if not folder.is_dir():
        raise _error(field, p, f"the folder {str(folder)!r} does not exist or is not a folder "
                               "(create it first)")
    return p


def output_folder(path: PathLike, field: str = "--out", *, parents: bool = False) -> Path:
    """The folder ``path``, created when missing: its parent must exist unless ``parents``."""
    p = Path(os.fspath(path))
    if p.is_dir():
        return p
    if p.exists() or p.is_symlink():
        raise _error(field, p, "is not a folder; an output folder (existing, or a new name)")
    if not parents and not p.parent.is_dir():
        raise _error(field, p, f"the folder {str(p.parent)!r} does not exist (create it first)")
    try:
        p.mkdir(parents=parents, exist_ok=True)
    except OSError as err:
        raise _error(field, p, f"cannot be created ({err.strerror})") from None
    return p


def write_file_atomic(path: PathLike, data: Union[bytes, str], field: Optional[str] = "--out", *,
                      mode: Optional[int] = None) -> Path:
    """Writes ``data`` (str: UTF-8) to ``path`` through a fresh temporary file moved into place.

    ``field`` names the flag or setting that gave ``path``: the target is checked first
    (``check_output_file``) and an OSError becomes a ValueError naming it. ``field=None``: a file
    of specdec's own (the model cache's stamps): whatever is at ``path`` is replaced (a symlink
    itself, never what it points to) and OSError propagates. ``mode``: default the replaced
    file's permissions, else what ``open`` would give a new file (0666 less the umask).
    """
    p = check_output_file(path, field) if field is not None else Path(os.fspath(path))
    if mode is None:
        try:
            st = os.lstat(p)
            mode = _stat.S_IMODE(st.st_mode) if _stat.S_ISREG(st.st_mode) else _new_file_mode()
        except OSError:
            mode = _new_file_mode()
    raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
    try:
        _write_replace(p, raw, mode)
    except OSError as err:
        if field is None:
            raise
        raise _error(field, p, f"cannot be written ({err.strerror or err})") from None
    return p


def _new_file_mode() -> int:
    """0666 less the process's umask, read without changing it (os.umask would, for every
    thread); 0644 where /proc does not say."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o644


def _write_replace(p: Path, raw: bytes, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)  # O_EXCL

    def remove() -> None:
        try:
            os.unlink(tmp)
        except OSError:
            pass

    try:
        with on_abort(remove):
            os.fchmod(fd, mode)  # mkstemp: 0600
            with os.fdopen(fd, "wb") as f:
                fd = -1
                f.write(raw)
            os.replace(tmp, p)  # atomic; replaces a symlink at p, never follows it
    except BaseException:
        if fd >= 0:
            os.close(fd)
        remove()
        raise


# ---------------------------------------------------------------- abort hooks
_hooks: Dict[int, Callable[[], None]] = {}
_hooks_lock = threading.Lock()
_hook_ids = itertools.count()


@contextmanager
def on_abort(cleanup: Callable[[], None]) -> Iterator[None]:
    """Registers ``cleanup`` for ``run_abort_hooks`` while the block runs (it must be safe to
    call from another thread, and more than once)."""
    key = next(_hook_ids)
    with _hooks_lock:
        _hooks[key] = cleanup
    try:
        yield
    finally:
        with _hooks_lock:
            _hooks.pop(key, None)


def run_abort_hooks() -> None:
    """Runs every registered cleanup, the latest first (a child process ends before its
    folder is removed); errors are ignored: the process is leaving."""
    with _hooks_lock:
        hooks = [_hooks.pop(k) for k in sorted(_hooks, reverse=True)]
    for cleanup in hooks:
        try:
            cleanup()
        except Exception:  # noqa: BLE001 - best effort on the way out
            pass
