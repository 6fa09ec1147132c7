import pytest

import specdec


@pytest.fixture(scope="session")
def context():
    if not specdec.devices():
        pytest.fail("no OpenCL device: install pocl-opencl-icd (scripts/setup.sh does)")
    return specdec.Context()
