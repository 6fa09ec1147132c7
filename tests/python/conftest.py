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
