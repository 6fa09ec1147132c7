"""Defaults that fit the machine (issue 20, finding 4): the KV cache is sized from what the
requests can need, capped by a share of the device's memory; a model whose whole context does not
fit gets a shorter max_model_len with a one-line notice; an explicit length that cannot fit is a
clear error; and every example in the README runs as written."""

import logging
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import specdec
from specdec.memory import size_kv_cache

ROOT = Path(__file__).resolve().parents[2]
from conftest import user_env  # noqa: E402
from paths import STORIES  # noqa: E402
README = (ROOT / "README.md").read_text(encoding="utf-8")
GiB = 1 << 30


def fake_device(gib: float, kind: str = "gpu"):
    return SimpleNamespace(global_mem_bytes=int(gib * GiB), type=kind, name="fake")


def test_a_tiny_model_gets_a_tiny_kv_cache():
    """stories260K used to reserve and touch 1 GiB of KV (1.16 GB RSS for a 1 MB model)."""
    # the peak resident memory of this process image (VmHWM; ru_maxrss would count the forked
    # pytest process it started as)
    code = ("import re, specdec; llm = specdec.LLM(%r, progress=False); "
            "hwm = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1); "
            "print(llm.kv_sizing.kv_cache_memory_bytes, llm.runner.max_model_len, hwm)" % STORIES)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    kv_bytes, length, maxrss_kib = map(int, out.stdout.split())
    config = specdec.load_model_config(STORIES)
    assert length == config.context_length
    assert kv_bytes < 16 * 2**20  # 16 requests of the whole context: about 1.4 MiB
    assert maxrss_kib < 600 * 1024, f"{maxrss_kib / 1024:.0f} MiB resident for a 1 MB model"


def _configs(real_model):
    return (specdec.load_model_config(real_model("qwen2.5-coder-1.5b-instruct-q4_k_m")),
            specdec.load_model_config(real_model("qwen2.5-coder-0.5b-instruct-q4_k_m")))


def _size(target, drafter, device, **kw):
    args = dict(max_model_len=0, drafter_max_model_len=0, kv_cache_memory_bytes=None,
                memory_utilization=None, device=device, weights_bytes=GiB, block_size=16,
                dtype="f16", drafter_dtype="f16", max_num_seqs=16, max_num_batched_tokens=512)
    args.update(kw)
    return size_kv_cache(target, drafter, **args)


def test_sizing_from_requests_capped_by_memory(real_model):
    target, drafter = _configs(real_model)
    # plenty of memory: 16 whole-context requests of both models, no more
    big = _size(target, drafter, fake_device(80))
    assert big.max_model_len == 32768 and big.notice is None
    assert big.kv_cache_memory_bytes == 16 * big.request_bytes
    assert 1.2 * GiB < big.request_bytes < 1.35 * GiB  # the issue's 1280.6 MiB for both models
    # a few requests: fewer bytes
    few = _size(target, drafter, fake_device(80), max_num_seqs=2)
    assert few.kv_cache_memory_bytes == 2 * few.request_bytes
    # 4 GiB at 0.9 less 1 GiB of weights: capped, the whole context still fits one request
    capped = _size(target, drafter, fake_device(4))
    assert capped.max_model_len == 32768
    assert capped.kv_cache_memory_bytes == int(4 * GiB * 0.9) - GiB
    # a CPU device takes half of its memory by default
    cpu = _size(target, drafter, fake_device(8, "cpu"))
    assert cpu.cap_bytes <= int(8 * GiB * 0.5) - GiB


def test_a_context_that_does_not_fit_is_lowered_with_a_notice(real_model):
    target, drafter = _configs(real_model)
    s = _size(target, drafter, fake_device(2))  # 0.8 GiB of KV left for both models
    assert 16384 < s.max_model_len < 32768
    assert s.request_bytes <= s.cap_bytes
    assert s.notice and "\n" not in s.notice and f"lowered to {s.max_model_len}" in s.notice
    # one block more would not fit
    longer = _size(target, drafter, fake_device(80), max_model_len=s.max_model_len + 16)
    assert longer.request_bytes > s.cap_bytes


def test_an_explicit_length_that_cannot_fit_is_an_error(real_model):
    target, drafter = _configs(real_model)
    with pytest.raises(ValueError, match=r"max_model_len = 32768: one request .* more than"):
        _size(target, drafter, fake_device(2), max_model_len=32768)
    with pytest.raises(ValueError, match=r"max_model_len = 32768: .*kv_cache_memory_bytes"):
        _size(target, drafter, fake_device(80), max_model_len=32768, kv_cache_memory_bytes=GiB)
    with pytest.raises(ValueError, match="memory_utilization = 0.1"):
        _size(target, drafter, fake_device(4), memory_utilization=0.1)


def test_llm_lowers_the_length_to_an_explicit_budget_with_a_notice(caplog):
    config = specdec.load_model_config(STORIES)
    one = specdec.memory._request_bytes(config, config.context_length, 16, "f16", 512)
    with caplog.at_level(logging.WARNING, logger="specdec"):
        llm = specdec.LLM(STORIES, kv_cache_memory_bytes=one // 2, progress=False)
    assert 2 <= llm.runner.max_model_len < config.context_length
    assert any("max_model_len lowered to" in r.getMessage() for r in caplog.records)
    out = llm.generate("Once upon a time", specdec.SamplingParams(temperature=0, max_tokens=4))
    assert len(out[0].outputs[0].token_ids) == 4
    with pytest.raises(ValueError, match="max_model_len = 128"):
        specdec.LLM(STORIES, kv_cache_memory_bytes=one // 2, max_model_len=128, progress=False)
    with pytest.raises(ValueError, match="memory_utilization"):
        specdec.LLM(STORIES, memory_utilization=1.5, progress=False)


def test_the_readme_python_example_runs_as_written(real_model, tmp_path):
    """The README's Python block, run literally (it fetches and runs the Qwen2.5-Coder pair)."""
    for name in ("qwen2.5-coder-1.5b-instruct-q4_k_m", "qwen2.5-coder-0.5b-instruct-q4_k_m"):
        real_model(name)  # fetched once for the whole suite
    blocks = re.findall(r"```python\n(.*?)```", README, re.S)
    assert blocks, "the README has no Python example"
    for block in blocks:
        server = None
        if "OpenAI(base_url=" in block:  # the client example: against the README's serve command
            server, block = _readme_server(block, tmp_path)
        try:
            script = tmp_path / "example.py"
            script.write_text(block, encoding="utf-8")
            out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                                 cwd=tmp_path, timeout=900, env=user_env())
            assert out.returncode == 0, out.stderr[-3000:]
            assert out.stdout.strip(), "the example printed nothing"
        finally:
            if server is not None:
                assert server.stop() == 0, server.log()[-3000:]


def _readme_server(block, tmp_path):
    """Starts the README's `specdec serve` command as written (on a free port, and with a context
    of 2048 tokens so that the KV cache is not the whole machine's) and points the block at it."""
    from serve_helpers import ServerProcess
    m = re.search(r"\.venv/bin/specdec serve (.*?)\n\n", README, re.S)
    assert m, "the README shows no `specdec serve` command"
    args = shlex.split(m.group(1).replace("\\\n", " "))
    server = ServerProcess(args + ["--max-model-len", "2048"], str(tmp_path / "serve.log"), timeout=900,
                           env={"SPECDEC_DEVICE": user_env().get("SPECDEC_DEVICE")})
    return server, block.replace("127.0.0.1:8000", f"127.0.0.1:{server.port}")


def _readme_commands():
    """The CLI lines of the README's Use section that are complete (no '...', no placeholder)."""
    section = README.split("## Use", 1)[1].split("```", 1)[0]
    lines, current = [], ""
    for raw in section.splitlines():
        line = raw.strip()
        if not line:
            continue
        current = f"{current} {line}" if current else line
        if current.rstrip().endswith("\\"):
            current = current.rstrip()[:-1]
            continue
        try:
            argv = shlex.split(current, comments=True)
        except ValueError:  # a quoted argument goes on on the next line
            continue
        lines.append((current, argv))
        current = ""
    cmds = []
    for line, argv in lines:
        if not line.startswith(".venv/bin/specdec"):
            continue
        if any("..." in a or a.startswith("path/to") for a in argv):
            continue
        cmds.append(argv)
    return cmds


def test_the_readme_commands_run_as_written(real_model):
    cmds = _readme_commands()
    assert len(cmds) >= 10, cmds
    for name in ("qwen2.5-coder-1.5b-instruct-q4_k_m", "qwen2.5-coder-0.5b-instruct-q4_k_m",
                 "gemma-3-270m-q4_k_m"):
        real_model(name)
    launcher = ROOT / ".venv" / "bin" / "specdec"
    for argv in cmds:
        argv = [str(launcher) if launcher.exists() else "specdec", *argv[1:]]
        if argv[1] == "generate":
            argv += ["--max-tokens", "16"]  # as written, shorter: the test checks it runs
        out = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=900, env=user_env())
        assert out.returncode == 0, (argv, out.stderr[-3000:])


@pytest.mark.parametrize("drafter,message", [
    ("bad", "bad magic"),
    ("gemma-3-270m-q4_k_m", "target's vocabulary"),
])
def test_drafter_file_errors_name_speculative_config_model(real_model, tmp_path, drafter, message):
    """A drafter that is not a GGUF, or has another vocabulary, is named as the drafter."""
    if drafter == "bad":
        path = tmp_path / "bad.gguf"
        path.write_bytes(b"NOPE" + bytes(96))
        drafter = str(path)
    else:
        real_model(drafter)
    with pytest.raises(ValueError, match=rf"^speculative_config.model = '{re.escape(drafter)}': .*{message}"):
        specdec.LLM(STORIES, progress=False, speculative_config={
            "method": "draft_model", "model": drafter, "num_speculative_tokens": 2})


def _short_context_copy(tmp_path, n):
    from test_robustness import _rewritten
    return str(_rewritten(STORIES, tmp_path / f"stories-ctx{n}.gguf", {"llama.context_length": n}))


def test_a_drafter_with_a_shorter_context_does_not_shorten_the_target(tmp_path):
    short = _short_context_copy(tmp_path, 64)
    params = specdec.SamplingParams(temperature=0, max_tokens=100, ignore_eos=True)
    want = specdec.LLM(STORIES, progress=False).generate("Once upon a time", params)[0]
    for extra in ({}, {"max_model_len": 64}):
        llm = specdec.LLM(STORIES, progress=False, speculative_config={
            "method": "draft_model", "model": short, "num_speculative_tokens": 3, **extra})
        assert llm.runner.max_model_len == 128 and llm.drafter.max_model_len == 64
        out = llm.generate("Once upon a time", params)[0]  # past 64 tokens: no drafts, lossless
        assert out.outputs[0].token_ids == want.outputs[0].token_ids
        assert out.metrics["num_drafts"] > 0


@pytest.mark.parametrize("extra", [{"draft_kv_cache_memory_bytes": "64MiB"},
                                   {"draft_kv_cache_fraction": 0.99}])
def test_the_drafters_own_share_is_added_to_the_automatic_size(extra):
    llm = specdec.LLM(STORIES, progress=False, speculative_config={
        "method": "draft_model", "model": STORIES, "num_speculative_tokens": 3, **extra})
    assert llm.runner.max_model_len == 128
    assert llm.kv_split["target_bytes"] > 0
    assert llm.kv_split["drafter_bytes"] >= (64 << 20 if "draft_kv_cache_memory_bytes" in extra else 1)
