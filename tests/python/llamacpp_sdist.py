"""llama.cpp's own test files, from the pinned llama-cpp-python sdist (the peer's source): its
vocabulary files with their token vectors (`vendor/llama.cpp/models/ggml-vocab-*`) and its chat
templates (`models/templates/*.jinja`). Fetched once with `pip download` (sha256 pinned), and only
those files are kept, in the specdec cache. The C++ tests read the same folder: CTest's fixture
`llamacpp_vocab_fetch` runs this file (`python3 llamacpp_sdist.py --record FILE`), and
scripts/test.sh fetches it before the suites.

pip runs with an isolated configuration first (no PIP_* variables, no pip.conf: PyPI itself),
so that a user's index or find-links cannot change what the tests get; only if that fails is the
user's configuration tried (a machine that reaches PyPI through a mirror). The sha256 decides."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

VERSION = "0.3.36"  # the pin of bench/setup_peer.sh
SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
PREFIX = f"llama_cpp_python-{VERSION}/vendor/llama.cpp/models/"
SKIP = 77  # the exit status CTest's fixture reads as "skipped" (no network, no cache)


def cache_dir() -> Path:
    root = Path(os.environ.get("SPECDEC_CACHE") or Path.home() / ".cache" / "specdec")
    return root / f"llama-cpp-python-{VERSION}-models"


def isolated_pip_env(env=None) -> dict:
    """`env` (default os.environ) without any PIP_* variable and with no pip configuration file:
    a pip child run with it sees neither the user's index, find-links nor proxy. Local addresses
    bypass any HTTP proxy (the tests' own servers listen on 127.0.0.1)."""
    clean = {k: v for k, v in (os.environ if env is None else env).items()
             if not k.startswith("PIP_")}
    clean["PIP_CONFIG_FILE"] = os.devnull
    for key in ("NO_PROXY", "no_proxy"):
        clean[key] = ",".join(x for x in (clean.get(key), "127.0.0.1", "localhost") if x)
    return clean


def _pip_download(dest: Path, isolated: bool) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
           "--no-deps", "--no-binary", ":all:", f"llama-cpp-python=={VERSION}", "-d", str(dest)]
    if importlib.util.find_spec("scikit_build_core") is not None:
        cmd.insert(-3, "--no-build-isolation")  # its metadata needs only the backend we have
    if isolated:
        cmd.insert(3, "--isolated")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900,
                          env=isolated_pip_env() if isolated else None)


def _download(tmp: Path) -> Path:
    errors = []
    for isolated in (True, False):
        proc = _pip_download(tmp, isolated)
        archives = list(tmp.glob("llama_cpp_python-*.tar.gz"))
        if proc.returncode == 0 and archives:
            return archives[0]
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        errors.append(f"{'isolated' if isolated else 'with your pip configuration'}: "
                      f"exit {proc.returncode}: {tail[0]}")
    raise RuntimeError(f"pip download llama-cpp-python=={VERSION} failed ({'; '.join(errors)})")


def _extract(archive: Path, staged: Path) -> None:
    digest = hashlib.sha256()
    with open(archive, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    if digest.hexdigest() != SHA256:
        raise RuntimeError(f"{archive.name}: sha256 {digest.hexdigest()}, expected {SHA256}")
    with tarfile.open(archive) as tar:
        for m in tar.getmembers():
            if not m.isfile() or not m.name.startswith(PREFIX):
                continue
            rel = m.name[len(PREFIX):]
            if not (rel.startswith("ggml-vocab-") or rel.startswith("templates/")) or ".." in rel:
                continue
            dest = staged / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            with tar.extractfile(m) as src, open(dest, "wb") as f:
                shutil.copyfileobj(src, f)
    (staged / ".complete").write_text(SHA256)


def models_dir(archive: Path | None = None) -> Path:
    """The sdist's models/ folder (vocabularies, vectors, templates), fetched on first use
    (`archive`: an already downloaded sdist to take them from instead)."""
    out = cache_dir()
    if (out / ".complete").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".sdist-", dir=out.parent))
    try:
        staged = tmp / "models"
        _extract(archive or _download(tmp), staged)
        if out.exists():  # a partial copy from an interrupted run
            shutil.rmtree(out)
        os.replace(staged, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def read_vectors(vocab: Path):
    """(text, token ids) pairs of a vocabulary's .inp / .out files, as llama.cpp's test reads them."""
    raw = Path(str(vocab) + ".inp").read_bytes().decode("utf-8")
    sep = "\n__ggml_vocab_test__\n"
    inputs, pos = [], 0
    while pos < len(raw):
        nxt = raw.find(sep, pos)
        if nxt < 0:
            inputs.append(raw[pos:])
            break
        inputs.append(raw[pos:nxt])
        pos = nxt + len(sep)
    outputs = Path(str(vocab) + ".out").read_text(encoding="utf-8").splitlines()
    assert len(inputs) == len(outputs), vocab
    return [(i, [int(x) for x in o.split()]) for i, o in zip(inputs, outputs)]


def main(argv=None) -> int:
    """Fetch (once) and print the folder; `--record FILE` also writes it to FILE (for CTest).
    Exit 77 with a one-line reason when it cannot be had (offline and not cached)."""
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--record", type=Path, help="write the folder's path to this file")
    ap.add_argument("--archive", type=Path, help="take the files from this downloaded sdist")
    args = ap.parse_args(argv)
    if args.record is not None and args.record.exists():
        args.record.unlink()
    try:
        folder = models_dir(args.archive)
    except (OSError, RuntimeError, subprocess.SubprocessError) as err:
        print(f"llamacpp_sdist: llama.cpp's vocabulary vectors are not available: {err}",
              file=sys.stderr)
        return SKIP
    if args.record is not None:
        args.record.parent.mkdir(parents=True, exist_ok=True)
        args.record.write_text(str(folder))
    print(folder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
