"""llama.cpp's own test files, from the pinned llama-cpp-python sdist (the peer's source): its
vocabulary files with their token vectors (`vendor/llama.cpp/models/ggml-vocab-*`) and its chat
templates (`models/templates/*.jinja`). Fetched once with `pip download` (sha256 pinned), and only
those files are kept, in the specdec cache."""

from __future__ import annotations

import hashlib
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


def cache_dir() -> Path:
    root = Path(os.environ.get("SPECDEC_CACHE") or Path.home() / ".cache" / "specdec")
    return root / f"llama-cpp-python-{VERSION}-models"


def models_dir() -> Path:
    """The sdist's models/ folder (vocabularies, vectors, templates), fetched on first use."""
    out = cache_dir()
    if (out / ".complete").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".sdist-", dir=out.parent))
    try:
        # pip, as the models are fetched (the index the machine is configured for)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check",
                        "--no-deps", "--no-binary", ":all:", "--no-build-isolation",
                        f"llama-cpp-python=={VERSION}", "-d", str(tmp)], check=True, timeout=900)
        archive = next(tmp.glob("llama_cpp_python-*.tar.gz"))
        digest = hashlib.sha256()
        with open(archive, "rb") as f:
            while chunk := f.read(1 << 20):
                digest.update(chunk)
        if digest.hexdigest() != SHA256:
            raise RuntimeError(f"{archive.name}: sha256 {digest.hexdigest()}, expected {SHA256}")
        staged = tmp / "models"
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
