import json
import os
import subprocess
import sys

import specdec
from specdec.cli import main


def run(*args):
    return subprocess.run([sys.executable, "-m", "specdec", *args], capture_output=True, text=True)


def test_kv_plan_of_the_gemma3_example():
    out = run("kv-plan", "--example", "gemma3-270m")
    assert out.returncode == 0, out.stderr
    assert "2 KV-cache groups" in out.stdout
    assert "group 0: sliding_window (window 512)" in out.stdout
    assert "group 1: full_attention" in out.stdout
    assert "layers.5, 11, 17" in out.stdout


def test_kv_plan_json_and_drafter(capsys):
    assert main(["kv-plan", "--example", "smollm2-135m", "--budget", "256MiB", "--max-model-len", "4096",
                 "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["groups"]) == 1 and len(data["groups"][0]["layer_names"]) == 30
    assert data["budget_bytes"] == 256 << 20
    assert main(["kv-plan", "--example", "qwen2.5-coder-1.5b", "--drafter-example", "qwen2.5-coder-0.5b",
                 "--budget", "4GiB"]) == 0
    assert "[drafter]" in capsys.readouterr().out


def test_kv_plan_errors_are_clear(capsys):
    assert main(["kv-plan", "--example", "nope"]) == 2
    assert "--example = 'nope'" in capsys.readouterr().err
    assert main(["kv-plan", "--example", "gemma3-270m", "--budget", "1MiB"]) == 2
    err = capsys.readouterr().err
    assert "kv_cache_memory_bytes" in err and "largest max_model_len that fits" in err
    assert main(["kv-plan", "--example", "gemma3-270m", "--dtype", "fp8"]) == 2
    assert "dtype = 'fp8'" in capsys.readouterr().err
    assert main(["kv-plan", "--example", "gemma3-270m", "--budget", "1e30"]) == 2
    assert "--budget = '1e30'" in capsys.readouterr().err
    out = run("kv-plan", "--example", "gemma3-270m", "--max-model-len", "99999999999999999999")
    assert out.returncode == 2 and "outside [0, 1099511627776]" in out.stderr and "Traceback" not in out.stderr
    assert main(["kv-plan", "--list-examples"]) == 0
    assert "deepseek-v2-lite" in capsys.readouterr().out


def test_devices_command():
    out = run("devices", "--json")
    assert out.returncode == 0, out.stderr
    devs = json.loads(out.stdout)
    assert devs[0]["kind"] == "cpu" and devs[0]["platform"].startswith("specdec native (")  # the native device
    assert devs[1]["kind"] == "opencl" and devs[1]["name"] == specdec.devices()[0].name
    out = run("devices")
    assert "native (specdec's own CPU device" in out.stdout and "thread(s)" in out.stdout
    assert "OpenCL device(s)" in out.stdout and "default device" in out.stdout
    # without SPECDEC_DEVICE the default is what auto picks (the native device without an OpenCL GPU)
    env = {k: v for k, v in os.environ.items() if k != "SPECDEC_DEVICE"}
    out = subprocess.run([sys.executable, "-m", "specdec", "devices"], capture_output=True, text=True, env=env)
    default = [line for line in out.stdout.splitlines() if line.startswith("default device")]
    assert out.returncode == 0 and len(default) == 1, out.stdout + out.stderr
    assert ("): native: " in default[0]) == specdec._core.auto_is_native(), default


from paths import STORIES  # noqa: E402


def test_errors_name_the_flag_given(capsys):
    assert main(["backends", "--device-type", "toaster"]) == 2
    err = capsys.readouterr().err
    assert err == "specdec: error: --device-type = 'toaster': one of cpu, gpu, accelerator, other\n"
    assert main(["backends", "--device-type", "GPU"]) == 0
    assert "on a gpu device" in capsys.readouterr().out
    for budget in ("0", "1"):  # not even one token fits
        assert main(["inspect", STORIES, "--budget", budget]) == 2
        err = capsys.readouterr().err
        assert err.startswith("specdec: error: --budget") and err.count("\n") == 1, err
        assert "max_model_len = 0" not in err and "not even one token fits" in err
    assert main(["inspect", STORIES, "--budget", "lots"]) == 2
    assert capsys.readouterr().err.startswith("specdec: error: --budget = 'lots'")
    assert main(["kv-plan", "--model", STORIES, "--budget", "0"]) == 2
    assert capsys.readouterr().err.startswith("specdec: error: --budget")
