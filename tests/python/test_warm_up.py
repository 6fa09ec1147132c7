"""No kernel is compiled inside a request: LLM warms its runners up at load.

OpenCL builds a kernel at its first launch; PoCL builds a work-group function per kernel and local
size and keeps the binary in its cache directory (POCL_CACHE_DIR). Each case runs in a child
process with an empty cache: it loads a model (and a drafter), lists the binaries, serves requests
of every shape a user's would have (prompts of several lengths, batched, greedy and sampled,
decodes past one split of split-KV attention), and lists them again: nothing may have been added.
Before the fix the runner's launches let PoCL pick local sizes that followed the token count, and
14 of 31 binaries of a stories260K run were built inside its requests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import specdec
from specdec.testing import write_random_model

ROOT = Path(__file__).resolve().parents[2]
from paths import STORIES_PATH as STORIES  # noqa: E402

CHILD = r"""
import glob, json, sys, time
import specdec
cache, model, spec, max_model_len = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), int(sys.argv[4])
extra = json.loads(sys.argv[5])
def binaries():
    return sorted(glob.glob(f"{cache}/**/*.so", recursive=True))
llm = specdec.LLM(model, max_model_len=max_model_len, kv_cache_memory_bytes=64 << 20,
                  max_num_seqs=4, progress=False, speculative_config=spec, **extra)
after_load = binaries()
long_ids = [3 + (i * 7) % 200 for i in range(max_model_len - 40)]  # decodes past one attention split
prompts = [{"prompt_token_ids": [5, 6, 7]}, {"prompt_token_ids": list(range(3, 40))},
           {"prompt_token_ids": long_ids}]
for temperature in (0.0, 0.9):
    params = specdec.SamplingParams(max_tokens=24, temperature=temperature, seed=1, ignore_eos=True)
    llm.generate(prompts, params)          # batched: prefill chunks beside decodes and verifies
    llm.generate(prompts[1:2], params)     # alone
after_requests = binaries()
print(json.dumps({"after_load": len(after_load), "warm_up_seconds": llm.warm_up_seconds,
                  "new": [p[len(cache):] for p in after_requests if p not in set(after_load)]}))
"""


def _assert_nothing_built(out: dict) -> None:
    assert out["after_load"] > 0, "no binaries in the cache: is POCL_CACHE_DIR honoured?"
    assert out["new"] == [], f"kernels built inside requests: {out['new']}"


def _require_pocl(context) -> None:
    # The check reads PoCL's on-disk kernel cache; other OpenCL runtimes (a GPU's, Intel's CPU
    # runtime) keep none there. Every CI device here is PoCL, so the cases run there.
    if not _pocl(context):
        pytest.skip("the check reads PoCL's kernel cache directory")


def _pocl(context) -> bool:
    return "portable computing language" in context.device.platform.lower()


def _run(tmp_path: Path, model: str, spec, max_model_len: int, extra: dict) -> dict:
    cache = tmp_path / "pocl-cache"
    cache.mkdir()
    env = dict(os.environ, POCL_CACHE_DIR=str(cache))
    proc = subprocess.run([sys.executable, "-c", CHILD, str(cache), model, json.dumps(spec),
                           str(max_model_len), json.dumps(extra)], env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("case", ["stories-draft_model", "qwen2-q4k-ngram", "gemma3-q6k-suffix",
                                  "llama-q8-small-chunks", "stories-dflash", "stories-layer_skip",
                                  "stories-hybrid"])
def test_no_kernel_is_compiled_inside_a_request(context, tmp_path, case):
    _require_pocl(context)
    extra = {}
    if case == "stories-draft_model":
        model, max_len = str(STORIES), 128  # F32 weights, its own drafter (draft_model path)
        spec = {"method": "draft_model", "model": model, "num_speculative_tokens": 3}
    elif case == "stories-dflash":  # the drafter trained here: its context path and non-causal block
        model, max_len = str(STORIES), 128
        spec = {"method": "dflash", "model": str(ROOT / "data" / "dflash-stories260k"), "num_speculative_tokens": 7}
    elif case == "stories-layer_skip":  # early exits of the target
        model, max_len = str(STORIES), 128
        spec = {"method": "layer_skip", "num_speculative_tokens": 3}
    elif case == "stories-hybrid":
        model, max_len = str(STORIES), 128
        spec = {"method": "hybrid", "num_speculative_tokens": 3, "proposers": [
            {"method": "suffix"}, {"method": "draft_model", "model": model}]}
    elif case == "qwen2-q4k-ngram":
        model, max_len = write_random_model(tmp_path / "q.gguf", "qwen2", "Q4_K"), 320
        spec = {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_min": 1}
    elif case == "gemma3-q6k-suffix":
        model, max_len = write_random_model(tmp_path / "g.gguf", "gemma3", "Q6_K"), 320
        spec = {"method": "suffix", "num_speculative_tokens": 4}
    else:  # prefill chunks of 32 tokens: the warm-up's chunk follows max_num_batched_tokens
        model, max_len = write_random_model(tmp_path / "l.gguf", "llama", "Q8_0"), 320
        spec = {"method": "ngram", "num_speculative_tokens": 3}
        extra = {"max_num_batched_tokens": 32}
    _assert_nothing_built(_run(tmp_path, model, spec, max_len, extra))


# A child process on a runner (no LLM): the same cache check around a script `body` that has
# `runner`, `Req` and `binaries()` at hand, records `after_warm_up` and leaves the rest to the report.
RUNNER_PRELUDE = r"""
import glob, json, re, sys
import specdec
from specdec import _core
from specdec._core import StepRequest as Req
cache, model = sys.argv[1], sys.argv[2]
def binaries():
    return sorted(glob.glob(f"{cache}/**/*.so", recursive=True))
ctx = specdec.Context()
"""
RUNNER_REPORT = r"""
print(json.dumps({"after_load": len(after_warm_up),
                  "new": [p[len(cache):] for p in binaries() if p not in set(after_warm_up)]}))
"""


def _check_runner_child(context, tmp_path: Path, model: str, body: str) -> None:
    _require_pocl(context)
    cache = tmp_path / "pocl-cache"
    cache.mkdir()
    proc = subprocess.run([sys.executable, "-c", RUNNER_PRELUDE + body + RUNNER_REPORT, str(cache),
                           model], env=dict(os.environ, POCL_CACHE_DIR=str(cache)),
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    _assert_nothing_built(json.loads(proc.stdout.strip().splitlines()[-1]))


BUSY_KV = r"""
# KV for 1120 tokens (70 blocks of 16 tokens, 1032 bytes a token), max_model_len 1100; three
# requests holding 720 of them (each shorter than one attention split) while the runner warms up
# leave too little for the warm-up's decode at position 1024
runner = _core.ModelRunner(ctx, model, "", 1100, 70 * 16 * 1032, max_num_batched_tokens=128)
holds = [f"hold{j}" for j in range(3)]
for j, h in enumerate(holds):
    runner.step([Req(h, [3 + (i * 7 + j) % 200 for i in range(120)], num_computed_tokens=0)])
    runner.step([Req(h, [3 + (i * 5 + j) % 200 for i in range(120)], num_computed_tokens=120)])
runner.warm_up()
after_warm_up = binaries()
for h in holds:
    runner.free(h)
n = 300  # a request past one split of split-KV attention (256 keys)
for c in (0, 128, 256):
    runner.step([Req("r", [3 + i % 200 for i in range(min(128, n - c))], num_computed_tokens=c)])
for k in range(8):
    runner.step([Req("r", [5], num_computed_tokens=n + k)])
"""


def test_warm_up_decodes_past_a_split_when_the_kv_cache_is_busy(context, tmp_path):
    """The warm-up's late decode sits at position 1024; when one request of that length does not
    fit the free KV blocks (a warm-up while requests hold most of them) it runs at a shorter
    position that still splits. Before, it was skipped, and the next request past 256 positions
    built the split-KV merge kernel inside the request."""
    model = write_random_model(tmp_path / "q.gguf", "qwen2", "Q4_K")  # OCL_FLASH (head 64)
    _check_runner_child(context, tmp_path, model, BUSY_KV)


SMALLEST_KV = r"""
need = None
try:  # the smallest KV budget the runner takes for one request of max_model_len 1100
    _core.ModelRunner(ctx, model, "", 1100, 1024)
except Exception as e:
    need = int(re.search(r"needs (\d+) bytes", str(e)).group(1))
assert need is not None, "a 1 KiB KV budget was accepted"
runner = _core.ModelRunner(ctx, model, "", 1100, need, max_num_batched_tokens=128)
runner.warm_up()
after_warm_up = binaries()
n = 300  # past one split of split-KV attention in the global layers
for c in range(0, n, 100):
    runner.step([Req("r", [3 + (i + c) % 200 for i in range(100)], num_computed_tokens=c)])
for k in range(8):
    runner.step([Req("r", [5], num_computed_tokens=n + k)])
"""


def test_warm_up_of_a_sliding_window_model_on_the_smallest_kv_budget(context, tmp_path):
    """Gemma 3 layout (sliding-window layers beside global ones) with the KV budget of exactly
    one request: the warm-up's long decode (its slots taken in prefill-sized steps, freeing the
    window's old blocks as a request does) still runs, and no request builds a kernel. (Here the
    planner's budget also held the slots asked for at once; the steps matter where it would not.)"""
    model = write_random_model(tmp_path / "g.gguf", "gemma3", "Q4_K")
    _check_runner_child(context, tmp_path, model, SMALLEST_KV)
