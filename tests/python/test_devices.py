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


def test_context_keeps_its_api_over_the_device(context):
    """_core.Context binds device::Device (docs/device_seam.md, step 6) with the API it had over
    the OpenCL context: device info, builds and their cache, finish, profile, quantisation path."""
    assert context.device.type in ("cpu", "gpu", "accelerator", "other")
    assert context.device.global_mem_bytes > 0
    before = context.num_cached_programs
    context.build("context_api_probe", "__kernel void f(__global int* x) { x[0] = 2; }")
    assert context.num_cached_programs == before + 1
    assert isinstance(context.build_logs(), list)
    context.finish()
    profile = context.take_profile()
    assert set(profile) == {"kernels", "span_us", "dropped", "pool"}
    assert profile["pool"] is None  # the native device's thread pool only
    assert isinstance(context.profiling, bool)
    assert specdec._core.quant_isa(context) in specdec._core.quant_isas(context)
