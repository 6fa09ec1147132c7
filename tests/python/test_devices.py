import pytest

import specdec


def test_devices_lists_the_pocl_device():
    devs = specdec.devices()
    assert devs, "no OpenCL device found"
    d = devs[0]
    assert d.index == 0
    assert d.name and d.platform and d.version.startswith("OpenCL")
    assert d.compute_units >= 1 and d.global_mem_bytes > 0 and d.max_alloc_bytes > 0
    assert d.type in ("cpu", "gpu", "accelerator", "other")
    info = d.as_dict()
    assert info["name"] == d.name and info["compute_units"] == d.compute_units
    assert d.name in repr(d)
    if any("Portable Computing Language" in x.platform for x in devs):
        assert any(x.type == "cpu" for x in devs)


def test_select_device_by_argument_and_environment(monkeypatch):
    first = specdec.devices()[0]
    assert specdec.select_device("0").name == first.name
    assert specdec.select_device(first.name[:5].upper()).name == first.name
    with pytest.raises(ValueError, match="device = 'nope-xyz'"):
        specdec.select_device("nope-xyz")
    monkeypatch.setenv("SPECDEC_DEVICE", "nope-xyz")
    with pytest.raises(ValueError, match="SPECDEC_DEVICE"):
        specdec.Context()
    monkeypatch.setenv("SPECDEC_DEVICE", "0")
    assert specdec.Context().device.name == first.name


def test_build_errors_carry_the_build_log(context):
    context.build("ok", "__kernel void f(__global int* x) { x[0] = 1; }")
    with pytest.raises(specdec.OpenCLError, match="CL_BUILD_PROGRAM_FAILURE") as info:
        context.build("broken", "__kernel void f(__global int* x) { x[0] = not_declared; }")
    assert "not_declared" in str(info.value)
    assert isinstance(info.value, RuntimeError)
    assert "kv_cache" in specdec.kernel_programs()
