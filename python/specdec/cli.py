"""The ``specdec`` command line.

Every user error is one line on stderr, ``specdec: error: <field> = <value>: <what is allowed>``,
and exit status 2; arguments are checked before any model is fetched or loaded. Ctrl-C stops at
once with one line (``specdec: interrupted``) and exit status 130; SIGTERM the same way with
``specdec: terminated`` and exit status 143. Either way child processes (``pip download``) and
temporary files are removed first (``specdec._files.on_abort``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import specdec
from specdec import _core
from specdec._checks import check_text, printable, unicode_problem
from specdec._files import check_output_file, run_abort_hooks
from specdec.kv import format_kv_plan, parse_bytes
from specdec.llm import check_attention_backend

KV_DTYPES = ("f32", "f16", "bf16", "int8")
DEVICE_TYPES = ("cpu", "gpu", "accelerator", "other")  # DeviceInfo.type


def _print(text: object) -> None:
    """A line (or lines) of output with control characters escaped: names, paths and messages
    from model files are printed, and an ESC sequence in them must not act on the terminal."""
    print(printable(text, keep="\n"))


def _cmd_devices(args: argparse.Namespace) -> int:
    devs = specdec.devices()
    native = specdec.Context("native").device
    if args.json:
        _print(json.dumps([native.as_dict()] + [{"kind": "opencl", **d.as_dict()} for d in devs], indent=2))
        return 0
    _print("native (specdec's own CPU device: device='native' or SPECDEC_DEVICE=native):")
    _print(f"  {native.name}; path {native.platform[len('specdec native ('):-1]}; "
           f"{native.compute_units} thread(s) (SPECDEC_CPU_THREADS); {native.global_mem_bytes >> 20} MiB")
    selector = os.environ.get("SPECDEC_DEVICE", "").lower()  # as device::open reads it
    if selector == "native" or (selector in ("", "auto") and specdec._core.auto_is_native()):
        default = f"native: {native.name} ({native.platform})"
    else:
        try:
            chosen = specdec.select_device("")
            default = f"{chosen.index}: {chosen.name}"
        except (ValueError, RuntimeError) as e:  # e.g. SPECDEC_DEVICE=ocl:gpu and no such device
            default = f"none ({e})"
    if not devs:
        _print("no OpenCL device found (on Debian: apt-get install pocl-opencl-icd; check `clinfo -l`)")
        _print(f"default device (SPECDEC_DEVICE or auto): {default}")
        return 0
    _print(f"{len(devs)} OpenCL device(s):")
    for d in devs:
        _print(f"  {d.summary()}")
        _print(f"      vendor {d.vendor}; driver {d.driver_version}; {d.opencl_c_version}; "
               f"max alloc {d.max_alloc_bytes >> 20} MiB; local mem {d.local_mem_bytes >> 10} KiB; "
               f"max work-group {d.max_work_group_size}; fp16 {'yes' if d.fp16 else 'no'}; "
               f"fp64 {'yes' if d.fp64 else 'no'}"
               + (f"; CPU features {' '.join(d.cpu_features) or 'none'}" if d.type == "cpu" else ""))
    _print(f"default device (SPECDEC_DEVICE or auto: native unless an OpenCL GPU or accelerator is "
           f"present): {default}")
    return 0


def _model_layers(name: str, args: argparse.Namespace) -> tuple:
    config = specdec.load_model_config(name)
    return config.layer_kv_specs(args.block_size, args.dtype), config.context_length


def _cmd_models(args: argparse.Namespace) -> int:
    models = specdec.list_models(deep=args.verify)
    if args.json:
        _print(json.dumps(models, indent=2))
        return 0
    _print(f"Models known to specdec (cache: {specdec.cache_dir()}; fetch with `specdec fetch NAME`)")
    for m in models:
        _print(f"  {m['name']:38s} {m['architecture']:8s} {m['gguf_bytes'] / 2**20:7.1f} MiB  "
               f"{m['status']:8s} {m['description']}")
    return 0


def _cmd_fetch(args: argparse.Namespace) -> int:
    names = [m["name"] for m in specdec.list_models()] if args.all else args.names
    if not names:
        raise ValueError("fetch needs NAME ... or --all (see `specdec models`)")
    for name in names:
        path = specdec.fetch(name, force=args.force, progress=not args.quiet)
        _print(path)
    return 0


def _cmd_draft_vocab(args: argparse.Namespace) -> int:
    from specdec import draft_vocab as dv
    from specdec.hub import _Progress
    out = check_text("--out", args.out)
    check_output_file(out, "--out")  # before anything is read: a symlink, device, typo'd folder
    files = dv.corpus_files(args.paths)
    if not files:
        raise ValueError(f"paths = {args.paths!r}: no text files there (suffixes "
                         f"{', '.join(dv.TEXT_SUFFIXES)})")
    path = specdec.resolve_model(args.model, progress=True)
    tok = specdec.Tokenizer.from_file(path)
    bar = _Progress(f"count tokens ({len(files)} files)", sum(f.stat().st_size for f in files),
                    None if args.quiet else sys.stderr)
    stats = dv.count_tokens(tok, files, tok.vocab_size, args.max_chars, bar.advance)
    bar.finish()
    doc = dv.write_draft_vocab(out, Path(path).name, tok, tok.vocab_size, stats, args.paths)
    counts = [c for _, c in doc["token_counts"]]
    total = max(1, doc["num_tokens"])
    _print(f"{out}: {doc['num_tokens']} tokens from {doc['num_files']} files, "
           f"{len(counts)} of {tok.vocab_size} ids seen")
    for n in (4096, 8192, 16384, 32768, 65536):
        if n < tok.vocab_size:
            _print(f"  the top {n:6d} ids cover {100 * sum(counts[:n]) / total:6.2f} % of the tokens")
    return 0


def _budget_flag(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """A command whose planner errors about ``kv_cache_memory_bytes`` name its ``--budget``."""
    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except ValueError as err:
            if str(err).startswith("kv_cache_memory_bytes"):
                raise ValueError(f"--budget: {err}") from None
            raise
    return run


@_budget_flag
def _cmd_inspect(args: argparse.Namespace) -> int:
    budget = parse_bytes(args.budget, "--budget")
    info = specdec.inspect_model(args.model, budget, args.max_model_len, args.block_size,
                                 args.dtype, progress=not args.json)
    if args.json:
        info.pop("_plan")
        _print(json.dumps(info, indent=2))
    else:
        _print(specdec.format_inspect(info))
    if not info["runnable"]:  # described, but LLM would refuse it: say so in the status too
        return _fail(f"{info['path']}: specdec cannot run this model: {info['unsupported']}")
    return 0


def _cmd_generate(args: argparse.Namespace) -> int:
    # everything is checked before the model is fetched or its weights are loaded
    prompt = check_text("--prompt", args.prompt)
    params = specdec.SamplingParams(temperature=args.temperature, top_k=args.top_k,
                                    top_p=args.top_p, seed=args.seed, max_tokens=args.max_tokens)
    check_attention_backend(args.attention_backend, "--attention-backend")
    if args.device is not None:
        specdec.select_device(check_text("--device", args.device))
    if args.kv_cache_memory != "auto":
        parse_bytes(args.kv_cache_memory, "--kv-cache-memory")
    from specdec.speculative import build_speculation
    if args.compare_plain and args.speculative_config is None:
        raise ValueError("--compare-plain: compares speculative decoding with plain decoding; "
                         "give --speculative-config too")
    try:
        # checked before anything loads; a custom proposer's module is imported once, by LLM
        build_speculation(args.speculative_config, load=False)
    except ValueError as e:
        raise ValueError(f"--speculative-config: {e}") from None
    path = specdec.resolve_model(args.model, progress=True)
    # what the file alone tells (config, tokenizer): checked before the weights load
    context_length = specdec.load_model_config(path).context_length
    max_model_len = args.max_model_len
    if max_model_len is None:  # the model's context, up to 4096
        max_model_len = min(4096, context_length)
    elif max_model_len == 0:
        max_model_len = context_length
    elif max_model_len == 1:
        raise ValueError("--max-model-len = 1: 0 (the model's context length) or at least 2 "
                         "(a prompt token and a generated one)")
    if max_model_len > context_length:
        raise ValueError(f"--max-model-len = {max_model_len}: at most the model's context "
                         f"length {context_length}")
    tokenizer = specdec.Tokenizer.from_file(path)
    messages = [{"role": "user", "content": prompt}]
    template = _chat_template_arg(args.chat_template)
    if template is not None and not args.chat:
        raise ValueError("--chat-template: applies with --chat (add --chat)")
    if args.chat:
        if not tokenizer.chat_template and template is None:
            raise ValueError(f"--chat: {path} has no chat template (tokenizer.chat_template); "
                             "give one with --chat-template, or write the prompt in the model's "
                             "format without --chat")
        if args.parse_special:
            text = tokenizer.apply_chat_template(messages, chat_template=template)
            bos = tokenizer.bos_token_id  # the text holds the template's BOS, if it writes one
            written = bos is not None and text.startswith(tokenizer.token_text(bos))
            ids = tokenizer.encode(text, add_special=not written, parse_special=True)
        else:
            ids = tokenizer.apply_chat_template(messages, tokenize=True, chat_template=template)
    else:
        ids = tokenizer.encode(prompt, add_special=True, parse_special=args.parse_special)
    if len(ids) >= max_model_len:
        raise ValueError(f"--prompt: {len(ids)} tokens; at most --max-model-len - 1 = "
                         f"{max_model_len - 1} fit with one generated token")
    llm = specdec.LLM(path, device=args.device, attention_backend=args.attention_backend,
                      max_model_len=max_model_len, kv_cache_memory_bytes=args.kv_cache_memory,
                      memory_utilization=args.memory_utilization,
                      max_num_seqs=1,  # one prompt: the KV cache of one request, not sixteen
                      progress=True, speculative_config=args.speculative_config,
                      disable_hybrid_kv_cache_manager=args.disable_hybrid_kv_cache_manager)
    sys.stderr.write(f"[{llm.config.architecture}, {llm.config.num_layers} layers, attention "
                     f"{'/'.join(sorted(set(llm.runner.attention_backends)))}, device "
                     f"{llm.context.device.name}]\n")
    sys.stderr.write(f"[warm-up: every kernel variant built and run once in {llm.warm_up_seconds:.1f} s "
                     "(OpenCL compiles at first launch; cached on disk after the first run)]\n")
    if llm.speculative_config is not None:
        sc = llm.speculative_config
        drafter = ""
        if llm.drafter is not None:
            drafter = (f", drafter {llm.drafter.config.architecture} {llm.drafter.config.num_layers} "
                       f"layers, attention {'/'.join(sorted(set(llm.drafter.attention_backends)))}, "
                       f"KV {llm.kv_split['drafter_bytes'] / 2**20:.0f} MiB of "
                       f"{(llm.kv_split['drafter_bytes'] + llm.kv_split['target_bytes']) / 2**20:.0f}")
        if sc.method == "layer_skip":
            drafter = (f", the target's first {sc.exit_layer} of {llm.runner.config.num_layers} layers"
                       if sc.exit_layer != "auto" else
                       f", exit layer chosen from {llm.engine.core.proposer.candidates} of "
                       f"{llm.runner.config.num_layers} layers as measured")
        sys.stderr.write(f"[speculative: {sc.method}, k = {sc.num_speculative_tokens}{drafter}]\n")

    # generated text is the model's (its token texts come from the file): on a terminal, control
    # characters are shown escaped so that a hostile vocabulary cannot act on it (newlines and
    # tabs stay); piped or redirected output is the model's text byte for byte
    on_terminal = sys.stdout.isatty()

    def emit(_rid: str, text: str) -> None:
        sys.stdout.write(printable(text, keep="\n\t") if on_terminal else text)
        sys.stdout.flush()

    # the ids checked above: with --chat the template's markers are the only control tokens
    # (LLM.chat's encoding) unless --parse-special lets the user's text carry its own
    if not args.chat:
        sys.stdout.write(printable(prompt, keep="\n\t") if on_terminal else prompt)
    out = llm.generate({"prompt": prompt, "prompt_token_ids": ids}, params, on_token=emit)[0]
    m = llm.last_metrics
    sys.stdout.write("\n")
    sys.stdout.flush()
    sys.stderr.write(f"prefill {m['prefill_tokens']} tokens at {m['prefill_tokens_per_s']:.1f} "
                     f"tokens/s; decode {m['decode_tokens']} tokens at "
                     f"{m['decode_tokens_per_s']:.1f} tokens/s; finish: "
                     f"{out.outputs[0].finish_reason}\n")
    if llm.speculative_config is not None:
        per_pos = ", ".join(f"{r:.2f}" for r in m["acceptance_rate_per_pos"])
        rate = m["acceptance_rate"]
        sys.stderr.write(
            f"speculative: {m['num_drafts']} drafts, {m['num_draft_tokens']} draft tokens, "
            f"{m['num_accepted_tokens']} accepted ({'n/a' if rate != rate else f'{100 * rate:.1f} %'}); "
            f"mean acceptance length {m['mean_acceptance_length']:.2f}; acceptance per position "
            f"[{per_pos}]\n")
        proposer = llm.engine.core.proposer
        if llm.speculative_config.method == "layer_skip" and proposer.is_auto:
            tried = ", ".join(f"L={s['exit_layer']}: {s['drafts']} drafts, first position "
                              f"{s['acceptance_per_pos'][0] if s['acceptance_per_pos'] else float('nan'):.2f}"
                              for s in proposer.stats())
            sys.stderr.write(f"layer_skip auto: exit layer {proposer.exit_layer} now ({tried})\n")
    total = m["total_step_seconds"] or 1.0
    sys.stderr.write(f"time: draft {100 * m['draft_seconds'] / total:.1f} %, verify/forward "
                     f"{100 * m['forward_seconds'] / total:.1f} %, sampling "
                     f"{100 * m['sampling_seconds'] / total:.1f} %, host "
                     f"{100 * m['host_seconds'] / total:.1f} % of {m['total_step_seconds']:.2f} s\n")
    if args.json_metrics:
        sys.stderr.write(json.dumps({k: (None if isinstance(v, float) and v != v else v)
                                     for k, v in m.items()}) + "\n")
    if args.compare_plain:
        _compare_plain(llm, ids, params, out)
    return 0


def _chat_template_arg(value: Optional[str]) -> Optional[str]:
    """--chat-template: the text of a file when it names one, else the value (a template name or
    Jinja source, checked where it is used)."""
    if value is None:
        return None
    check_text("--chat-template", value, "a file, a template name or Jinja source", empty_ok=False)
    if os.path.isfile(value):
        try:
            with open(value, encoding="utf-8") as f:
                return f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise ValueError(f"--chat-template = {value!r}: cannot read it as UTF-8 text ({e})") from None
    return value


def _cmd_serve(args: argparse.Namespace) -> int:
    """Loads the model (interruptible), then serves it with uvicorn in the main thread, so Ctrl-C
    and SIGTERM shut the server down gracefully. With --ray: replicas on Ray Serve."""
    try:
        import uvicorn  # noqa: F401 - checked before the model loads
        from specdec.server.app import build_app
    except ImportError as e:
        raise ValueError(f"specdec serve needs fastapi, uvicorn and prometheus_client ({e}); "
                         "install them with: pip install 'specdec[serve]' (or pip install '.[serve]')") from None
    if args.ray:
        try:
            from specdec.server.ray_serve import run_cli
        except ImportError as e:  # Ray is an optional extra: say how to get it
            raise ValueError(str(e)) from None
        return run_cli(args)
    _check_ray_flags(args)
    setup = serve_setup(args, interruptible=True)
    from specdec.server import plan_text
    sys.stderr.write(plan_text(setup.llm, setup.name, args.host, args.port, setup.api_key,
                               setup.max_pending) + "\n")
    sys.stderr.flush()
    import uvicorn
    app = build_app(setup.llm, setup.name, setup.api_key, setup.max_pending,
                    chat_template=setup.template, limits=setup.limits)

    def after_shutdown(sig: int, _frame: object) -> None:
        # uvicorn shuts down gracefully on SIGINT / SIGTERM, then raises the signal again
        sys.stderr.write(f"specdec serve: shut down ({signal.Signals(sig).name})\n")
        raise SystemExit(0 if sig == signal.SIGTERM else 130)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, after_shutdown)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level,
                timeout_graceful_shutdown=5, **setup.limits.uvicorn_options())
    return 0


RAY_FLAGS = ("num_replicas", "min_replicas", "max_replicas", "ray_address", "replica_cpus",
             "router", "router_kwargs", "target_waiting")


def _check_ray_flags(args: argparse.Namespace) -> None:
    """Ray's flags without --ray: an error naming them, not silently ignored."""
    given = [f for f in RAY_FLAGS if getattr(args, f, None) is not None]
    if given:
        flags = ", ".join("--" + f.replace("_", "-") for f in given)
        raise ValueError(f"{flags}: only with --ray (replicas on Ray Serve); without it specdec "
                         "serve is one server in this process")


def check_serve_args(args: argparse.Namespace) -> Optional[str]:
    """The serve flags checked before any model loads (also in the Ray driver, before any replica
    starts): the chat template's source (None: the model's own)."""
    if args.api_key is not None:
        check_text("--api-key", args.api_key, "a non-empty key", empty_ok=False)
    template = _chat_template_arg(args.chat_template)
    _serve_limits(args)  # a bad limit fails before the model loads
    check_attention_backend(args.attention_backend, "--attention-backend")
    if args.kv_cache_memory != "auto":
        parse_bytes(args.kv_cache_memory, "--kv-cache-memory")
    from specdec.speculative import build_speculation
    try:
        build_speculation(args.speculative_config, load=False)
    except ValueError as e:
        raise ValueError(f"--speculative-config: {e}") from None
    return template


@dataclass
class ServeSetup:
    """What one server serves: the loaded model and the options of its app."""
    llm: Any
    name: str
    api_key: Optional[str]
    max_pending: int
    template: Optional[str]
    limits: Any


def serve_setup(args: argparse.Namespace, interruptible: bool = False) -> ServeSetup:
    """Checks the serve flags, loads the model and checks the chat template: the same for
    ``specdec serve`` and for each of its Ray Serve replicas."""
    template = check_serve_args(args)
    api_key = args.api_key or os.environ.get("SPECDEC_API_KEY") or None
    if args.host not in ("127.0.0.1", "localhost", "::1") and not api_key:
        sys.stderr.write(f"specdec serve: warning: --host {args.host} without --api-key: anyone who "
                         "reaches this port can use the server\n")
    box: dict = {}

    def load(a: argparse.Namespace) -> int:
        if a.device is not None:
            specdec.select_device(check_text("--device", a.device))
        box["llm"] = specdec.LLM(
            a.model, device=a.device, attention_backend=a.attention_backend,
            max_model_len=a.max_model_len, kv_cache_memory_bytes=a.kv_cache_memory,
            memory_utilization=a.memory_utilization, max_num_seqs=a.max_num_seqs,
            max_num_batched_tokens=a.max_num_batched_tokens, progress=interruptible,
            speculative_config=a.speculative_config,
            disable_hybrid_kv_cache_manager=a.disable_hybrid_kv_cache_manager,
            enable_prefix_caching=not a.no_enable_prefix_caching)
        return 0

    if interruptible:
        _run_interruptible(load, args)
    else:
        load(args)
    llm = box["llm"]
    if template is not None:  # a template that cannot render one message fails here, not per request
        try:
            llm.tokenizer.apply_chat_template([{"role": "user", "content": "hi"}],
                                              chat_template=template)
        except ValueError as e:
            raise ValueError(f"--chat-template: {e}") from None
    name = args.served_model_name or os.path.basename(args.model)
    max_pending = args.max_pending or 4 * llm.max_num_seqs
    return ServeSetup(llm, name, api_key, max_pending, template, _serve_limits(args))


def _serve_limits(args: argparse.Namespace):
    """The server's limits on request bodies and headers from the serve flags."""
    from specdec.server.limits import ServeLimits
    return ServeLimits(max_body_bytes=parse_bytes(args.max_body_bytes, "--max-body-bytes"),
                       max_inflight_body_bytes=parse_bytes(args.max_inflight_body_bytes,
                                                           "--max-inflight-body-bytes"),
                       body_timeout_s=args.body_timeout, header_timeout_s=args.header_timeout,
                       limit_concurrency=args.limit_concurrency)


def _compare_plain(llm, ids, params, spec_out) -> None:
    """The same request decoded plainly on the same target runner; a side-by-side table."""
    from specdec.engine import LLMEngine
    sys.stderr.write("[plain decoding of the same prompt, for comparison]\n")
    engine = LLMEngine(llm.new_engine_core(max_num_seqs=16, max_num_batched_tokens=512, max_num_logits=128,
                                           enable_prefix_caching=False))
    req = llm._make_request({"prompt_token_ids": ids}, params, final_only=True)
    plain_out = None
    for item in engine.iterate(engine.add_request(req), [req.request_id]):
        if item.finished:
            plain_out = item.output
    sm, pm = spec_out.metrics, plain_out.metrics
    sc = llm.speculative_config
    name = f"{sc.method}{' ' + Path(sc.model).name if sc.model else ''} k={sc.num_speculative_tokens}"
    if sc.adaptive:
        name += " adaptive"
    rate = sm["acceptance_rate"]
    rows = [("plain", pm, "-", "-"),
            (name, sm, "n/a" if rate != rate else f"{100 * rate:.0f} %", f"{sm['mean_acceptance_length']:.2f}")]
    lines = [f"{'decoding':44s} {'tokens':>7s} {'tokens/s':>9s} {'acceptance':>11s} {'mean len':>9s} {'speedup':>8s}"]
    for label, mm, acc, mlen in rows:
        speed = mm["tokens_per_s"] / pm["tokens_per_s"] if pm["tokens_per_s"] else float("nan")
        lines.append(f"{label[:44]:44s} {mm['num_output_tokens']:>7d} "
                     f"{mm['tokens_per_s']:9.2f} {acc:>11s} {mlen:>9s} {speed:7.2f}x")
    same = list(plain_out.outputs[0].token_ids) == list(spec_out.outputs[0].token_ids)
    if params.temperature == 0:
        lines.append(f"identical output (greedy, lossless): {'yes' if same else 'NO'}")
    sys.stdout.write("\n" + printable("\n".join(lines), keep="\n") + "\n")
    sys.stdout.flush()
    if params.temperature == 0 and not same:
        raise RuntimeError("speculative output differed from plain decoding")


def _csv(kind: str, conv=str):
    def parse(text: str):
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"{text!r}: a comma-separated list of {kind}")
        try:
            return [conv(t) for t in items]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: a comma-separated list of {kind}") from None
    return parse


def _cmd_bench(args: argparse.Namespace) -> int:
    from specdec import bench
    for k in args.ks:
        if not 1 <= k <= 32:
            raise ValueError(f"--ks: {k}: each k in [1, 32]")
    if args.device is not None:
        specdec.select_device(check_text("--device", args.device))
    o = bench.BenchOptions(
        model=args.model, drafter=args.drafter, max_tokens=args.max_tokens, ks=args.ks,
        methods=args.methods, adaptive=not args.no_adaptive, adaptive_max_k=args.adaptive_max_k,
        categories=args.categories, peer=args.peer, peer_bin=args.peer_bin, threads=args.threads,
        out_dir=args.out, plots=not args.no_plots, kv_cache_memory=args.kv_cache_memory,
        draft_vocab_size=args.draft_vocab_size, draft_vocab_file=args.draft_vocab_file,
        repeats=args.repeats)
    result = bench.run(o)
    if not result["summary"]["all_lossless"]:
        sys.stderr.write("specdec bench: a speculative output differed from plain decoding\n")
        return 1
    return 0


def _example_layers(name: str, args: argparse.Namespace) -> tuple:
    known = {e["name"]: e for e in specdec.example_models()}
    if name not in known:
        raise ValueError(f"--example = {name!r}: known examples are {', '.join(known)}")
    layers = specdec.example_model_layers(name, args.block_size, args.dtype)
    return layers, known[name]["default_max_model_len"]


@_budget_flag
def _cmd_kv_plan(args: argparse.Namespace) -> int:
    if args.list_examples:
        for e in specdec.example_models():
            _print(f"{e['name']:20s} {e['description']}")
        return 0
    if bool(args.example) == bool(args.model):
        raise ValueError("kv-plan needs one of --model PATH_OR_NAME or --example NAME "
                         "(see --list-examples)")
    layers, default_len = (_example_layers(args.example, args) if args.example
                           else _model_layers(args.model, args))
    max_model_len = args.max_model_len or default_len
    budget = parse_bytes(args.budget, "--budget")
    if args.speculative_config:
        if not args.model:
            raise ValueError("--speculative-config needs --model (the target)")
        sc = _speculative_arg(args.speculative_config)
        if not sc.uses_drafter():
            _print(f"(method {sc.method}: no drafter, the whole budget is the target's)\n")
        else:
            # the split LLM(speculative_config=...) makes, then each model's plan
            from specdec.speculative import Speculation, drafter_unified
            target = specdec.resolve_model(args.model, progress=True)
            dc = sc.drafter_config()  # a hybrid's draft_model part
            drafter = Speculation(sc).resolve_drafter(True)  # a GGUF, or a DFlash directory
            split = Speculation(sc).split_budget(target, drafter, budget, args.max_model_len,
                                                 args.block_size, args.dtype, args.max_num_batched_tokens,
                                                 args.disable_hybrid_kv_cache_manager)
            d_layers, d_len = _model_layers(drafter, args)
            d_len = min(dc.max_model_len or max_model_len, max_model_len)
            _print(f"Target + drafter as the engine plans them: target {split['target_bytes'] / 2**20:.1f} "
                   f"MiB, drafter {split['drafter_bytes'] / 2**20:.1f} MiB of {budget / 2**20:.1f} MiB "
                   f"({split['rule']})\n\n[target]")
            _print(format_kv_plan(specdec.plan_kv_cache(
                layers, split["target_bytes"], max_model_len, args.max_num_batched_tokens, model_name=args.model,
                disable_hybrid_kv_cache_manager=args.disable_hybrid_kv_cache_manager)))
            _print("\n[drafter]")
            _print(format_kv_plan(specdec.plan_kv_cache(
                d_layers, split["drafter_bytes"], d_len, args.max_num_batched_tokens, model_name=dc.model,
                disable_hybrid_kv_cache_manager=drafter_unified(dc, specdec.load_model_config(drafter)))))
            return 0
    if args.drafter_example or args.drafter_model:
        drafter = args.drafter_example or args.drafter_model
        drafter_layers, _ = (_example_layers(drafter, args) if args.drafter_example
                             else _model_layers(drafter, args))
        plan = specdec.plan_target_and_drafter(
            layers, drafter_layers, budget, max_model_len, args.drafter_fraction,
            args.max_num_batched_tokens, args.example or args.model, drafter,
            target_disable_hybrid_kv_cache_manager=args.disable_hybrid_kv_cache_manager)
    else:
        plan = specdec.plan_kv_cache(layers, budget, max_model_len, args.max_num_batched_tokens,
                                     model_name=args.example or args.model,
                                     disable_hybrid_kv_cache_manager=args.disable_hybrid_kv_cache_manager)
    _print(json.dumps(json.loads(plan.to_json()), indent=2) if args.json else format_kv_plan(plan))
    if args.disable_hybrid_kv_cache_manager and not args.json:  # what the switch costs
        hybrid = _core.min_kv_cache_bytes(layers, max_model_len, args.max_num_batched_tokens, False)
        one = _core.min_kv_cache_bytes(layers, max_model_len, args.max_num_batched_tokens, True)
        _print(f"\nagainst the hybrid plan: one request of {max_model_len} tokens needs {one / 2**20:.2f} MiB "
               f"here, {hybrid / 2**20:.2f} MiB with the hybrid manager ({one / hybrid:.2f}x)")
    return 0


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _print_backends(device_type: str) -> None:
    order = specdec.attention_priority(device_type)
    _print(f"Attention backends (auto-selection order on a {device_type} device: {', '.join(order)})")
    for b in specdec.attention_backends():
        heads = (", ".join(map(str, b["head_sizes"])) if b["head_sizes"]
                 else f"1..{b['max_head_size']}")
        _print(f"  {b['name']:10s} {b['description']}")
        _print(f"             layout {b['kv_layout']} (reads {', '.join(b['reads_layouts'])}); dtypes {', '.join(b['kv_cache_dtypes'])}; head sizes "
               f"{heads}; block size multiple of {b['block_size_multiple_of']}"
               f"{' up to ' + str(b['max_block_size']) if b['max_block_size'] else ''}; MLA {b['mla']}; "
               f"causal {_yes(b['causal'])}; non-causal {_yes(b['non_causal'])}; sliding window "
               f"{_yes(b['sliding_window'])}; chunked local {_yes(b['chunked_local'])}; softcap "
               f"{_yes(b['logit_softcap'])}; sinks {_yes(b['sinks'])}; head_size_v != head_size "
               f"{_yes(b['separate_head_size_v'])}; {'device' if b['on_device'] else 'host'}")


def _explain_model(title: str, example: str, args: argparse.Namespace, backend: Optional[str],
                   non_causal: bool, device_type: str, model: Optional[str] = None) -> None:
    if model is not None:  # a real model file: its own layers and head count
        mc = specdec.load_model_config(model)
        layers, num_q_heads, example = mc.layer_kv_specs(args.block_size, args.dtype), mc.num_q_heads, model
    else:
        layers, _ = _example_layers(example, args)
        num_q_heads = {e["name"]: e for e in specdec.example_models()}[example]["num_q_heads"]
    config = specdec.plan_kv_cache(layers, 0, 1 << 20,
                                   num_blocks_override=2, model_name=example)
    setup = specdec.initialize_attention(config, num_q_heads, backend, non_causal, device_type)
    _print(f"\n[{title}] {example}: {len(config.groups)} KV-cache group(s), "
           f"{len(setup.attention_groups)} attention group(s), {'non-causal' if non_causal else 'causal'}, "
           f"attention_backend={backend or 'auto'}")
    for line in setup.explain().rstrip().splitlines():
        _print("  " + line)


def _speculative_arg(text: str):
    from specdec.speculative import build_speculation
    try:
        return build_speculation(text, load=False).config  # planning: never imports a proposer
    except ValueError as e:
        raise ValueError(f"--speculative-config: {e}") from None


def _cmd_backends(args: argparse.Namespace) -> int:
    device_type = args.device_type or specdec.attention.default_device_type()
    _print_backends(device_type)
    if args.example:
        _explain_model("target", args.example, args, args.attention_backend, args.non_causal, device_type)
    if args.model:
        _explain_model("target", "", args, args.attention_backend, args.non_causal, device_type,
                       model=args.model)
    if args.speculative_config:
        sc = _speculative_arg(args.speculative_config)
        if sc.uses_drafter():  # the drafter's backend as the engine chooses it: its own, never inherited
            dc = sc.drafter_config()  # a hybrid's draft_model part
            from specdec.speculative import Speculation
            drafter = Speculation(sc).resolve_drafter(True)
            # a DFlash drafter attends both ways: its backend is chosen for non-causal attention
            _explain_model("drafter", "", args, dc.attention_backend, dc.method == "dflash", device_type,
                           model=drafter)
        else:
            _print(f"\n[drafter] none: method {sc.method} drafts without a model")
    if args.drafter_example:
        _explain_model("drafter", args.drafter_example, args, args.drafter_attention_backend,
                       args.drafter_non_causal, device_type)
    return 0


def _int_in(lo: int, hi: int):
    """An argparse type: an int in [lo, hi], else a clear error naming the range."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: not an integer; an integer in "
                                             f"[{lo}, {hi}]") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{text!r}: outside [{lo}, {hi}]")
        return value
    return parse


def _float_in(allowed: str, ok: Callable[[float], bool]):
    """An argparse type: a finite float for which ``ok`` holds, else an error naming ``allowed``."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: not a number; {allowed}") from None
        if not math.isfinite(value) or not ok(value):
            raise argparse.ArgumentTypeError(f"{text!r}: {allowed}")
        return value
    return parse


def _choice(allowed: Sequence[str]):
    def parse(text: str) -> str:
        if text.lower() not in allowed:
            raise argparse.ArgumentTypeError(f"{text!r}: one of {', '.join(allowed)}")
        return text.lower()
    return parse


MAX_TOKENS = 1 << 40


class _Parser(argparse.ArgumentParser):
    """argparse with errors as one line, ``specdec: error: ...``, exit 2 (subcommands too)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        # "argument --dtype: 'fp8': one of ..." -> "--dtype = 'fp8': one of ..."
        m = re.match(r"argument ([^:]+): (.*)", message, re.S)
        if m:
            flag, rest = m.group(1).split("/")[-1], m.group(2)
            message = f"{flag} = {rest}" if rest[:1] in "'\"" else f"{flag}: {rest}"
        sys.exit(_fail(message))


def _one_line(message: str) -> str:
    out = ""
    for line in (line.strip() for line in str(message).splitlines()):
        if line:
            out += ("" if not out else " " if out.endswith(":") else "; ") + line
    return out or "(no message)"


def _fail(message: str, status: int = 2) -> int:
    sys.stderr.write(f"specdec: error: {printable(_one_line(message))}\n")
    sys.stderr.flush()
    return status


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="specdec", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"specdec {specdec.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("devices", help="list the native CPU device and the OpenCL devices, with their main properties")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_devices)

    p = sub.add_parser("backends", help="attention backends, and which one each layer of a model gets")
    p.add_argument("--example", help="explain the choice for this built-in example model")
    p.add_argument("--model", help="explain the choice for a model file or catalog name")
    p.add_argument("--speculative-config", help="JSON as for generate: explain the drafter's choice "
                   "(its own attention_backend, chosen independently of the target's)")
    p.add_argument("--attention-backend", help="request a backend for the model (default: auto)")
    p.add_argument("--non-causal", action="store_true", help="the model needs non-causal attention")
    p.add_argument("--drafter-example", help="explain the choice for a drafter too (chosen independently)")
    p.add_argument("--drafter-attention-backend", help="request a backend for the drafter (default: auto)")
    p.add_argument("--drafter-non-causal", action="store_true",
                   help="the drafter needs non-causal attention (DFlash)")
    p.add_argument("--device-type", type=_choice(DEVICE_TYPES),
                   help="cpu, gpu, accelerator, other (default: the type of the selected device)")
    p.add_argument("--block-size", type=_int_in(1, 1 << 16), default=16, help="tokens per block (default 16)")
    p.add_argument("--dtype", type=_choice(KV_DTYPES), default="f16",
                   help="KV-cache dtype: f32, f16, bf16, int8")
    p.set_defaults(func=_cmd_backends)

    p = sub.add_parser("kv-plan", help="print the KV-cache plan of a model")
    p.add_argument("--example", help="built-in example model (see --list-examples)")
    p.add_argument("--model", help="a GGUF file, Hugging Face directory or catalog name")
    p.add_argument("--drafter-model", help="also plan this model as the drafter, same budget")
    p.add_argument("--speculative-config", help="JSON as for generate: plan target and drafter as "
                   "the engine will (the budget split between them, each model's own plan)")
    p.add_argument("--list-examples", action="store_true", help="list the built-in examples")
    p.add_argument("--budget", default="1GiB", help="KV-cache memory budget, e.g. 1GiB (default)")
    p.add_argument("--max-model-len", type=_int_in(0, MAX_TOKENS), default=0,
                   help="tokens per request (default: the model's context length)")
    p.add_argument("--max-num-batched-tokens", type=_int_in(1, MAX_TOKENS), default=2048,
                   help="most new tokens of one request in one step (default 2048)")
    p.add_argument("--block-size", type=_int_in(1, 1 << 16), default=16,
                   help="tokens per block (default 16)")
    p.add_argument("--dtype", type=_choice(KV_DTYPES), default="f16",
                   help="KV-cache dtype: f32, f16, bf16, int8")
    p.add_argument("--drafter-example", help="also plan this example as the drafter, same budget")
    p.add_argument("--drafter-fraction", type=_float_in("a number in (0, 1)", lambda v: 0 < v < 1),
                   default=None,
                   help="drafter's share of the budget (default: proportional to need)")
    p.add_argument("--disable-hybrid-kv-cache-manager", action="store_true",
                   help="every attention layer (the target's) in one KV-cache group managed as full "
                        "attention, as vLLM's switch; the plan is compared with the hybrid one")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_kv_plan)

    p = sub.add_parser("models", help="the real models specdec can fetch, and what is cached")
    p.add_argument("--verify", action="store_true", help="hash the cached files again")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_models)

    p = sub.add_parser("fetch", help="download models into the cache (pinned hashes checked)")
    p.add_argument("names", nargs="*", metavar="NAME", help="catalog names (see `specdec models`)")
    p.add_argument("--all", action="store_true", help="every model in the catalog")
    p.add_argument("--force", action="store_true", help="download again even when cached")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_fetch)

    p = sub.add_parser("inspect", help="architecture, tensors, tokenizer and KV plan of a model")
    p.add_argument("model", metavar="PATH_OR_NAME",
                   help="a GGUF file, Hugging Face directory or catalog name")
    p.add_argument("--budget", default="1GiB", help="KV-cache budget for the plan (default 1GiB)")
    p.add_argument("--max-model-len", type=_int_in(0, MAX_TOKENS), default=0,
                   help="tokens per request (default: context length, or what fits)")
    p.add_argument("--block-size", type=_int_in(1, 1 << 16), default=16, help="tokens per block")
    p.add_argument("--dtype", type=_choice(KV_DTYPES), default="f16",
                   help="KV-cache dtype: f32, f16, bf16, int8")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=_cmd_inspect)

    p = sub.add_parser("generate", help="generate text with a model (plain or speculative), streamed")
    p.add_argument("--model", required=True, help="a GGUF file, a Hugging Face directory or a catalog name")
    p.add_argument("--prompt", required=True, help="the prompt text")
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    p.add_argument("--chat-template", default=None,
                   help="with --chat: a Jinja file, Jinja source, or the name of one of the "
                        "model's templates (e.g. tool_use) instead of its default")
    p.add_argument("--max-tokens", type=_int_in(1, MAX_TOKENS), default=128, help="default 128")
    p.add_argument("--temperature", type=_float_in("a finite number >= 0", lambda v: v >= 0),
                   default=0.0, help="0 (default) is greedy")
    p.add_argument("--top-k", type=_int_in(-1, (1 << 31) - 1), default=0,
                   help="0 or -1: all tokens")
    p.add_argument("--top-p", type=_float_in("a number in (0, 1]", lambda v: 0 < v <= 1),
                   default=1.0)
    p.add_argument("--seed", type=_int_in(0, (1 << 63) - 1), default=None)
    p.add_argument("--device", default=None, help="device: native, ocl:<selector> or an OpenCL selector (default SPECDEC_DEVICE, else auto: the native CPU device unless an OpenCL GPU is present)")
    p.add_argument("--attention-backend", default=None, help="default: chosen per layer")
    p.add_argument("--max-model-len", type=_int_in(0, MAX_TOKENS), default=None,
                   help="tokens per request (default: the model's context length, at most 4096; "
                        "0: the model's context length)")
    p.add_argument("--parse-special", action="store_true",
                   help="control-token text in the prompt (e.g. <|im_start|>) becomes control "
                        "tokens (default: it stays text)")
    p.add_argument("--kv-cache-memory", default="auto",
                   help="KV-cache budget shared with the drafter, e.g. 2GiB (default auto: what "
                        "one request of --max-model-len needs, capped by --memory-utilization)")
    p.add_argument("--memory-utilization", default=None,
                   type=_float_in("a fraction in (0, 1]", lambda v: 0 < v <= 1),
                   help="the share of the device's memory that weights and KV cache may take "
                        "(default 0.5 on a CPU device, 0.9 on a GPU)")
    p.add_argument("--disable-hybrid-kv-cache-manager", action="store_true",
                   help="the target's attention layers in one KV-cache group managed as full attention "
                        "(vLLM's switch; the drafter's: disable_hybrid_kv_cache_manager in "
                        "--speculative-config)")
    p.add_argument("--speculative-config", default=None,
                   help='speculative decoding as JSON, vLLM\'s field names, e.g. \'{"method": '
                        '"draft_model", "model": "qwen2.5-coder-0.5b-instruct-q4_k_m", '
                        '"num_speculative_tokens": 4}\' (methods: draft_model, ngram, suffix, custom)')
    p.add_argument("--json-metrics", action="store_true",
                   help="print the metrics as one JSON object on stderr at the end")
    p.add_argument("--compare-plain", action="store_true",
                   help="with --speculative-config: decode the same prompt plainly afterwards and "
                        "print a side-by-side table (tokens/s, acceptance, speedup)")
    p.set_defaults(func=_cmd_generate)

    p = sub.add_parser("serve", help="an OpenAI-compatible server (completions, chat, streaming, "
                       "/metrics) with speculative decoding")
    p.add_argument("--model", required=True, help="a GGUF file, a Hugging Face directory or a catalog name")
    p.add_argument("--speculative-config", default=None,
                   help='JSON as for generate, e.g. \'{"method": "ngram", "num_speculative_tokens": 4}\'')
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=_int_in(0, 65535), default=8000, help="default 8000")
    p.add_argument("--api-key", default=None,
                   help="require 'Authorization: Bearer KEY' on /v1 (default: SPECDEC_API_KEY, else none)")
    p.add_argument("--served-model-name", default=None,
                   help="the model name clients send (default: the --model argument's file name)")
    p.add_argument("--max-num-seqs", type=_int_in(1, 1 << 16), default=16,
                   help="requests batched in one engine step (default 16)")
    p.add_argument("--max-pending", type=_int_in(0, 1 << 20), default=0,
                   help="requests in flight before new ones get 503 (default 4 x --max-num-seqs)")
    p.add_argument("--max-num-batched-tokens", type=_int_in(1, 1 << 20), default=512,
                   help="tokens of one engine step (default 512)")
    p.add_argument("--max-model-len", type=_int_in(0, MAX_TOKENS), default=0,
                   help="tokens per request (default 0: the model's context, lowered to fit memory)")
    p.add_argument("--kv-cache-memory", default="auto",
                   help="KV-cache bytes for target and drafter, e.g. 2GiB (default auto: sized from "
                        "--max-num-seqs requests of --max-model-len, capped by memory)")
    p.add_argument("--memory-utilization", type=_float_in("a fraction in (0, 1]", lambda v: 0 < v <= 1),
                   default=None, help="share of device memory the KV cache may take (default 0.5 on a CPU)")
    p.add_argument("--device", default=None, help="device: native, ocl:<selector> or an OpenCL selector (default SPECDEC_DEVICE, else auto: the native CPU device unless an OpenCL GPU is present)")
    p.add_argument("--attention-backend", default=None, help="default: chosen per layer")
    p.add_argument("--disable-hybrid-kv-cache-manager", action="store_true",
                   help="one KV-cache group managed as full attention (vLLM's switch)")
    p.add_argument("--no-enable-prefix-caching", action="store_true",
                   help="turn automatic prefix caching off (on by default)")
    p.add_argument("--chat-template", default=None,
                   help="for /v1/chat/completions: a Jinja file, Jinja source, or the name of one "
                        "of the model's templates (default: the model's own)")
    seconds = _float_in("a number of seconds > 0", lambda v: v > 0)
    p.add_argument("--max-body-bytes", default="32MiB", help="largest request body (default 32MiB; more: 413)")
    p.add_argument("--max-inflight-body-bytes", default="128MiB",
                   help="request-body bytes held by all connections together (default 128MiB; more: 413)")
    p.add_argument("--body-timeout", type=seconds, default=60.0,
                   help="seconds a request body may take to arrive after its headers (default 60; then 408)")
    p.add_argument("--header-timeout", type=seconds, default=10.0,
                   help="seconds for request headers to arrive on a connection (default 10; then it is closed)")
    p.add_argument("--limit-concurrency", type=_int_in(0, 1 << 20), default=1024,
                   help="connections before new requests get 503 (default 1024; 0: no limit)")
    p.add_argument("--log-level", choices=["critical", "error", "warning", "info", "debug"], default="info")
    g = p.add_argument_group("replicas on Ray Serve (pip install 'specdec[ray]'; docs/serving.md)")
    g.add_argument("--ray", action="store_true",
                   help="serve with replicas on Ray Serve: an ingress routing by prompt prefix, then load")
    g.add_argument("--num-replicas", type=_int_in(1, 1 << 12), default=None,
                   help="engine replicas (default 1; with --min-replicas / --max-replicas: the start)")
    g.add_argument("--min-replicas", type=_int_in(1, 1 << 12), default=None,
                   help="autoscale on the engines' waiting queues down to this many replicas")
    g.add_argument("--max-replicas", type=_int_in(1, 1 << 12), default=None,
                   help="autoscale on the engines' waiting queues up to this many replicas")
    g.add_argument("--target-waiting", type=_float_in("a number of requests > 0", lambda v: v > 0),
                   default=None, help="autoscaling: waiting requests per replica before one more "
                                      "starts (default 2)")
    g.add_argument("--replica-cpus", type=_float_in("a number of CPUs > 0", lambda v: v > 0),
                   default=None, help="Ray CPUs reserved by each replica (default 1); its threads: "
                                      "SPECDEC_CPU_THREADS in the workers' environment")
    g.add_argument("--ray-address", default=None,
                   help="the Ray cluster to join (default: RAY_ADDRESS, else a local one started here)")
    g.add_argument("--router", choices=["prefix", "ray-default"], default=None,
                   help="prefix: prefix affinity then load (default); ray-default: Ray Serve's own "
                        "power-of-two-choices router (for comparison)")
    g.add_argument("--router-kwargs", default=None,
                   help='the prefix router\'s options as JSON: block_chars (16), min_match_chars '
                        '(64), max_imbalance (4), capacity (131072), e.g. \'{"max_imbalance": 2}\'')
    p.set_defaults(func=_cmd_serve, main_thread=True)

    p = sub.add_parser("draft-vocab", help="count tokens over text files for a drafter's reduced "
                                           "vocabulary (speculative_config.draft_vocab_file)")
    p.add_argument("model", help="the drafter (GGUF path, Hugging Face directory or catalog name): its tokenizer counts")
    p.add_argument("paths", nargs="+", help="text files, or folders (their text files by suffix)")
    p.add_argument("--out", required=True,
                   help="the JSON file to write (a regular file or a new name in an existing folder)")
    p.add_argument("--max-chars", type=_int_in(0, 1 << 40), default=0,
                   help="stop after this many characters (default 0: all)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_draft_vocab)

    p = sub.add_parser("bench", help="plain vs speculative decoding (every method, several k, "
                                     "adaptive) on built-in prompts, llama.cpp side by side; JSON "
                                     "and PNG plots")
    p.add_argument("--model", default="qwen2.5-coder-1.5b-instruct-q4_k_m",
                   help="target (GGUF path, Hugging Face directory or catalog name; default the Qwen2.5-Coder 1.5B)")
    p.add_argument("--drafter", default="qwen2.5-coder-0.5b-instruct-q4_k_m",
                   help="draft model for method draft_model (default the Qwen2.5-Coder 0.5B)")
    p.add_argument("--max-tokens", type=_int_in(1, 4096), default=128, help="per prompt (default 128)")
    p.add_argument("--ks", type=_csv("integers", int), default=[2, 4],
                   help="draft lengths to try per method (default 2,4)")
    p.add_argument("--methods", type=_csv("methods"), default=["draft_model", "ngram", "suffix"],
                   help="draft_model, ngram, suffix, layer_skip (exit layer auto), hybrid (suffix + "
                        "draft_model) (default the first three)")
    p.add_argument("--categories", type=_csv("categories"),
                   default=["code_generation", "code_editing", "chat", "summarisation"],
                   help="prompt categories (default all four)")
    p.add_argument("--repeats", type=_int_in(1, 10), default=1,
                   help="rounds over every mode, the order reversed every other round; a row gives "
                        "the median and its speedup the median of same-round ratios to plain "
                        "(default 1)")
    p.add_argument("--no-adaptive", action="store_true", help="skip adaptive speculation")
    p.add_argument("--adaptive-max-k", type=_int_in(1, 32), default=6,
                   help="largest k adaptive speculation may pick (default 6)")
    p.add_argument("--draft-vocab-size", type=_int_in(0, 1 << 31), default=0,
                   help="also run draft_model with a reduced draft vocabulary of this many ids "
                        "(FR-Spec style; default 0: not)")
    p.add_argument("--draft-vocab-file", default=None,
                   help="its ranking: token counts written by `specdec draft-vocab` (default: lowest ids)")
    p.add_argument("--peer", choices=["auto", "off", "require"], default="auto",
                   help="llama.cpp side by side: auto (when its tools are built), off, require")
    p.add_argument("--peer-bin", default=None,
                   help="llama.cpp tools (default $SPECDEC_PEER_BIN, else <model cache>/peer-llama.cpp/bin "
                        "where bench/setup_peer_tools.sh installs them; never the working directory)")
    p.add_argument("--threads", type=_int_in(0, 1024), default=0,
                   help="llama.cpp threads (default 0: all cores, like specdec)")
    p.add_argument("--kv-cache-memory", default="512MiB", help="target KV budget (default 512MiB)")
    p.add_argument("--device", default=None, help="device: native, ocl:<selector> or an OpenCL selector (default SPECDEC_DEVICE, else auto: the native CPU device unless an OpenCL GPU is present)")
    p.add_argument("--out", default="bench/out",
                   help="output folder (bench.json, *.png), created when missing (its parent must "
                        "exist, except for the default bench/out)")
    p.add_argument("--no-plots", action="store_true", help="JSON only (no matplotlib needed)")
    p.set_defaults(func=_cmd_bench)
    return parser


def _run_interruptible(func: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Runs the command in a worker thread so that Ctrl-C is seen at once, even while a long step
    runs in C++ (which Python cannot interrupt): the main thread prints one line and leaves."""
    result: dict = {}

    def work() -> None:
        try:
            result["status"] = func(args)
        except BaseException as err:  # handed to the main thread
            result["error"] = err

    worker = threading.Thread(target=work, name="specdec-command", daemon=True)
    previous = _catch_sigterm()
    worker.start()
    try:
        while worker.is_alive():
            worker.join(0.1)
    except KeyboardInterrupt:
        _interrupted()
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if "error" in result:
        raise result["error"]
    return int(result.get("status") or 0)


def _catch_sigterm() -> Optional[object]:
    """SIGTERM (a supervisor ending specdec) leaves like Ctrl-C: one line, ``specdec:
    terminated``, exit status 143 (128 + 15). The handler it replaces (to restore), or None
    outside the main thread (where no handler can be installed)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = signal.signal(signal.SIGTERM, lambda _sig, _frame: _interrupted(143, "terminated"))
    return signal.SIG_DFL if previous is None else previous


def _interrupted(status: int = 130, what: str = "interrupted") -> None:
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):  # a second signal must not cut the cleanup short
            signal.signal(sig, signal.SIG_IGN)
    try:
        sys.stdout.write("\n")  # ends a partly written line of output
        sys.stdout.flush()
    except Exception:  # noqa: BLE001 - a closed pipe must not hide the message
        pass
    sys.stderr.write(f"specdec: {what}\n")
    sys.stderr.flush()
    run_abort_hooks()  # child processes (pip download) and temporary files: nothing outlives us
    os._exit(status)  # the worker may be inside a device step: do not wait for it


USER_ERRORS: tuple = (ValueError, specdec.FetchError, UnicodeError, OSError)


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        parser = build_parser()  # Ctrl-C while it is built is handled too
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help, --version, or a usage error already printed
        return done.code if isinstance(done.code, int) else 0
    except KeyboardInterrupt:
        _interrupted()
    for name, value in vars(args).items():  # argv that is not UTF-8 arrives as lone surrogates
        if isinstance(value, str) and unicode_problem(value):
            return _fail(f"--{name.replace('_', '-')} = {value!r}: {unicode_problem(value)}; "
                         "arguments must be valid UTF-8")
    try:
        if getattr(args, "main_thread", False):  # serve: uvicorn handles Ctrl-C and SIGTERM
            return args.func(args)
        return _run_interruptible(args.func, args)
    except BrokenPipeError:  # output piped into head & co.
        sys.stdout = open(os.devnull, "w")
        return 0
    except KeyboardInterrupt:
        _interrupted()
    except _core.OpenCLError as err:  # the device failed: not the user's error, full message
        sys.stderr.write("specdec: OpenCL error: " + printable(err, keep="\n") + "\n")
        return 1
    except USER_ERRORS as err:
        return _fail(str(err))


if __name__ == "__main__":
    sys.exit(main())
