"""`specdec bench`: plain decoding and every speculative method at several k, plus adaptive
speculation, on a built-in prompt set (code generation, code editing, chat, summarisation), with
llama.cpp's plain and speculative modes on the same prompts in the same run when its tools are
built (bench/setup_peer_tools.sh). Writes JSON and PNG plots (matplotlib).

Every speculative output is checked token for token against plain decoding in the run (greedy).
Speeds are decode tokens/s of one request at a time (batch 1), after a warm-up generation.
"""

from __future__ import annotations

import io
import json
import os
import platform
import re
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Callable, Dict, List, Optional, Sequence

import numpy as np

import specdec
from specdec import _core, _json
from specdec._files import check_output_file, on_abort, output_folder, write_file_atomic
from specdec._process import ChildProcesses
from specdec.engine import LLMEngine

TARGET = "qwen2.5-coder-1.5b-instruct-q4_k_m"
DRAFTER = "qwen2.5-coder-0.5b-instruct-q4_k_m"
LLAMA_CPP_PYTHON_PIN = "0.3.36"  # the sdist whose vendor/llama.cpp the peer tools are built from

_CODE = '''def merge_intervals(intervals):
    """Merge overlapping [start, end] intervals and return them sorted."""
    if not intervals:
        return []
    intervals = sorted(intervals, key=lambda iv: iv[0])
    merged = [list(intervals[0])]
    for start, end in intervals[1:]:
        last = merged[-1]
        if start <= last[1]:
            last[1] = max(last[1], end)
        else:
            merged.append([start, end])
    return merged


def test_merge_intervals():
    assert merge_intervals([[1, 3], [2, 6], [8, 10]]) == [[1, 6], [8, 10]]
    assert merge_intervals([]) == []
'''

_STORY = (
    "The lighthouse keeper had lived alone on the rock for eleven winters. Every evening he climbed "
    "the hundred and twelve steps, trimmed the wick, wound the clockwork that turned the great lens, "
    "and wrote three lines in the logbook: the wind, the sea, and the ships he had seen. One night in "
    "November the lamp would not light. He checked the oil, the wick and the glass, and found nothing "
    "wrong. Far out in the dark, a small boat was rowing toward the reef, and the keeper understood "
    "that he would have to signal it some other way."
)

# The built-in prompt set: one prompt per category (written for this project).
PROMPTS: Dict[str, str] = {
    "code_generation": "Write a Python function merge_intervals(intervals) that merges overlapping "
                       "intervals and returns them sorted, with a docstring and two doctests.",
    "code_editing": "Rewrite this function with type hints and a docstring. Keep the logic and the "
                    "names exactly the same and reply with the code only.\n\n```python\n" + _CODE + "```",
    "chat": "What are three practical tips for staying focused when working from home? Answer in "
            "a short paragraph for each.",
    "summarisation": "Summarise the following story in three sentences.\n\n" + _STORY,
}
CODE_CATEGORIES = ("code_generation", "code_editing")
DEFAULT_OUT_DIR = "bench/out"
GLANCE_FILE = "speedup_overview.png"  # the first plot: speedups a user reads at a glance
PLOT_FILES = (GLANCE_FILE, "tokens_per_s.png", "speedup_vs_k.png", "acceptance_per_position.png")
METHODS = ("draft_model", "ngram", "suffix")  # the default set
# layer_skip: exit layer "auto"; hybrid: suffix decoding + the draft model (its reduced
# vocabulary where --draft-vocab-size is given), the best draft per request and step
ALL_METHODS = METHODS + ("layer_skip", "hybrid")
USES_DRAFTER = ("draft_model", "hybrid")


@dataclass
class BenchOptions:
    model: str = TARGET
    drafter: Optional[str] = DRAFTER
    max_tokens: int = 128
    ks: Sequence[int] = (2, 4)
    methods: Sequence[str] = METHODS
    adaptive: bool = True
    adaptive_max_k: int = 6
    draft_vocab_size: int = 0           # > 0: draft_model also with this reduced draft vocabulary
    draft_vocab_file: Optional[str] = None  # its ranking (`specdec draft-vocab`); None: lowest ids
    categories: Sequence[str] = tuple(PROMPTS)
    peer: str = "auto"             # "auto": run llama.cpp's tools when built; "off"; "require"
    peer_bin: Optional[str] = None  # default: $SPECDEC_PEER_BIN or <cache>/peer-llama.cpp/bin
    threads: int = 0               # llama.cpp threads (0: all cores, as specdec's PoCL uses)
    out_dir: str = DEFAULT_OUT_DIR  # created when missing (its parents too only for the default)
    plots: bool = True
    kv_cache_memory: str = "512MiB"
    repeats: int = 1               # rounds over every mode, the order reversed every other round
    progress: Optional[IO[str]] = field(default_factory=lambda: sys.stderr)


# ---------------------------------------------------------------- machine facts
def machine_info(context) -> Dict[str, object]:
    cpu, flags = "", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and not cpu:
                    cpu = line.split(":", 1)[1].strip()
                if line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    isa = [f for f in ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx_vnni", "amx_tile")
           if f in flags]
    dev = context.device
    path = _core.quant_isa(context)
    # a native path with no kernels of its own names the ones it runs ("specdec native (amx_int8,
    # avx512_vnni kernels)"): the path the figures were measured with
    kernels = re.search(r", (\w+) kernels\)$", dev.platform)
    return {"cpu": cpu or platform.processor(), "isa": isa, "cores": os.cpu_count(),
            "platform": platform.platform(), "opencl_device": dev.name,
            "opencl_platform": dev.platform,
            "quant_isa_path": path, "quant_kernels": kernels.group(1) if kernels else path,
            "versions": {"specdec": specdec.__version__, "python": platform.python_version(),
                         "numpy": np.__version__, "llama_cpp_python_pin": LLAMA_CPP_PYTHON_PIN}}


def host_read_bandwidth(mib: int = 512, threads: int = 0) -> Dict[str, float]:
    """Streaming read bandwidth of this run (GB/s): a reduction over `mib` MiB, best of 3, on one
    thread and on `threads` (default all cores; NumPy's reductions release the GIL)."""
    n = mib * 2**20 // 8
    a = np.ones(n, dtype=np.uint64)

    def once(parts: int) -> float:
        chunks = np.array_split(a, parts)
        best = float("inf")
        for _ in range(3):
            ts = [threading.Thread(target=np.bitwise_xor.reduce, args=(c,)) for c in chunks]
            t0 = time.perf_counter()
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            best = min(best, time.perf_counter() - t0)
        return a.nbytes / best / 1e9

    threads = threads or os.cpu_count() or 1
    return {"one_thread_gb_s": once(1), "all_threads_gb_s": once(threads), "threads": threads}


def decode_weight_bytes(path: str) -> int:
    """Bytes of weights one decode step reads: every tensor of the file but the token embedding
    (one row of it is read) unless it is also the output matrix (tied)."""
    if not str(path).endswith(".gguf") and not os.path.isdir(path):
        return os.path.getsize(path)
    tensors = _core.read_gguf(str(path))["tensors"]  # a directory: its tensors in GGUF form
    names = {t["name"] for t in tensors}
    tied = "output.weight" not in names
    return sum(t["size_bytes"] for t in tensors if t["name"] != "token_embd.weight" or tied)


# ---------------------------------------------------------------- specdec runs
def _configs(o: BenchOptions, has_drafter: bool) -> List[tuple]:
    out: List[tuple] = [("plain", None)]

    def variants(m: str) -> List[tuple]:  # (name suffix, extra fields) per draft vocabulary
        if m != "draft_model":
            return [("", {})]
        v = [("", {"model": o.drafter})]
        if o.draft_vocab_size:
            extra = {"model": o.drafter, "draft_vocab_size": int(o.draft_vocab_size)}
            if o.draft_vocab_file:
                extra["draft_vocab_file"] = o.draft_vocab_file
            v.append((f" vocab={o.draft_vocab_size}", extra))
        return v

    def config(m: str, k: int, suffix: str, extra: dict) -> tuple:
        if m == "hybrid":  # suffix decoding + the draft model's best variant
            dsuffix, dextra = variants("draft_model")[-1]
            cfg: Dict[str, object] = {"method": "hybrid", "num_speculative_tokens": int(k), "proposers": [
                {"method": "suffix"}, {"method": "draft_model", **dextra}]}
            return f"hybrid (suffix + draft_model{dsuffix})", cfg
        cfg = {"method": m, "num_speculative_tokens": int(k), **extra}
        if m == "ngram":
            cfg.update(prompt_lookup_min=2, prompt_lookup_max=5)
        return f"{m}{suffix}", cfg

    for m in o.methods:
        if m in USES_DRAFTER and not has_drafter:
            continue
        for suffix, extra in variants(m):
            for k in o.ks:
                name, cfg = config(m, k, suffix, extra)
                out.append((f"{name} k={k}", cfg))
    if o.adaptive:
        for m in o.methods:
            if m in USES_DRAFTER and not has_drafter:
                continue
            for suffix, extra in variants(m):
                name, cfg = config(m, o.adaptive_max_k, suffix, extra)
                cfg["adaptive"] = True
                out.append((f"{name} adaptive k<={o.adaptive_max_k}", cfg))
    return out


class _Bar:
    """A one-line progress bar of benchmark runs on `stream` (plain lines when not a terminal)."""

    def __init__(self, total: int, stream: Optional[IO[str]]) -> None:
        self.total, self.done, self.stream = max(total, 1), 0, stream
        self.tty = bool(stream) and hasattr(stream, "isatty") and stream.isatty()
        self.start = time.monotonic()

    def step(self, label: str) -> None:
        self.done += 1
        if not self.stream:
            return
        pct = int(100 * self.done / self.total)
        el = time.monotonic() - self.start
        eta = el / self.done * (self.total - self.done)
        if self.tty:
            fill = int(30 * self.done / self.total)
            self.stream.write(f"\rbench [{'#' * fill}{'.' * (30 - fill)}] {self.done}/{self.total} "
                              f"{pct:3d}% eta {eta:4.0f}s  {label[:50]:50s}")
            if self.done == self.total:
                self.stream.write("\n")
        else:
            self.stream.write(f"bench: {self.done}/{self.total} ({pct}%, eta {eta:.0f} s) {label}\n")
        self.stream.flush()


def _prompt_ids(tokenizer, categories: Sequence[str], room: int) -> Dict[str, List[int]]:
    """Token ids per category; a prompt longer than `room` tokens (a tiny model's context) keeps
    its last `room` tokens."""
    out = {}
    for c in categories:
        text = PROMPTS[c]
        if tokenizer.chat_template:
            out[c] = tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=True)
        else:  # a base model without a template (the tests' tiny model)
            out[c] = tokenizer.encode(text, add_special=True)
        if len(out[c]) > room:
            out[c] = out[c][-room:]
    return out


def _drafter_runner(llm, path: str, logit_token_ids: List[int]):
    """The benchmark's drafter: 128 MiB of KV cache, the target's context, its whole or reduced vocabulary."""
    return _core.ModelRunner(llm.context, path, max_model_len=llm.runner.max_model_len,
                             kv_cache_memory_bytes=128 << 20, block_size=16, kv_cache_dtype="f16",
                             max_num_batched_tokens=512, max_num_logits=128, logit_token_ids=logit_token_ids)


def _run_one(llm, proposer, k: int, adaptive: bool, ids: List[int], max_tokens: int) -> tuple:
    core = llm.new_engine_core(proposer, k, adaptive=adaptive, max_num_seqs=1, max_num_batched_tokens=512,
                               max_num_logits=max(128, 1 + k), enable_prefix_caching=False)
    engine = LLMEngine(core)
    params = specdec.SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
    req = llm._make_request({"prompt_token_ids": ids}, params, final_only=True)
    out = None
    sink = engine.add_request(req)
    for item in engine.iterate(sink, [req.request_id]):
        if item.finished:
            out = item.output
    return out, core


def run_specdec(llm, drafters: Dict[int, object], o: BenchOptions, prompt_ids: Dict[str, List[int]],
                bar: _Bar, log: Callable[[str], None],
                plain_ids: Optional[Dict[str, List[int]]] = None) -> List[dict]:
    """drafters: the drafter's runner per draft vocabulary size (0: the whole vocabulary).
    plain_ids (filled when given): plain decoding's output tokens per category.

    With o.repeats = R > 1 every mode runs R times, in rounds over all modes whose order is
    reversed every other round (plain first, then last, ...), so that a machine drifting during
    the run weighs on every mode alike. A row then gives the median tokens/s of its rounds
    (``tokens_per_s_rounds`` lists them) and ``speedup_vs_plain`` is the median of the per-round
    ratios to plain decoding *of the same round* (``speedup_vs_plain_rounds``); its other fields
    (acceptance, steps, time split) are its first round's (``acceptance_rate_rounds`` lists every
    round's), and it is lossless only when every round was. Every round starts from a fresh
    proposer, as the first did."""
    from specdec.speculative import build_speculation
    plain_ids = {} if plain_ids is None else plain_ids
    modes = [(name, cfg, build_speculation(cfg) if cfg else None) for name, cfg in _configs(o, bool(drafters))]
    rounds: List[Dict[tuple, dict]] = []
    for rnd in range(max(1, o.repeats)):
        by_mode: Dict[tuple, dict] = {}
        order = list(enumerate(modes))
        for i, (name, cfg, sp) in (order if rnd % 2 == 0 else order[::-1]):
            # a fresh proposer every round: suffix decoding's tree keeps the outputs it has seen,
            # and a second round would draft from the first round's answers to the same prompts
            drafter = drafters.get(sp.config.drafter_config().draft_vocab_size) if sp else None
            proposer = sp.make_proposer(llm.runner, drafter) if sp else None
            k = sp.config.num_speculative_tokens if sp else 0
            adaptive = bool(sp and sp.config.adaptive)
            for cat, ids in prompt_ids.items():
                row = _measure(llm, name, cfg, proposer, k, adaptive, cat, ids, o, plain_ids)
                by_mode[(i, cat)] = row
                acc = "-" if row["acceptance_rate"] is None else f"{100 * row['acceptance_rate']:.0f}%"
                rnd_text = f" (round {rnd + 1})" if o.repeats > 1 else ""
                log(f"  {name:28s} {cat:16s} {row['tokens_per_s']:7.2f} tok/s  accept {acc:>4s}  "
                    f"lossless {row['lossless']}{rnd_text}")
                bar.step(f"{name} / {cat}")
        rounds.append(by_mode)
    rows: List[dict] = []
    plain_index = next((i for i, (_n, cfg, _sp) in enumerate(modes) if cfg is None), None)
    for i in range(len(modes)):
        for cat in prompt_ids:
            per = [r[(i, cat)] for r in rounds]
            row = dict(per[0])
            plains = [r.get((plain_index, cat)) for r in rounds]
            ratios = [x["tokens_per_s"] / p["tokens_per_s"] if p and p["tokens_per_s"] else None
                      for x, p in zip(per, plains)]  # per round, None where that round has no plain
            known = [x for x in ratios if x is not None]
            row["lossless"] = all(x["lossless"] for x in per)
            row["speedup_vs_plain"] = statistics.median(known) if known else None
            if len(per) > 1:
                row["tokens_per_s_rounds"] = [x["tokens_per_s"] for x in per]
                row["tokens_per_s"] = statistics.median(row["tokens_per_s_rounds"])
                row["speedup_vs_plain_rounds"] = ratios
                row["acceptance_rate_rounds"] = [x["acceptance_rate"] for x in per]
            rows.append(row)
    return rows


def _measure(llm, name: str, cfg: Optional[dict], proposer, k: int, adaptive: bool, cat: str,
             ids: List[int], o: BenchOptions, plain_ids: Dict[str, List[int]]) -> dict:
    """One mode on one prompt: its row (plain decoding's tokens go into plain_ids)."""
    out, core = _run_one(llm, proposer, k, adaptive, ids, o.max_tokens)
    toks = list(out.outputs[0].token_ids)
    if cfg is None and cat not in plain_ids:
        plain_ids[cat] = toks
    m, st = out.metrics, core.stats.as_dict()
    row = {
        "method": name, "k": k,
        "base_method": (cfg["method"] + (f" vocab={cfg['draft_vocab_size']}" if cfg.get("draft_vocab_size")
                                         else "")) if cfg else "plain",
        "adaptive": adaptive, "config": cfg, "category": cat, "prompt_tokens": len(ids),
        "output_tokens": len(toks), "lossless": toks == plain_ids.get(cat),
        "tokens_per_s": m["tokens_per_s"], "time_to_first_token": m["time_to_first_token"],
        "num_drafts": m["num_drafts"], "num_draft_tokens": m["num_draft_tokens"],
        "num_accepted_tokens": m["num_accepted_tokens"],
        "acceptance_rate": m["acceptance_rate"] if m["num_draft_tokens"] else None,
        "acceptance_rate_per_pos": list(m["acceptance_rate_per_pos"]),
        "mean_acceptance_length": m["mean_acceptance_length"],
        "engine_steps": st["num_steps"],
        "time_split_seconds": {key: st[key] for key in ("draft_seconds", "forward_seconds",
                                                        "sampling_seconds", "host_seconds")},
        "host_per_step_ms": 1e3 * st["host_seconds"] / max(st["num_steps"], 1),
    }
    if isinstance(proposer, _core.spec_decode.LayerSkipProposer):  # the exit layer it settled on
        row["exit_layer"] = proposer.exit_layer
        row["exit_layer_stats"] = proposer.stats()
    if isinstance(proposer, _core.spec_decode.HybridProposer):  # which part's drafts it took
        row["hybrid_parts"] = proposer.stats()
    if core.adaptive is not None:
        row["adaptive_off_steps"] = core.adaptive.num_off_steps
        row["adaptive_probes"] = core.adaptive.num_probes
    return row


def rerun_plain(llm, o: BenchOptions, prompt_ids: Dict[str, List[int]], rows: List[dict],
                plain_ids: Dict[str, List[int]], bar: _Bar, log: Callable[[str], None]) -> Dict[str, dict]:
    """Plain decoding once more after every specdec mode: how far the machine's own speed moved
    during the run (per category: the first and the last plain tokens/s and their ratio). Ratios
    to plain decoding mean little where it moved by more than the effects being compared."""
    first = {r["category"]: r for r in rows if r["method"] == "plain"}
    drift: Dict[str, dict] = {}
    for cat, ids in prompt_ids.items():
        out, _ = _run_one(llm, None, 0, False, ids, o.max_tokens)
        again = out.metrics["tokens_per_s"]
        ref = first.get(cat)
        same = list(out.outputs[0].token_ids) == plain_ids.get(cat)
        # the very first plain run (with --repeats, round 1's, not the rounds' median)
        before = (ref.get("tokens_per_s_rounds") or [ref["tokens_per_s"]])[0] if ref else None
        drift[cat] = {"first_tokens_per_s": before, "last_tokens_per_s": again,
                      "ratio": again / before if before else None, "same_tokens": same}
        log(f"  {'plain (again, at the end)':28s} {cat:16s} {again:7.2f} tok/s  "
            f"{'' if not before else f'{again / before:.2f}x the first plain run'}")
        bar.step(f"plain again / {cat}")
    return drift


# ---------------------------------------------------------------- llama.cpp
def peer_bin_dir(o: BenchOptions) -> Path:
    """Where llama.cpp's tools are looked for: only where the user said (``--peer-bin``, else
    ``$SPECDEC_PEER_BIN``; a relative path is the user's own choice) or the per-user folder
    bench/setup_peer_tools.sh installs into, ``<model cache>/peer-llama.cpp/bin``. Never the
    working directory: a ``./build/...`` planted there must not run."""
    if o.peer_bin:
        return Path(o.peer_bin)
    if os.environ.get("SPECDEC_PEER_BIN"):
        return Path(os.environ["SPECDEC_PEER_BIN"])
    bindir = specdec.cache_dir() / "peer-llama.cpp" / "bin"
    _check_not_shared(bindir)
    return bindir


def _check_not_shared(bindir: Path) -> None:
    """The default folder is in the model cache, which may be shared: its tools run only when
    the folders and files are this user's (or root's) and nobody else may write them."""
    me = os.getuid()
    paths = [bindir.parent, bindir] + sorted(bindir.glob("*")) if bindir.is_dir() else []
    for p in paths:
        st = os.lstat(p)
        if st.st_uid not in (me, 0) or st.st_mode & 0o022:
            raise ValueError(f"{p}: owned by uid {st.st_uid} or writable by other users (mode "
                             f"{st.st_mode & 0o777:o}); specdec runs llama.cpp tools only from a "
                             "folder that only you can write: build them with "
                             "bench/setup_peer_tools.sh into your own cache, or pass --peer-bin")


PEER_TOOLS = ("llama-bench", "llama-speculative-simple", "llama-lookup")


def peer_modes(o: BenchOptions, drafter_path: Optional[str]) -> List[tuple]:
    modes = []
    if drafter_path and "draft_model" in o.methods:
        for k in o.ks:
            modes.append((f"llama.cpp draft_model k={k}", "llama-speculative-simple",
                          ["-md", drafter_path, "--spec-type", "draft-simple", "--spec-draft-n-min", "0",
                           "--spec-draft-n-max", str(k)]))
    if "ngram" in o.methods or "suffix" in o.methods:
        for k in o.ks:
            modes.append((f"llama.cpp lookup k={k}", "llama-lookup", ["--spec-draft-n-max", str(k)]))
    return modes


def run_peer(o: BenchOptions, target_path: str, drafter_path: Optional[str], tokenizer,
             categories: Sequence[str], bar: _Bar, log: Callable[[str], None]) -> List[dict]:
    bindir = peer_bin_dir(o)
    threads = str(o.threads or os.cpu_count() or 2)
    children = ChildProcesses()  # each tool in its own process group, ended on every way out
    with on_abort(children.end):
        try:
            return _run_peer(o, target_path, drafter_path, tokenizer, categories, bar, log, bindir,
                             threads, children)
        finally:
            children.end()


def _run_peer(o: BenchOptions, target_path: str, drafter_path: Optional[str], tokenizer,
              categories: Sequence[str], bar: _Bar, log: Callable[[str], None], bindir: Path,
              threads: str, children: ChildProcesses) -> List[dict]:
    rows: List[dict] = []
    r = children.run([str(bindir / "llama-bench"), "-m", target_path, "-p", "0", "-n",
                      str(o.max_tokens), "-t", threads, "-r", "2", "-o", "json"])
    try:
        tg = float(_json.loads(r.stdout)[0]["avg_ts"])
    except (ValueError, KeyError, IndexError, TypeError):
        tg = None
    for cat in categories:
        rows.append({"method": "llama.cpp plain", "category": cat, "tokens_per_s": tg,
                     "source": "llama-bench tg (no prompt)", "returncode": r.returncode})
    log(f"  {'llama.cpp plain (llama-bench)':28s} {'all':16s} {tg} tok/s")
    bar.step("llama.cpp plain")
    rows += _run_peer_completion(o, target_path, tokenizer, categories, log, bindir, threads, children)
    for name, exe, args in peer_modes(o, drafter_path):
        for cat in categories:
            cmd = [str(bindir / exe), "-m", target_path, *args, "-p", _chat_prompt(tokenizer, cat), "-n", str(o.max_tokens),
                   "-t", threads, "--temp", "0", "-c", "4096", "--ignore-eos"]
            res = children.run(cmd)
            text_log = res.stdout + res.stderr
            speed = re.search(r"decoded\s+(\d+)\s+tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s",
                              text_log)
            acc = re.search(r"accept\s*=\s*([\d.]+)%", text_log)
            rows.append({"method": name, "category": cat,
                         "tokens_per_s": float(speed.group(3)) if speed else None,
                         "acceptance_rate": float(acc.group(1)) / 100 if acc else None,
                         "returncode": res.returncode, "log_tail": None if speed else text_log[-600:]})
            log(f"  {name:28s} {cat:16s} {rows[-1]['tokens_per_s']} tok/s  accept "
                f"{rows[-1]['acceptance_rate']}")
            bar.step(f"{name} / {cat}")
    return rows


def _chat_prompt(tokenizer, cat: str) -> str:
    text = PROMPTS[cat]
    return (tokenizer.apply_chat_template([{"role": "user", "content": text}])
            if tokenizer.chat_template else text)


# llama_perf_context_print's decode line (not its "prompt eval time" line)
_EVAL_RATE = re.compile(r"(?<!prompt )eval time\s*=\s*[\d.]+ ms /\s*(\d+) runs.*?([\d.]+) tokens per second")


def _run_peer_completion(o: BenchOptions, target_path: str, tokenizer, categories: Sequence[str],
                         log: Callable[[str], None], bindir: Path, threads: str,
                         children: ChildProcesses) -> List[dict]:
    """llama.cpp's plain decoding on the same chat-templated prompts (``llama-completion``, its
    decode rate only, greedy, --ignore-eos): rows "llama.cpp plain (llama-completion)", which the
    overview plot takes as llama.cpp's plain decoding per category. Skipped (with a line in the
    log) where the tool is not built: bench/setup_peer_tools.sh builds it."""
    exe = bindir / "llama-completion"
    if not exe.exists():
        log(f"  llama-completion not in {bindir}: llama.cpp's plain decoding on the prompts skipped "
            "(bench/setup_peer_tools.sh builds it)")
        return []
    rows = []
    for cat in categories:
        cmd = [str(exe), "-m", target_path, "-p", _chat_prompt(tokenizer, cat), "-n", str(o.max_tokens),
               "-t", threads, "--temp", "0", "-c", "4096", "--ignore-eos", "-no-cnv"]
        res = children.run(cmd)
        text_log = res.stdout + res.stderr
        m = _EVAL_RATE.search(text_log)
        rows.append({"method": "llama.cpp plain (llama-completion)", "category": cat,
                     "tokens_per_s": float(m.group(2)) if m else None,
                     "decoded_tokens": int(m.group(1)) if m else None,
                     "source": "llama-completion eval rate on the chat-templated prompt",
                     "returncode": res.returncode, "log_tail": None if m else text_log[-600:]})
        log(f"  {'llama.cpp plain (completion)':28s} {cat:16s} {rows[-1]['tokens_per_s']} tok/s")
    return rows


# ---------------------------------------------------------------- summary and plots
def summarize(rows: List[dict], peer: List[dict]) -> Dict[str, object]:
    def mean(xs):
        xs = [x for x in xs if x is not None]
        return sum(xs) / len(xs) if xs else None

    by = {}
    for r in rows + peer:
        by.setdefault(r["method"], {})[r["category"]] = r["tokens_per_s"]
    cats = list(dict.fromkeys(r["category"] for r in rows))
    plain = by.get("plain", {})
    # a speedup over plain decoding: the row's own (with --repeats, the median of same-round ratios)
    paired = {(r["method"], r["category"]): r.get("speedup_vs_plain") for r in rows}

    def speedup(m, c):
        if paired.get((m, c)) is not None:
            return paired[(m, c)]
        return by[m][c] / plain[c] if plain.get(c) and by[m].get(c) else None
    out: Dict[str, object] = {"tokens_per_s": by}
    code = [c for c in cats if c in CODE_CATEGORIES]
    spec_methods = [m for m in by if m != "plain" and not m.startswith("llama.cpp")]
    peer_methods = [m for m in by if m.startswith("llama.cpp")]
    if code and spec_methods:
        best = max(spec_methods, key=lambda m: mean(by[m].get(c) for c in code) or 0)
        out["best_speculative_on_code"] = best
        out["best_speculative_speedup_on_code"] = mean(speedup(best, c) for c in code)
        if peer_methods:
            best_peer = max(peer_methods, key=lambda m: mean(by[m].get(c) for c in code) or 0)
            out["best_llama_cpp_on_code"] = best_peer
            bp = mean(by[best_peer].get(c) for c in code)
            out["best_vs_best_llama_cpp_on_code"] = (mean(by[best].get(c) for c in code) / bp) if bp else None
    adaptive = [m for m in spec_methods if "adaptive" in m]
    out["adaptive_min_speedup_per_category"] = {
        m: min((x for x in (speedup(m, c) for c in cats) if x is not None), default=None)
        for m in adaptive}
    # a reduced draft vocabulary against the whole one, config by config (same k, same prompts)
    reduced = [r for r in rows if (r.get("config") or {}).get("draft_vocab_size")]
    if reduced:
        pairs = []
        for r in reduced:
            full = next((f for f in rows if f["base_method"] == "draft_model" and f["k"] == r["k"]
                         and f["adaptive"] == r["adaptive"] and f["category"] == r["category"]), None)
            if full and full["acceptance_rate"] and r["acceptance_rate"] is not None:
                pairs.append((r["acceptance_rate"] / full["acceptance_rate"], r["tokens_per_s"] / full["tokens_per_s"]))
        out["draft_vocab"] = {
            "size": reduced[0]["config"]["draft_vocab_size"],
            "file": reduced[0]["config"].get("draft_vocab_file"),
            "acceptance_vs_whole_vocab": mean(p[0] for p in pairs) if pairs else None,
            "tokens_per_s_vs_whole_vocab": mean(p[1] for p in pairs) if pairs else None,
            "pairs": len(pairs),
        }
    out["all_lossless"] = all(r["lossless"] for r in rows)
    return out


def _base_method(r: dict) -> str:
    """A specdec row's method without its k ("ngram", "draft_model vocab=16384")."""
    return r.get("base_method") or re.sub(r"( adaptive)? k(=|<=)\d+$", "", r["method"])


def _mode_label(r: dict, method: bool = True) -> str:
    """A row's mode for a bar label: "ngram k=4", "suffix adaptive k≤6" (method=False: "k=4")."""
    name = r["method"].replace("llama.cpp ", "", 1).replace("<=", "≤")
    if method:
        return name
    m = re.search(r"(adaptive )?k(=|≤)\d+$", name)
    return m.group(0) if m else name


def glance_bars(result: dict) -> dict:
    """What the first plot shows, per prompt category: specdec plain, specdec's best mode, each
    specdec method at its best k (fixed or adaptive), llama.cpp plain and llama.cpp's best mode
    (a best mode is the fastest of all, plain decoding included: "plain" where nothing beats it),
    each as a speedup over llama.cpp's plain decoding in that category (over specdec plain where
    the run has no llama.cpp plain figure for it). Returns {"categories", "baseline" (per category:
    "llama.cpp plain", "specdec plain" or None), "series": [{"name", "kind", "bars": {category:
    (speedup, label or None)}}]}; a bar that has no data is absent from "bars"."""
    rows = [r for r in result.get("specdec") or [] if r.get("category") is not None]
    peer = [r for r in result.get("llama_cpp") or [] if r.get("category") is not None]
    cats = list(dict.fromkeys([*(result.get("categories") or []), *(r["category"] for r in rows + peer)]))

    def ok(r):
        return (r.get("tokens_per_s") or 0) > 0

    def best(rs):
        rs = [r for r in rs if ok(r)]
        return max(rs, key=lambda r: r["tokens_per_s"]) if rs else None

    spec_plain = {r["category"]: r for r in rows if r["method"] == "plain" and ok(r)}
    peer_plain = {}  # llama.cpp's decode rate on the same prompt (llama-completion) before llama-bench's
    for r in peer:
        if r["method"].startswith("llama.cpp plain") and ok(r) and (
                r["category"] not in peer_plain or "llama-completion" in r["method"]):
            peer_plain[r["category"]] = r
    peer_modes_ = [r for r in peer if not r["method"].startswith("llama.cpp plain")]
    spec_modes = [r for r in rows if r["method"] != "plain"]
    base = {}
    for c in cats:
        ref = peer_plain.get(c) or spec_plain.get(c)
        base[c] = (("llama.cpp plain" if c in peer_plain else "specdec plain"), ref["tokens_per_s"]) if ref else None

    series: List[dict] = []

    def add(name, kind, pick, label=None):
        bars = {}
        for c in cats:
            r = pick(c)
            if r is not None and base[c] and ok(r):
                bars[c] = (r["tokens_per_s"] / base[c][1], label(r) if label else None)
        series.append({"name": name, "kind": kind, "bars": bars})

    add("specdec plain", "specdec plain", lambda c: spec_plain.get(c))
    if spec_modes:  # the best of every mode, plain decoding included (where nothing beats it)
        add("specdec best mode", "specdec best",
            lambda c: best([*(r for r in spec_modes if r["category"] == c), *filter(None, [spec_plain.get(c)])]),
            _mode_label)
    for bm in dict.fromkeys(_base_method(r) for r in spec_modes):
        add(f"{bm} (best k)", "method",
            lambda c, bm=bm: best(r for r in spec_modes if r["category"] == c and _base_method(r) == bm),
            lambda r: _mode_label(r, method=False))
    if peer_plain or any(ok(r) for r in peer_modes_):
        add("llama.cpp plain", "llama.cpp plain", lambda c: peer_plain.get(c))
        if peer_modes_:
            add("llama.cpp best mode", "llama.cpp best",
                lambda c: best([*(r for r in peer_modes_ if r["category"] == c),
                                *filter(None, [peer_plain.get(c)])]), _mode_label)
    return {"categories": cats, "baseline": {c: base[c][0] if base[c] else None for c in cats},
            "series": series}


_METHOD_COLOURS = ("#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#bcbd22", "#17becf")
_KIND_STYLE = {"specdec plain": dict(color="#9ecae1"), "specdec best": dict(color="#08519c"),
               "llama.cpp plain": dict(color="#d9d9d9", hatch="//", edgecolor="#737373"),
               "llama.cpp best": dict(color="#525252", hatch="//", edgecolor="#d9d9d9")}


def _plot_glance(result: dict, subtitle: str, path: Path) -> str:
    """The first plot: per category, the bars of `glance_bars` with their speedup printed on them,
    a line at 1.0 and the legend below the axes."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgb
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    g = glance_bars(result)
    cats, series = g["categories"], g["series"]
    used = {b for c, b in g["baseline"].items() if b}
    if used == {"llama.cpp plain"}:
        ref = "llama.cpp's plain decoding"
        ylabel = "speedup over llama.cpp plain (×)"
    elif "llama.cpp plain" in used:
        ref = "llama.cpp's plain decoding (specdec plain where llama.cpp has none: marked *)"
        ylabel = "speedup over llama.cpp plain (×)"
    else:
        ref = "specdec's plain decoding (no llama.cpp results in this run)"
        ylabel = "speedup over specdec plain (×)"
    n = max(len(series), 1)
    width = max(8.0, 0.36 * n * max(len(cats), 1) + 2.0)
    fig, ax = plt.subplots(figsize=(width, 5.6), layout="constrained")
    w = 0.86 / n
    slot_in = (width - 1.2) * w / max(len(cats), 1)  # inches per bar, roughly
    vfont = 7 if slot_in >= 0.34 else 6
    vrot = 0 if slot_in >= 0.28 else 90
    labels = []  # (mode label, x, bar height, value text, label colour)
    handles = []
    top = 0.0
    mi = 0
    for i, s in enumerate(series):
        if s["kind"] == "method":
            style = dict(color=_METHOD_COLOURS[mi % len(_METHOD_COLOURS)])
            mi += 1
        else:
            style = dict(_KIND_STYLE[s["kind"]])
        xs = [j + (i - (n - 1) / 2) * w for j in range(len(cats))]
        handles.append(Patch(label=s["name"], facecolor=style["color"], hatch=style.get("hatch"),
                             edgecolor=style.get("edgecolor", style["color"])))  # also with no bars
        for x, c in zip(xs, cats):
            if c not in s["bars"]:
                ax.text(x, 0, "n/a", ha="center", va="bottom", fontsize=6, color="#737373", rotation=90)
                continue
            v, lab = s["bars"][c]
            ax.bar(x, v, w, **style)
            top = max(top, v)
            vt = ax.text(x, v, f"{v:.2f}×", ha="center", va="bottom", fontsize=vfont, rotation=vrot,
                         fontweight="bold" if s["kind"] in ("specdec best", "llama.cpp best") else None,
                         zorder=4, bbox=dict(facecolor="white", edgecolor="none", pad=0.6, alpha=0.85))
            vt.set_in_layout(False)
            if lab:
                r, gr, b = to_rgb(style["color"])
                dark = 0.299 * r + 0.587 * gr + 0.114 * b < 0.55
                colour = "white" if dark else "black"
                t = ax.text(x, 0, " " + lab, ha="center", va="bottom", rotation=90, fontsize=6.5,
                            color=colour)
                t.set_in_layout(False)
                labels.append((t, x, v, vt, colour))
    ax.axhline(1.0, color="black", linewidth=1.0, linestyle="--", zorder=3)
    ax.set_xlim(-0.5, max(len(cats), 1) - 0.5)
    ax.set_ylim(0, max(top, 1.0) * 1.2 or 1.0)
    ax.set_xticks(range(len(cats)), [c + (" *" if g["baseline"][c] == "specdec plain" and
                                          "llama.cpp plain" in used else "") + ("\n(no plain run)"
                                          if g["baseline"][c] is None else "") for c in cats],
                  fontsize=10)
    ax.set_xlabel("prompt category")
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    ax.set_title(f"Decode speed at a glance: speedup over {ref}\n"
                 f"each method at its best k per category; batch 1, greedy\n{subtitle}", fontsize=10)
    handles.append(Line2D([], [], color="black", linestyle="--",
                          label="1.0 = " + ("llama.cpp plain" if "llama.cpp plain" in used else "specdec plain")))
    rows_ = 2 if len(handles) <= 12 else 3  # column by column: specdec first, llama.cpp last
    fig.legend(handles=handles, loc="outside lower center", ncol=-(-len(handles) // rows_), fontsize=8,
               frameon=False)
    # a mode label that does not fit in its bar goes above the bar's value; the y range grows to fit
    for _ in range(3):
        fig.canvas.draw()
        rend = fig.canvas.get_renderer()
        inv = ax.transData.inverted()
        need = 0.0
        for t, x, v, vt, _ in labels:
            bar_top = ax.transData.transform((x, v))[1]
            if t.get_position()[1] == 0 and t.get_window_extent(rend).y1 > bar_top - 2:
                t.set_position((x, inv.transform((0, vt.get_window_extent(rend).y1 + 1))[1]))
                t.set_color("black")
            for a in (t, vt):
                need = max(need, a.get_window_extent(rend).y1)
        ax_top = ax.get_window_extent(rend).y1
        if need <= ax_top - 3:
            break
        lo, hi = ax.get_ylim()
        ax.set_ylim(lo, hi * (need - ax.get_window_extent(rend).y0 + 10) /
                    max(ax_top - ax.get_window_extent(rend).y0, 1))
        for t, x, _, _, colour in labels:  # place again at the new scale
            t.set_position((x, 0))
            t.set_color(colour)
    return _save_png(fig, path)


def write_plots(result: dict, out_dir: Path) -> List[str]:
    """The plots, the at-a-glance speedup first (GLANCE_FILE), then the details."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, peer = result["specdec"], result["llama_cpp"]
    m = result.get("machine") or {}
    subtitle = (f"{Path(result.get('target') or '?').name} · {m.get('cpu', '?')} "
                f"({', '.join(m.get('isa') or []) or 'no AVX'}) · {m.get('opencl_device', '?')}")
    files = [_plot_glance(result, subtitle, out_dir / GLANCE_FILE)]
    # 1. tokens/s per method and category
    cats = list(dict.fromkeys(r["category"] for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows + peer))
    val = {(r["method"], r["category"]): r["tokens_per_s"] for r in rows + peer}
    fig, ax = plt.subplots(figsize=(max(8, 1.2 * len(cats) * max(1, len(methods)) / 3) + 2.5, 5),
                           layout="constrained")
    w = 0.85 / max(len(methods), 1)
    cmap = plt.get_cmap("tab20")
    for i, meth in enumerate(methods):
        xs = [j + i * w for j in range(len(cats))]
        ys = [val.get((meth, c)) or 0 for c in cats]
        ax.bar(xs, ys, w, label=meth, color=cmap(i % 20),
               hatch="//" if meth.startswith("llama.cpp") else None)
    ax.set_xticks([j + 0.425 - w / 2 for j in range(len(cats))], cats)
    ax.set_ylabel("decode tokens/s (batch 1, greedy)")
    ax.set_title(f"tokens/s per method\n{subtitle}", fontsize=9)
    if methods:  # outside the axes, right of the bars
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    files.append(_save_png(fig, out_dir / "tokens_per_s.png"))
    # 2. speedup vs k, per method (lines per category), adaptive as a dashed level
    base_methods = list(dict.fromkeys(r["base_method"] for r in rows if r["base_method"] != "plain"))
    if base_methods:
        fig, axes = plt.subplots(1, len(base_methods), figsize=(4.2 * len(base_methods), 4), squeeze=False)
        for ax, bm in zip(axes[0], base_methods):
            for ci, c in enumerate(cats):
                pts = sorted((r["k"], r["speedup_vs_plain"]) for r in rows
                             if r["base_method"] == bm and r["category"] == c and not r["adaptive"]
                             and r["speedup_vs_plain"] is not None)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=c, color=cmap(2 * ci))
                ad = [r["speedup_vs_plain"] for r in rows if r["base_method"] == bm and r["category"] == c
                      and r["adaptive"] and r["speedup_vs_plain"] is not None]
                if ad:
                    ax.axhline(ad[0], linestyle="--", color=cmap(2 * ci), linewidth=1)
            ax.axhline(1.0, color="black", linewidth=0.8)
            ax.set_xlabel("k (draft tokens per step)")
            ax.set_ylabel("speedup vs plain decoding")
            ax.set_title(f"{bm} (dashed: adaptive)", fontsize=9)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
        fig.suptitle(subtitle, fontsize=8)
        fig.tight_layout()
        files.append(_save_png(fig, out_dir / "speedup_vs_k.png"))
    # 3. acceptance per position (the largest fixed k of each method, averaged over categories)
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, bm in enumerate(base_methods):
        fixed = [r for r in rows if r["base_method"] == bm and not r["adaptive"]]
        if not fixed:
            continue
        kmax = max(r["k"] for r in fixed)
        curves = [r["acceptance_rate_per_pos"] for r in fixed if r["k"] == kmax and r["acceptance_rate_per_pos"]]
        if not curves:
            continue
        n = max(len(c) for c in curves)
        avg = [float(np.mean([c[p] for c in curves if p < len(c)])) for p in range(n)]
        ax.plot(range(1, n + 1), avg, "o-", label=f"{bm} k={kmax}", color=cmap(2 * i))
    ax.set_xlabel("draft position")
    ax.set_ylabel("acceptance rate (vLLM: accepted at position / drafts)")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"acceptance per position\n{subtitle}", fontsize=9)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    files.append(_save_png(fig, out_dir / "acceptance_per_position.png"))
    return files


def _save_png(fig, path: Path) -> str:
    """The figure as PNG, written like every output file (``_files.write_file_atomic``)."""
    import matplotlib.pyplot as plt
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    write_file_atomic(path, buf.getvalue(), "--out")
    return str(path)


# ---------------------------------------------------------------- the whole run
def _output_folder(o: BenchOptions) -> Path:
    """The output folder, created when missing (with its parents only for the default
    ``bench/out``: a mistyped --out must not grow a tree), its files checked before the run
    (each must be a regular file or new: never a symlink, device or folder)."""
    out_dir = output_folder(o.out_dir, "--out", parents=o.out_dir == DEFAULT_OUT_DIR)
    for name in ("bench.json", *(PLOT_FILES if o.plots else ())):
        check_output_file(out_dir / name, "--out")
    return out_dir


def run(o: BenchOptions, log: Optional[Callable[[str], None]] = None) -> dict:
    log = log or (lambda s: print(s, flush=True))
    for c in o.categories:
        if c not in PROMPTS:
            raise ValueError(f"--categories: {c!r}: one of {', '.join(PROMPTS)}")
    for m in o.methods:
        if m not in ALL_METHODS:
            raise ValueError(f"--methods: {m!r}: one of {', '.join(ALL_METHODS)}")
    if o.draft_vocab_size < 0 or (o.draft_vocab_size and (not set(USES_DRAFTER) & set(o.methods)
                                                           or not o.drafter)):
        raise ValueError(f"--draft-vocab-size = {o.draft_vocab_size}: 0, or >= 1 with method draft_model "
                         "or hybrid and a drafter")
    if o.draft_vocab_file and not o.draft_vocab_size:
        raise ValueError(f"--draft-vocab-file = {o.draft_vocab_file!r}: only with --draft-vocab-size")
    if o.draft_vocab_file and not Path(o.draft_vocab_file).is_file():
        raise ValueError(f"--draft-vocab-file = {o.draft_vocab_file!r}: an existing file written by "
                         "`specdec draft-vocab`")
    if o.peer not in ("auto", "off", "require"):
        raise ValueError(f"--peer = {o.peer!r}: auto, off or require")
    if o.plots:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise ValueError("plots need matplotlib: pip install matplotlib (or pass --no-plots)") from None
    bindir = peer_bin_dir(o) if o.peer != "off" else Path()
    missing = [t for t in PEER_TOOLS if not (bindir / t).exists()] if o.peer != "off" else []
    run_peer_tools = o.peer != "off" and not missing
    if o.peer == "require" and missing:
        raise ValueError(f"--peer require: llama.cpp tools {', '.join(missing)} not in {bindir}; "
                         "build them with bash bench/setup_peer_tools.sh, or pass --peer-bin or set "
                         "SPECDEC_PEER_BIN")
    out_dir = _output_folder(o)
    target_path = specdec.resolve_model(o.model, progress=o.progress is not None)
    drafter_path = None
    if o.drafter and set(USES_DRAFTER) & set(o.methods):
        drafter_path = specdec.resolve_model(o.drafter, progress=o.progress is not None)
    max_len = min(2048, specdec.load_model_config(target_path).context_length)
    llm = specdec.LLM(target_path, max_model_len=max_len, kv_cache_memory_bytes=o.kv_cache_memory,
                      progress=False, max_num_seqs=1)
    info = machine_info(llm.context)
    log(f"machine: {info['cpu']} ({', '.join(info['isa']) or 'no AVX'}), {info['cores']} cores, "
        f"device {info['opencl_device']}, integer path {info['quant_isa_path']}"
        + (f" ({info['quant_kernels']} kernels)" if info["quant_kernels"] != info["quant_isa_path"] else ""))
    bw = host_read_bandwidth()
    log(f"host read bandwidth: {bw['all_threads_gb_s']:.1f} GB/s ({bw['threads']} threads), "
        f"{bw['one_thread_gb_s']:.1f} GB/s (1 thread)")
    drafter = None
    drafters: Dict[int, object] = {}
    if drafter_path:
        drafter = _drafter_runner(llm, drafter_path, [])
        drafters[0] = drafter
        if o.draft_vocab_size:
            from specdec.speculative import build_speculation
            sp = build_speculation({"method": "draft_model", "model": drafter_path, "num_speculative_tokens": 1,
                                    "draft_vocab_size": int(o.draft_vocab_size),
                                    "draft_vocab_file": o.draft_vocab_file})
            drafters[o.draft_vocab_size] = _drafter_runner(llm, drafter_path, sp.draft_vocab_ids(drafter_path))
    room = max_len - o.max_tokens - 1
    if room < 8:
        raise ValueError(f"--max-tokens = {o.max_tokens}: leaves {room} prompt tokens of the model's "
                         f"{max_len}-token context; at most {max_len - 9}")
    prompt_ids = _prompt_ids(llm.tokenizer, o.categories, room)
    # warm-up: builds the kernels of every shape a step uses and faults the weights in
    warm = next(iter(prompt_ids.values()))
    _run_one(llm, None, 0, False, warm, 16)
    for d in drafters.values():
        _run_one(llm, _core.spec_decode.DraftModelProposer(d, llm.config.vocab_size), max(o.ks), False, warm, 16)
    n_runs = (len(_configs(o, bool(drafters))) * max(1, o.repeats) + 1) * len(prompt_ids)  # + plain again
    if run_peer_tools:
        n_runs += 1 + len(peer_modes(o, drafter_path)) * len(prompt_ids)
    bar = _Bar(n_runs, o.progress)
    plain_ids: Dict[str, List[int]] = {}
    rows = run_specdec(llm, drafters, o, prompt_ids, bar, log, plain_ids)
    drift = rerun_plain(llm, o, prompt_ids, rows, plain_ids, bar, log)
    peer: List[dict] = []
    if run_peer_tools:
        peer = run_peer(o, target_path, drafter_path, llm.tokenizer, list(prompt_ids), bar, log)
    elif o.peer == "auto":
        log(f"llama.cpp: tools not built in {bindir} ({', '.join(missing)} missing): "
            "bash bench/setup_peer_tools.sh builds them; this run has specdec only")
    plain = [r["tokens_per_s"] for r in rows if r["method"] == "plain"]
    weights = decode_weight_bytes(target_path)
    decode_gb_s = weights * float(np.mean(plain)) / 1e9 if plain else None
    result = {
        "schema": "specdec.bench/1", "machine": info, "bandwidth": bw,
        "target": target_path, "drafter": drafter_path, "max_tokens": o.max_tokens, "greedy": True,
        "draft_vocab_size": o.draft_vocab_size or None, "draft_vocab_file": o.draft_vocab_file,
        "batch": 1, "ks": list(o.ks), "categories": list(prompt_ids), "repeats": max(1, o.repeats),
        "prompts": {c: PROMPTS[c] for c in prompt_ids},
        "decode_weight_bytes": weights,
        "plain_decode_effective_gb_s": decode_gb_s,
        "plain_decode_fraction_of_bandwidth": decode_gb_s / bw["all_threads_gb_s"] if decode_gb_s else None,
        "specdec": rows, "llama_cpp": peer, "llama_cpp_tools": str(bindir) if run_peer_tools else None,
        "plain_drift": drift,
    }
    result["summary"] = summarize(rows, peer)
    ratios = [d["ratio"] for d in drift.values() if d["ratio"] is not None]
    result["summary"]["plain_drift_max"] = max((abs(r - 1.0) for r in ratios), default=None)
    json_path = write_file_atomic(out_dir / "bench.json",
                                  json.dumps(result, indent=2, default=lambda v: None), "--out")
    files = [str(json_path)]
    if o.plots:
        files += write_plots(result, out_dir)
    result["files"] = files
    log(table(result))
    moved = [(c, d["ratio"]) for c, d in drift.items() if d["ratio"] is not None]
    if moved:
        worst = max(moved, key=lambda cr: abs(cr[1] - 1.0))
        log(f"plain decoding again at the end: {', '.join(f'{c} {r:.2f}x' for c, r in moved)} of the "
            f"first run" + (f" — the machine's speed moved by {100 * abs(worst[1] - 1):.0f}% during "
                            "the run: speedups of that size are within its noise"
                            if abs(worst[1] - 1.0) > 0.10 else ""))
    for f in files:
        log(f"wrote {f}")
    return result


def table(result: dict) -> str:
    """The side-by-side table: tokens/s per method and category, speedup vs plain, acceptance."""
    rows, peer = result["specdec"], result["llama_cpp"]
    cats = result["categories"]
    methods = list(dict.fromkeys(r["method"] for r in rows + peer))
    val = {(r["method"], r["category"]): r for r in rows + peer}
    head = f"{'method':30s}" + "".join(f"{c:>22s}" for c in cats)
    lines = ["", "decode tokens/s (speedup vs specdec plain, acceptance)", head, "-" * len(head)]
    for meth in methods:
        cells = []
        for c in cats:
            r = val.get((meth, c))
            if r is None or r.get("tokens_per_s") is None:
                cells.append(f"{'-':>22s}")
                continue
            plain = val.get(("plain", c), {}).get("tokens_per_s")
            sp = f"{r['tokens_per_s'] / plain:.2f}x" if plain else ""
            acc = r.get("acceptance_rate")
            acc_s = f" {100 * acc:.0f}%" if acc is not None else ""
            cells.append(f"{r['tokens_per_s']:7.1f} ({sp}{acc_s})".rjust(22))
        lines.append(f"{meth:30s}" + "".join(cells))
    return "\n".join(lines)
