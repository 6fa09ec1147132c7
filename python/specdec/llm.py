"""``specdec.LLM``: generation, plain or speculative, with vLLM's names and output shapes.

    llm = specdec.LLM(model="qwen2.5-coder-1.5b-instruct-q4_k_m",
                      speculative_config={"method": "draft_model",
                                          "model": "qwen2.5-coder-0.5b-instruct-q4_k_m",
                                          "num_speculative_tokens": 4})
    out = llm.generate(["def fib(n):"], specdec.SamplingParams(temperature=0, max_tokens=32))
    print(out[0].outputs[0].text, out[0].metrics["mean_acceptance_length"])

``LLM`` is a thin API over the engine (``specdec.engine``): requests go to one ``LLMEngine`` loop,
whose step proposes drafts (n-gram, suffix tree, a draft model with its own KV cache and attention
backends, or a Python ``specdec.Proposer``), verifies every running request's ``[last token +
draft]`` rows in one batched target forward, accepts losslessly (greedy: the target's argmax;
sampling: rejection sampling) and rolls the rejected rows back. Without ``speculative_config``
the same step runs with empty drafts: plain decoding.

Thread safety: one ``LLM`` may be shared by threads; ``generate``/``chat``/``stream`` calls from
several threads join the same engine loop (their requests share each forward). Greedy outputs
are what each request gets alone (batch-invariant kernels); sampled outputs follow the target's
distribution, and a seeded request gets exactly the tokens plain decoding draws for its seed,
alone or batched, with or without speculation (its random numbers are a function of the seed and
the position; drafts are verified against the target's own draw: docs/speculative.md).

Prompt text is tokenized as text: control-token text such as ``<|im_start|>`` written in a prompt
or in a chat message stays text unless the caller opts in with ``parse_special=True``.
"""

from __future__ import annotations

import os
import re
import sys
import threading
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

import numpy as np

from specdec import _core
from specdec._checks import (check_bool, check_int, check_real, check_text,
                             check_token_ids, error)
from specdec.engine import EngineCore, LLMEngine, Request, StreamOutput
from specdec.hub import resolve_model
from specdec.kv import parse_bytes
from specdec.memory import KvSizing, log, size_kv_cache
from specdec.model import load_model_config
from specdec.outputs import RequestOutput, SamplingParams
from specdec.speculative import build_speculation, drafter_unified
from specdec.structured import StructuredOutputs, StructuredOutputsParams
from specdec.tokenizer import Tokenizer

PromptType = Union[str, Dict[str, Any]]
Message = Mapping[str, Any]


def check_attention_backend(value: Any, field: str = "attention_backend") -> Optional[str]:
    """None / "" / "auto", or the name of a registered backend (any case); ValueError otherwise,
    before anything is loaded."""
    if value is None:
        return None
    name = check_text(field, value, "None, 'auto' or a backend name")
    if name in ("", "auto"):
        return None
    known = [b["name"] for b in _core.attention_backends()]
    if name.upper() not in known:
        raise error(field, value, f"None, 'auto' or one of {', '.join(known)}")
    return name


def _load_progress(stream) -> Callable[[int, int], None]:
    """A weight-loading bar on `stream`: redrawn in place on a terminal; elsewhere (a log file, a
    pipe) a plain line at 0, 25, 50, 75 and 100 %, with no carriage returns."""
    state = {"last": 0.0, "start": time.monotonic(), "quarter": -1}
    tty = bool(getattr(stream, "isatty", None)) and stream.isatty()

    def report(done: int, total: int) -> None:
        now = time.monotonic()
        pct = 100 * done // max(total, 1)
        mib = f"{done / 2**20:.1f}/{total / 2**20:.1f} MiB ({now - state['start']:.1f} s)"
        if not tty:
            quarter = min(pct, 100) // 25
            if quarter > state["quarter"]:
                state["quarter"] = quarter
                stream.write(f"loading weights: {min(pct, 100)}% {mib}\n")
                stream.flush()
            return
        if done < total and now - state["last"] < 0.2:
            return
        state["last"] = now
        end = "\n" if done >= total else ""
        stream.write(f"\rloading weights [{'#' * (pct // 4):25s}] {pct:3d}% "
                     f"{done / 2**20:7.1f}/{total / 2**20:.1f} MiB "
                     f"({now - state['start']:.1f} s){end}")
        stream.flush()
    return report


def _weights_size(path: str) -> int:
    """Bytes of a model's weights: a GGUF file, or a checkpoint directory's safetensors."""
    if os.path.isdir(path):
        from specdec.model import weight_files
        return sum(f.stat().st_size for f in weight_files(path))
    return os.path.getsize(path)


class LLM:
    """A model on a device (OpenCL, or specdec's own CPU device: ``device="native"``), ready to generate.

    ``model``: a GGUF path, a Hugging Face model directory (config.json, model.safetensors or its
    shards, tokenizer.json; llama, qwen2, qwen3, gemma3) or a catalog name (``specdec models``),
    fetched into the cache on first use. ``device``: an index, ``P:D``, ``gpu``/``cpu`` or part of a name (default:
    ``SPECDEC_DEVICE`` or the first device; ``native``: specdec's own CPU device; ``ocl:<selector>``
    an OpenCL one). A draft model may run on another device (``speculative_config.device``).
    ``attention_backend``: None for automatic choice.
    ``kv_cache_memory_bytes``: None sizes the KV cache from ``max_num_seqs`` requests of
    ``max_model_len`` tokens (target and drafter), capped by ``memory_utilization`` of the
    device's memory less the weights (default 0.5 on a CPU device, 0.9 on a GPU);
    ``max_model_len`` 0 is the model's context, lowered with a notice when it does not fit
    (``specdec.memory``; ``llm.kv_sizing`` tells what was chosen).
    ``disable_hybrid_kv_cache_manager``: as vLLM's switch, every attention layer of the target in
    one KV-cache group managed as full attention (sliding-window and chunked-local layers keep
    their masks; their blocks are no longer freed early, so the cache needs more memory); the
    drafter's is ``speculative_config.disable_hybrid_kv_cache_manager``.
    ``enable_prefix_caching`` (vLLM's, on by default): full KV blocks of a prompt (and of what was
    generated) stay cached under their prefix after a request ends, in every KV-cache group of the
    target and of a draft model, and a later request with the same prefix starts after them
    (``llm.prefix_cache_stats()``: hit rate and prefill tokens saved). Outputs are identical with
    and without it. A DFlash drafter's context (the target's hidden states) is cached by the same
    prefixes, and a request starts after a prefix only as far as both caches hold it.
    """

    def __init__(self, model: str, device: Optional[str] = None,
                 attention_backend: Optional[str] = None, max_model_len: int = 0,
                 kv_cache_memory_bytes: Union[int, str, None] = None, block_size: int = 16,
                 kv_cache_dtype: str = "f16", max_num_batched_tokens: int = 512,
                 max_num_seqs: int = 16, progress: bool = True,
                 speculative_config: Any = None,
                 memory_utilization: Optional[float] = None,
                 disable_hybrid_kv_cache_manager: bool = False,
                 enable_prefix_caching: bool = True) -> None:
        # every argument is checked before anything is fetched or loaded
        if not isinstance(model, (str, os.PathLike)):
            raise error("model", model, "a GGUF path, a Hugging Face directory or a catalog name "
                        "(see `specdec models`)")
        check_text("model", os.fspath(model), "a GGUF path, a Hugging Face directory or a catalog name",
                   empty_ok=False)
        if device is not None:
            if isinstance(device, int) and not isinstance(device, bool) and device >= 0:
                device = str(device)  # an index
            check_text("device", device, "None, an index, or a device selector ('P:D', 'gpu', "
                       "'cpu' or part of a name)")
        attention_backend = check_attention_backend(attention_backend)
        allowed = "0 (the model's context length) or at least 2 (a prompt token and a generated one)"
        if check_int("max_model_len", max_model_len, 0, None, allowed) == 1:
            raise error("max_model_len", max_model_len, allowed)
        kv_bytes = None
        if kv_cache_memory_bytes is not None and kv_cache_memory_bytes != "auto":
            kv_bytes = parse_bytes(kv_cache_memory_bytes, "kv_cache_memory_bytes")
        if memory_utilization is not None:
            memory_utilization = check_real("memory_utilization", memory_utilization,
                                            "None or a fraction in (0, 1]", lambda v: 0 < v <= 1)
        check_int("block_size", block_size, 1, 1 << 16)
        check_text("kv_cache_dtype", kv_cache_dtype, "'f32', 'f16', 'bf16' or 'int8'")
        check_int("max_num_batched_tokens", max_num_batched_tokens, 1, 1 << 30)
        check_int("max_num_seqs", max_num_seqs, 1, 1 << 20)
        check_bool("progress", progress)
        check_bool("disable_hybrid_kv_cache_manager", disable_hybrid_kv_cache_manager)
        check_bool("enable_prefix_caching", enable_prefix_caching)
        self.disable_hybrid_kv_cache_manager = disable_hybrid_kv_cache_manager
        speculation = build_speculation(speculative_config)  # the config alone: checked now
        self.enable_prefix_caching = enable_prefix_caching
        self._local = threading.local()
        self.context = _core.Context(device or "")  # a bad device fails before any download
        self.drafter_context = self._drafter_context(speculation)
        self.model_path = resolve_model(os.fspath(model), progress=progress)
        stream = sys.stderr if progress else None
        self.tokenizer = Tokenizer.from_file(self.model_path)
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.speculative_config = speculation.config
        k = speculation.config.num_speculative_tokens if speculation.config is not None else 0
        # logit rows per step: 1 + k verify rows per running request, or prompt-logprobs chunks
        self.max_num_logits = max(128, max_num_seqs * (1 + k))
        drafter_path = speculation.resolve_drafter(progress)
        if drafter_path is not None:  # the target's file was read above: errors are the drafter's
            try:
                load_model_config(drafter_path)
                if speculation.config.drafter_config().method != "dflash":  # dflash: the target's vocabulary
                    _core.spec_decode.check_vocab_compatible(self.model_path, drafter_path)
            except ValueError as e:
                raise type(e)(f"speculative_config.model = {speculation.config.drafter_config().model!r}: "
                              f"{e}") from None
        # the KV cache: sized from the requests, capped by memory; max_model_len lowered to fit
        self.kv_sizing = self._size_kv_cache(drafter_path,
                                             speculation.config.drafter_config() if drafter_path else None,
                                             max_model_len, kv_bytes,
                                             memory_utilization, block_size, kv_cache_dtype,
                                             max_num_seqs, max_num_batched_tokens)
        max_model_len = self.kv_sizing.max_model_len
        self.kv_split = speculation.split_budget(self.model_path, drafter_path,
                                                 self.kv_sizing.kv_cache_memory_bytes, max_model_len,
                                                 block_size, kv_cache_dtype, max_num_batched_tokens,
                                                 disable_hybrid_kv_cache_manager)
        self.runner = _core.ModelRunner(
            self.context, self.model_path, attention_backend=attention_backend or "",
            max_model_len=max_model_len, kv_cache_memory_bytes=self.kv_split["target_bytes"],
            block_size=block_size, kv_cache_dtype=kv_cache_dtype,
            max_num_batched_tokens=max_num_batched_tokens, max_num_logits=self.max_num_logits,
            progress=_load_progress(stream) if stream else None,
            disable_hybrid_kv_cache_manager=disable_hybrid_kv_cache_manager,
            enable_prefix_caching=self.enable_prefix_caching)
        self.config = self.runner.config
        # off when the KV-cache groups' block sizes differ (the manager says so)
        self.enable_prefix_caching = bool(self.runner.prefix_cache_stats()["enabled"])
        self.drafter = None
        if drafter_path is not None:
            self.drafter = speculation.load_drafter(
                self.drafter_context, drafter_path, self.runner.max_model_len, self.kv_split["drafter_bytes"],
                block_size, kv_cache_dtype, max_num_batched_tokens, self.max_num_logits,
                _load_progress(stream) if stream else None, self.enable_prefix_caching)
        self.proposer = speculation.make_proposer(self.runner, self.drafter)
        self._next_id = 0
        self._id_lock = threading.Lock()
        # structured outputs: llguidance's view of the vocabulary and the compiled grammars
        self.structured_outputs = StructuredOutputs(self.tokenizer, self.config.vocab_size)
        self.last_metrics: Dict[str, float] = {}
        self._warm_up()
        self._prefix_followers = [self.drafter] if speculation.context_follows_target() else []
        self.engine = LLMEngine(self.new_engine_core(
            self.proposer, k,
            disable_by_batch_size=speculation.config.disable_by_batch_size if speculation.config is not None else 0,
            adaptive=speculation.config is not None and speculation.config.adaptive))

    def new_engine_core(self, proposer: Any = None, num_speculative_tokens: int = 0, *,
                        disable_by_batch_size: int = 0, adaptive: bool = False,
                        max_num_seqs: Optional[int] = None, max_num_batched_tokens: Optional[int] = None,
                        max_num_logits: Optional[int] = None,
                        enable_prefix_caching: Optional[bool] = None) -> EngineCore:
        """An engine core over this LLM's target runner and tokenizer: the one place engines are
        assembled (the LLM's own, the benchmark's and the CLI's plain comparison). Limits default
        to the LLM's; a DFlash drafter's context follows the target's prefix cache."""
        caching = self.enable_prefix_caching if enable_prefix_caching is None else enable_prefix_caching
        return EngineCore(
            self.runner, self.tokenizer, proposer, num_speculative_tokens,
            disable_by_batch_size=disable_by_batch_size,
            max_num_seqs=max_num_seqs or self.max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens or self.max_num_batched_tokens,
            max_num_logits=max_num_logits or self.max_num_logits,
            adaptive=adaptive, enable_prefix_caching=caching, structured=self.structured_outputs,
            # a DFlash drafter's context comes from the target's steps: its cache must hold any
            # prefix the target takes from its own
            prefix_followers=self._prefix_followers if caching else [])

    def _drafter_context(self, speculation) -> Any:
        """The drafting model's device: speculative_config.device, else the target's."""
        dc = speculation.config.drafter_config() if speculation.config is not None else None
        selector = getattr(dc, "device", None) if dc is not None else None
        if not selector:
            return self.context
        if selector.lower() == "native" and self.context.kind == "cpu":
            return self.context  # one native device: a second thread pool would only compete
        try:
            return _core.Context(selector)
        except ValueError as e:  # ConfigError / UnsupportedError kept; the field named once
            detail = re.sub(r"^device = '[^']*': ", "", str(e))
            raise type(e)(f"speculative_config.device = {selector!r}: {detail}") from None

    def _size_kv_cache(self, drafter_path: Optional[str], config: Any, max_model_len: int,
                       kv_bytes: Optional[int], memory_utilization: Optional[float], block_size: int,
                       dtype: str, max_num_seqs: int, max_num_batched_tokens: int) -> KvSizing:
        t_cfg = load_model_config(self.model_path)
        d_cfg = load_model_config(drafter_path) if drafter_path is not None else None
        if max_model_len > t_cfg.context_length:
            raise error("max_model_len", max_model_len,
                        f"at most the model's context length {t_cfg.context_length}")
        weights = _weights_size(self.model_path) + (_weights_size(drafter_path) if drafter_path is not None else 0)
        sizing = size_kv_cache(
            t_cfg, d_cfg, max_model_len=max_model_len,
            drafter_max_model_len=(min(config.max_model_len or d_cfg.context_length,
                                       d_cfg.context_length) if d_cfg is not None else 0),
            drafter_kv_bytes=config.draft_kv_cache_memory_bytes if d_cfg is not None else 0,
            drafter_fraction=config.draft_kv_cache_fraction if d_cfg is not None else 0.0,
            kv_cache_memory_bytes=kv_bytes, memory_utilization=memory_utilization,
            device=self.context.device, weights_bytes=weights, block_size=block_size,
            dtype=dtype.lower(), drafter_dtype=((config.kv_cache_dtype or dtype) if d_cfg is not None
                                                else dtype).lower(),
            max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
            disable_hybrid_kv_cache_manager=self.disable_hybrid_kv_cache_manager,
            drafter_disable_hybrid_kv_cache_manager=d_cfg is not None and drafter_unified(config, d_cfg))
        if sizing.notice:
            log.warning(sizing.notice)
        return sizing

    def _warm_up(self) -> None:
        """Launches every kernel variant the target's and the drafter's steps use, once, on
        throwaway tokens (`ModelRunner.warm_up`): OpenCL builds a kernel at its first launch
        (PoCL a work-group function per local size, cached on disk after), so after this no
        request pays a compilation. `warm_up_seconds` is what it took: the one-time compilation
        on a fresh machine, a few forwards after that."""
        start = time.perf_counter()
        for runner in (self.runner, self.drafter):
            if runner is not None:
                runner.warm_up()
        self.warm_up_seconds = time.perf_counter() - start

    def prefix_cache_stats(self) -> Dict[str, Any]:
        """Prefix caching of the target (and the drafter, under "drafter"): enabled, queries and
        hits (prompt tokens looked up / found cached: prefill tokens saved), hit_rate,
        cached_blocks per KV-cache group."""
        def one(runner) -> Dict[str, Any]:
            s = dict(runner.prefix_cache_stats())
            s["hit_rate"] = s["hits"] / s["queries"] if s["queries"] else 0.0
            return s
        out = one(self.runner)
        if self.drafter is not None:
            out["drafter"] = one(self.drafter)
        return out

    def reset_prefix_cache(self) -> int:
        """Evicts every cached block no running request uses (target and drafter); returns how many."""
        return sum(r.reset_prefix_cache() for r in (self.runner, self.drafter) if r is not None)

    def get_tokenizer(self) -> Tokenizer:
        return self.tokenizer

    # ---- requests ----
    def _prompt_ids(self, prompt: Any, field: str, parse_special: bool) -> tuple:
        """(text, token ids) of one prompt, checked."""
        allowed = 'a string or {"prompt_token_ids": [...]} (optionally with "prompt": text)'
        if isinstance(prompt, str):
            text = check_text(field, prompt, allowed)
            ids = self.tokenizer.encode(text, add_special=True, parse_special=parse_special)
        elif isinstance(prompt, Mapping):
            unknown = sorted(set(prompt) - {"prompt_token_ids", "prompt"}, key=str)
            if "prompt_token_ids" not in prompt or unknown:
                raise error(field, prompt, allowed + (f"; unknown keys {unknown}" if unknown else ""))
            text = prompt.get("prompt")
            if text is not None:
                check_text(f"{field}['prompt']", text, "None or the prompt's text")
            ids = check_token_ids(f"{field}['prompt_token_ids']", prompt["prompt_token_ids"],
                                  self.config.vocab_size)
        else:
            raise error(field, prompt, allowed)
        if not ids:
            raise error(field, prompt, "a prompt of at least one token")
        if len(ids) >= self.runner.max_model_len:
            raise ValueError(f"{field}: {len(ids)} tokens; at most max_model_len - 1 = "
                             f"{self.runner.max_model_len - 1} fit with one generated token")
        return text, ids

    def _make_request(self, prompt: Any, params: SamplingParams, field: str = "prompt",
                      parse_special: bool = False, stream: bool = False, final_only: bool = False) -> Request:
        text, ids = self._prompt_ids(prompt, field, parse_special)
        with self._id_lock:
            rid = str(self._next_id)
            self._next_id += 1
        gen = None
        if not params.greedy:
            seed = params.seed if params.seed is not None else int.from_bytes(
                np.random.default_rng().bytes(8), "little")
            # a seeded request is verified coupled: its tokens are those plain decoding draws for
            # the seed, alone or batched, whatever the drafts (docs/speculative.md)
            gen = _core.SamplingGenerator(seed, coupled=params.seed is not None)
        req = Request(rid, text, params, _core.spec_decode.Sequence(rid, ids), gen)
        if params.structured_outputs is not None:  # compiled here, in the caller's thread
            req.constraint = self.structured_outputs.constraint(params.structured_outputs)
        if params.logprobs is not None:
            req.logprobs = []
        if params.prompt_logprobs is not None:
            req.prompt_logprobs = [None]
        if stream:
            req.stream = self.tokenizer.stream_decoder(special=not params.skip_special_tokens,
                                                       continuation=True)
        req.final_only = final_only  # its caller reads the finished output only: no per-step news
        return req

    def generate(self, prompts: Union[PromptType, Sequence[PromptType]],
                 sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
                 on_token: Optional[Callable[[str, str], None]] = None,
                 parse_special: bool = False) -> List[RequestOutput]:
        """Generates for every prompt; outputs in prompt order. ``on_token(request_id, text)``
        receives each request's new text as it is produced (streaming). ``parse_special=True``
        lets control-token text in string prompts (``<|im_start|>``) become control tokens (raw
        prompts that carry their own template); by default it stays text.

        Safe to call from several threads: calls are served one after another."""
        if isinstance(prompts, (bytes, bytearray)):
            raise error("prompts", prompts, "a string, a token-ids dict or a list of them (decode "
                        "bytes to str first)")
        single = isinstance(prompts, (str, Mapping))
        if not single and not isinstance(prompts, Iterable):
            raise error("prompts", prompts, "a string, a token-ids dict or a list of them")
        plist = [prompts] if single else list(prompts)
        return self._run(plist, sampling_params, on_token, parse_special, "prompts", not single)

    def chat(self, messages: Union[Sequence[Message], Sequence[Sequence[Message]]],
             sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
             on_token: Optional[Callable[[str, str], None]] = None,
             add_generation_prompt: bool = True, *,
             tools: Optional[Sequence[Mapping[str, Any]]] = None,
             chat_template: Optional[str] = None,
             continue_final_message: bool = False,
             chat_template_kwargs: Optional[Mapping[str, Any]] = None) -> List[RequestOutput]:
        """Generates replies to conversations (``[{"role": ..., "content": ...}, ...]``, or a list
        of them) rendered with the model's chat template, run as written (jinja2's sandbox; see
        ``Tokenizer.apply_chat_template`` for ``tools``, ``chat_template``,
        ``continue_final_message`` and ``chat_template_kwargs``). The template's own text is the
        only source of control tokens: message text is never parsed for them."""
        check_bool("add_generation_prompt", add_generation_prompt)
        if isinstance(messages, (list, tuple)) and messages and all(
                isinstance(c, (list, tuple)) for c in messages):
            convos = list(messages)
        else:
            convos = [messages]
        from specdec.chat_template import check_conversation  # (jinja2 only when chatting)

        prompts = []
        tok = self.tokenizer
        options = dict(tools=tools, chat_template=chat_template,
                       continue_final_message=continue_final_message,
                       chat_template_kwargs=chat_template_kwargs)
        for i, convo in enumerate(convos):
            field = "messages" if len(convos) == 1 else f"messages[{i}]"
            check_conversation(convo, field)
            text, ids = tok.chat_prompt(convo, add_generation_prompt, **options)
            prompts.append({"prompt": text, "prompt_token_ids": ids})
        return self._run(prompts, sampling_params, on_token, False, "messages", len(convos) > 1)

    def _params_list(self, sampling_params: Any, n: int) -> List[SamplingParams]:
        if sampling_params is None:
            sampling_params = SamplingParams()
        if isinstance(sampling_params, SamplingParams):
            params = [sampling_params] * n
        elif isinstance(sampling_params, (list, tuple)) and all(
                isinstance(p, SamplingParams) for p in sampling_params):
            params = list(sampling_params)
            if len(params) != n:
                raise ValueError(f"sampling_params: {len(params)} given for {n} prompts; "
                                 "give one SamplingParams, or one per prompt")
        else:
            raise error("sampling_params", sampling_params,
                        "None, a SamplingParams or a list of them (one per prompt)")
        for p in params:
            p._validate()  # fields may have been changed since construction
        return params

    def _run(self, plist: List[Any], sampling_params: Any, on_token: Any, parse_special: bool,
             field: str, indexed: bool) -> List[RequestOutput]:
        check_bool("parse_special", parse_special)
        if on_token is not None and not callable(on_token):
            raise error("on_token", on_token, "None or a callable (request_id, text)")
        params = self._params_list(sampling_params, len(plist))
        if getattr(self._local, "in_callback", False):
            raise RuntimeError("LLM.generate was called from inside its own on_token callback; "
                               "call it after the running generate returns")
        reqs = [self._make_request(p, sp, f"{field}[{i}]" if indexed else field, parse_special,
                                   stream=on_token is not None, final_only=on_token is None)
                for i, (p, sp) in enumerate(zip(plist, params))]
        outputs: Dict[str, RequestOutput] = {}
        before = self.engine.core.stats.as_dict()
        t_start = time.monotonic()
        for item in self._iterate(reqs):
            if on_token is not None and item.new_text:
                self._local.in_callback = True
                try:
                    on_token(item.request_id, item.new_text)
                finally:
                    self._local.in_callback = False
            if item.output is not None:
                outputs[item.request_id] = item.output
        self.last_metrics = self._call_metrics(before, [outputs[r.request_id] for r in reqs],
                                               time.monotonic() - t_start)
        return [outputs[r.request_id] for r in reqs]

    def _iterate(self, reqs: List[Request]):
        """Adds reqs to the engine and yields their StreamOutputs; aborts them if the caller
        stops early (an exception, Ctrl-C, a closed generator)."""
        self.engine._check_not_in_step()  # a proposer calling generate would wait on itself
        sink = None
        for r in reqs:
            sink = self.engine.add_request(r, sink)
        done = set()
        try:
            for item in self.engine.iterate(sink, [r.request_id for r in reqs]):
                if item.finished:
                    done.add(item.request_id)
                yield item
        finally:
            for r in reqs:
                if r.request_id not in done:
                    self.engine.abort_request(r.request_id)

    def stream(self, prompt: PromptType, sampling_params: Optional[SamplingParams] = None,
               parse_special: bool = False) -> Iterator[StreamOutput]:
        """Generates for one prompt, yielding a ``StreamOutput`` (new token ids and text) per
        engine step; the last one has ``finished`` and the complete ``output``. Closing the
        generator early aborts the request. Threads may stream at the same time: their requests
        share the engine's steps."""
        check_bool("parse_special", parse_special)
        params = self._params_list(sampling_params, 1)[0]
        req = self._make_request(prompt, params, "prompt", parse_special, stream=True)
        yield from self._iterate([req])

    def abort(self, request_id: str) -> None:
        """Ends a running request (from any thread); its output has finish_reason 'abort'."""
        self.engine.abort_request(check_text("request_id", request_id, "a request id"))

    def _call_metrics(self, before: Dict[str, Any], outs: List[RequestOutput],
                      seconds: float) -> Dict[str, Any]:
        """Engine totals over this call (other threads' requests share its steps) plus the
        speculative counters of this call's requests."""
        after = self.engine.core.stats.as_dict()
        m: Dict[str, Any] = {}
        for key, v in after.items():
            if isinstance(v, (int, float)) and isinstance(before.get(key), (int, float)):
                m[key] = v - before[key]
        stats = _core.spec_decode.SpecDecodingStats()
        for o in outs:
            per = o.metrics
            if per["num_draft_tokens"]:
                stats.add(_stats_from(per))
        m.update({
            "num_drafts": stats.num_drafts, "num_draft_tokens": stats.num_draft_tokens,
            "num_accepted_tokens": stats.num_accepted_tokens,
            "num_accepted_tokens_per_pos": list(stats.num_accepted_tokens_per_pos),
            "acceptance_rate_per_pos": list(stats.acceptance_rate_per_pos),
            "acceptance_rate": stats.acceptance_rate,
            "mean_acceptance_length": stats.mean_acceptance_length,
        })
        for key in ("prefill_tokens_per_s", "decode_tokens_per_s"):
            t, n = key.replace("tokens_per_s", "seconds"), key.replace("_per_s", "")
            m[key] = m[n] / m[t] if m.get(t) else 0.0
        total = m.get("total_step_seconds", 0.0)
        m["host_fraction"] = m.get("host_seconds", 0.0) / total if total else 0.0
        m["total_seconds"] = seconds
        m["output_tokens"] = sum(len(o.outputs[0].token_ids) for o in outs)
        m["tokens_per_s"] = m["output_tokens"] / seconds if seconds else 0.0
        return m


def _stats_from(per: Dict[str, Any]) -> "_core.spec_decode.SpecDecodingStats":
    """A request's SpecDecodingStats rebuilt from its metrics dict."""
    s = _core.spec_decode.SpecDecodingStats()
    s.num_drafts = per["num_drafts"]
    s.num_draft_tokens = per["num_draft_tokens"]
    s.num_accepted_tokens = per["num_accepted_tokens"]
    s.num_accepted_tokens_per_pos = per["num_accepted_tokens_per_pos"]
    return s


__all__ = ["LLM"]
