"""``specdec.LLM``: plain generation (no speculation yet) with vLLM's names and output shapes.

    llm = specdec.LLM(model="qwen2.5-coder-0.5b-instruct-q4_k_m")
    out = llm.generate(["def fib(n):"], specdec.SamplingParams(temperature=0, max_tokens=32))
    print(out[0].outputs[0].text)

Requests run together: each step is one forward over a ragged batch holding one decode token of
every running request and prefill chunks of waiting ones (up to ``max_num_batched_tokens``).
The scheduler reserves each step's KV blocks before running it; when the cache is full it
preempts the most recently admitted request (its blocks are freed; it goes back to the front of
the queue and is recomputed later from its prompt and the tokens it had produced), as vLLM does.

Thread safety: one ``LLM`` may be shared by several threads. ``generate`` and ``chat`` calls are
served one after another (each holds the LLM's lock for its whole run; a call from another thread
waits), so every output is exactly what the call gets alone. Underneath, the C++ runner serialises
its steps too, and kernel launches on one OpenCL context never interleave their arguments.

Prompt text is tokenized as text: control-token text such as ``<|im_start|>`` written in a prompt
or in a chat message stays text unless the caller opts in with ``parse_special=True`` (raw prompts
that carry their own control tokens). ``chat`` renders messages with the model's chat template,
whose own markers are the only control tokens.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Union

import numpy as np

from specdec import _core
from specdec._checks import (check_bool, check_int, check_messages, check_text, check_token_ids,
                             error)
from specdec.hub import resolve_model
from specdec.kv import parse_bytes
from specdec.outputs import (CompletionOutput, RequestOutput, SamplingParams,
                             position_logprobs)
from specdec.tokenizer import Tokenizer

PromptType = Union[str, Dict[str, Any]]
Message = Mapping[str, str]


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
    state = {"last": 0.0, "start": time.monotonic()}

    def report(done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - state["last"] < 0.2:
            return
        state["last"] = now
        pct = 100 * done // max(total, 1)
        end = "\n" if done >= total else ""
        stream.write(f"\rloading weights [{'#' * (pct // 4):25s}] {pct:3d}% "
                     f"{done / 2**20:7.1f}/{total / 2**20:.1f} MiB "
                     f"({now - state['start']:.1f} s){end}")
        stream.flush()
    return report


@dataclass
class _Request:
    request_id: str
    prompt: Optional[str]
    prompt_ids: List[int]
    params: SamplingParams
    generator: Optional["_core.SamplingGenerator"]
    output_ids: List[int] = field(default_factory=list)
    logprobs: Optional[list] = None
    prompt_logprobs: Optional[list] = None
    cumulative_logprob: float = 0.0
    num_computed: int = 0
    finish_reason: Optional[str] = None
    stop_reason: Union[int, str, None] = None
    text: str = ""
    first_token_time: Optional[float] = None
    prompt_logprobs_done: bool = False

    @property
    def all_ids(self) -> List[int]:
        """The prompt and every token produced so far: what a prefill computes (after a
        preemption too: the next token is sampled from the last position's logits)."""
        return self.prompt_ids + self.output_ids


class _Blocks:
    """KV blocks per group reserved for the step being built, against the runner's free blocks.
    Sums of per-request needs are an upper bound (sliding windows may give blocks back)."""

    def __init__(self, runner) -> None:
        self.runner = runner
        self.reserved = [0] * len(runner.num_free_blocks())

    def _fits(self, r: "_Request", n: int) -> bool:
        need = self.runner.num_blocks_needed(r.request_id, r.num_computed, n)
        free = self.runner.num_free_blocks()
        return all(a <= f - used for a, f, used in zip(need, free, self.reserved))

    def take(self, r: "_Request", n: int) -> bool:
        """Reserves the blocks of r's next n tokens; False (nothing reserved) when they do not fit."""
        if not self._fits(r, n):
            return False
        need = self.runner.num_blocks_needed(r.request_id, r.num_computed, n)
        self.reserved = [used + a for used, a in zip(self.reserved, need)]
        return True

    def largest_chunk(self, r: "_Request", n: int) -> int:
        """The most of the next n prefill tokens of r whose blocks fit (0 if none)."""
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if self._fits(r, mid) else (lo, mid - 1)
        return lo


class LLM:
    """A model on an OpenCL device, ready to generate.

    ``model``: a GGUF path or a catalog name (``specdec models``), fetched into the cache on first
    use. ``device``: an index, ``P:D``, ``gpu``/``cpu`` or part of a name (default:
    ``SPECDEC_DEVICE`` or the first device). ``attention_backend``: None for automatic choice.
    """

    def __init__(self, model: str, device: Optional[str] = None,
                 attention_backend: Optional[str] = None, max_model_len: int = 0,
                 kv_cache_memory_bytes: Union[int, str] = "1GiB", block_size: int = 16,
                 kv_cache_dtype: str = "f16", max_num_batched_tokens: int = 512,
                 max_num_seqs: int = 16, progress: bool = True) -> None:
        # every argument is checked before anything is fetched or loaded
        if not isinstance(model, (str, os.PathLike)):
            raise error("model", model, "a GGUF path or a catalog name (see `specdec models`)")
        check_text("model", os.fspath(model), "a GGUF path or a catalog name", empty_ok=False)
        if device is not None:
            if isinstance(device, int) and not isinstance(device, bool) and device >= 0:
                device = str(device)  # an index
            check_text("device", device, "None, an index, or a device selector ('P:D', 'gpu', "
                       "'cpu' or part of a name)")
        attention_backend = check_attention_backend(attention_backend)
        allowed = "0 (the model's context length) or at least 2 (a prompt token and a generated one)"
        if check_int("max_model_len", max_model_len, 0, None, allowed) == 1:
            raise error("max_model_len", max_model_len, allowed)
        kv_bytes = parse_bytes(kv_cache_memory_bytes, "kv_cache_memory_bytes")
        check_int("block_size", block_size, 1, 1 << 16)
        check_text("kv_cache_dtype", kv_cache_dtype, "'f32', 'f16', 'bf16' or 'int8'")
        check_int("max_num_batched_tokens", max_num_batched_tokens, 1, 1 << 30)
        check_int("max_num_seqs", max_num_seqs, 1, 1 << 20)
        check_bool("progress", progress)
        self._lock = threading.Lock()
        self._owner: Optional[int] = None
        self.context = _core.Context(device or "")  # a bad device fails before any download
        self.model_path = resolve_model(os.fspath(model), progress=progress)
        stream = sys.stderr if progress else None
        self.tokenizer = Tokenizer.from_file(self.model_path)
        self.max_num_seqs = max_num_seqs
        # logit rows per step: a decode row per running request, or prompt-logprobs chunks
        self.max_num_logits = max(128, max_num_seqs)
        self.runner = _core.ModelRunner(
            self.context, self.model_path, attention_backend or "", max_model_len,
            kv_bytes, block_size,
            kv_cache_dtype, max_num_batched_tokens, self.max_num_logits,
            _load_progress(stream) if stream else None)
        self.config = self.runner.config
        self.max_num_batched_tokens = max_num_batched_tokens
        self._next_id = 0
        self.last_metrics: Dict[str, float] = {}
        self._warm_up()

    def _warm_up(self) -> None:
        """Builds the kernels a prefill and a decode use (OpenCL compiles on first launch; PoCL
        caches the binaries on disk), so the first request's timings measure the model."""
        n = max(1, min(17, self.runner.max_model_len - 1, self.max_num_batched_tokens))
        rid = "warm-up"
        self.runner.step([(rid, [0] * n, 0, 1)])
        self.runner.step([(rid, [0], n, 1)])
        self.runner.free(rid)

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
                      parse_special: bool = False) -> _Request:
        text, ids = self._prompt_ids(prompt, field, parse_special)
        rid = str(self._next_id)
        self._next_id += 1
        gen = None
        if not params.greedy:
            seed = params.seed if params.seed is not None else int.from_bytes(
                np.random.default_rng().bytes(8), "little")
            gen = _core.SamplingGenerator(seed)
        req = _Request(rid, text, ids, params, gen)
        if params.logprobs is not None:
            req.logprobs = []
        if params.prompt_logprobs is not None:
            req.prompt_logprobs = [None]
        return req

    def _decode_token(self, tid: int) -> str:
        return self.tokenizer.decode([tid], special=True)

    def _finish_check(self, req: _Request, tid: int) -> None:
        p = req.params
        if not p.ignore_eos and self.tokenizer.is_eog(tid):
            req.finish_reason = "stop"
        elif tid in p.stop_token_ids:
            req.finish_reason, req.stop_reason = "stop", tid
        if req.finish_reason is None:
            if p.max_tokens is not None and len(req.output_ids) >= p.max_tokens:
                req.finish_reason = "length"
            elif len(req.all_ids) >= self.runner.max_model_len:
                req.finish_reason = "length"
        if not p.stop and req.finish_reason is None:
            return  # the text is decoded once, at the end (not every token)
        text = self.tokenizer.decode(req.output_ids, special=not p.skip_special_tokens,
                                     continuation=True)
        for s in p.stop:
            i = text.find(s)
            if i >= 0:
                text = text[:i]
                req.finish_reason, req.stop_reason = "stop", s
                break
        req.text = text

    def _sample(self, req: _Request, logits: np.ndarray) -> int:
        p = req.params
        if p.greedy:
            tid = int(np.argmax(logits))  # first maximum: ties -> lowest id, as the C++ sampler
        else:
            tid = _core.sample_token(logits, p.temperature, p.top_k, p.top_p, p.min_p, req.generator)
        top, of_ids, ranks = _core.token_logprobs(logits, p.logprobs or 0, [tid])
        req.cumulative_logprob += of_ids[0]
        if req.logprobs is not None:
            req.logprobs.append(position_logprobs(top, tid, of_ids[0], ranks[0], self._decode_token))
        return tid

    def _prompt_logprobs(self, req: _Request, logits: np.ndarray, start: int) -> None:
        # logits row j is the model after prompt token start + j: it scores token start + j + 1.
        n = req.params.prompt_logprobs or 0
        for j in range(logits.shape[0]):
            pos = start + j + 1
            if pos >= len(req.prompt_ids):
                break
            actual = req.prompt_ids[pos]
            top, of_ids, ranks = _core.token_logprobs(logits[j], n, [actual])
            req.prompt_logprobs.append(position_logprobs(top, actual, of_ids[0], ranks[0],
                                                         self._decode_token))

    # ---- scheduling ----
    def _preempt(self, r: _Request, waiting: List[_Request], running: List[_Request]) -> None:
        """Frees r's blocks and puts it back at the front of the queue, to be recomputed."""
        if r in running:
            running.remove(r)
        if r in waiting:
            waiting.remove(r)
        if self.runner.has_request(r.request_id):
            self.runner.free(r.request_id)
        r.num_computed = 0
        if r.prompt_logprobs is not None and not r.prompt_logprobs_done:
            del r.prompt_logprobs[1:]  # recomputed with the prompt
        self.num_preemptions += 1
        waiting.insert(0, r)

    def _schedule(self, waiting: List[_Request], running: List[_Request]):
        """One step: a decode token for every running request (oldest first), then prefill
        chunks of waiting requests, all within the free KV blocks. When a running request's
        token does not fit, the most recently admitted request holding blocks is preempted."""
        blocks = _Blocks(self.runner)
        batch, owners = [], []
        budget = self.max_num_batched_tokens
        rows_left = self.max_num_logits  # logit rows of the whole step
        i = 0
        while i < len(running):
            r = running[i]
            if blocks.take(r, 1):
                batch.append((r.request_id, [r.output_ids[-1]], r.num_computed, 1))
                owners.append((r, "decode", 0))
                budget -= 1
                rows_left -= 1
                i += 1
                continue
            # short of blocks: a partly prefilled waiting request goes first, then the newest
            # running one (possibly r itself)
            partial = [w for w in waiting if w.num_computed > 0]
            victim = partial[-1] if partial else running[-1]
            self._preempt(victim, waiting, running)
        num_seqs = len(running)
        for r in list(waiting):
            if budget <= 0 or num_seqs >= self.max_num_seqs or rows_left <= 0:
                break
            left = len(r.all_ids) - r.num_computed
            chunk = min(budget, left)
            if r.prompt_logprobs is not None and not r.prompt_logprobs_done:
                chunk = min(chunk, rows_left)  # a logit row per prompt token
            chunk = blocks.largest_chunk(r, chunk)
            if chunk == 0:
                if not batch:  # alone and still short: nothing else holds blocks to wait for
                    need = self.runner.num_blocks_needed(r.request_id, r.num_computed, 1)
                    raise ValueError(
                        f"kv_cache_memory_bytes: request {r.request_id} cannot get a KV block even "
                        f"with nothing else running (needs {need}, free "
                        f"{self.runner.num_free_blocks()}); give a larger kv_cache_memory_bytes")
                break  # first come, first served: later requests wait too
            blocks.take(r, chunk)
            last = chunk == left
            if r.prompt_logprobs is not None and not r.prompt_logprobs_done:
                num_logits = chunk
            else:
                num_logits = 1 if last else 0
            batch.append((r.request_id, r.all_ids[r.num_computed:r.num_computed + chunk],
                          r.num_computed, num_logits))
            owners.append((r, "prefill", chunk))
            budget -= chunk
            rows_left -= num_logits
            num_seqs += 1
            if not last:
                break  # a chunked prompt continues next step, before later ones start
        return batch, owners

    # ---- the loop ----
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
             add_generation_prompt: bool = True) -> List[RequestOutput]:
        """Generates replies to conversations (``[{"role": ..., "content": ...}, ...]``, or a list
        of them) rendered with the model's chat template. The template's markers are the only
        control tokens: message text is never parsed for them."""
        check_bool("add_generation_prompt", add_generation_prompt)
        if isinstance(messages, (list, tuple)) and messages and all(
                isinstance(c, (list, tuple)) for c in messages):
            convos = list(messages)
        else:
            convos = [messages]
        prompts = []
        for i, convo in enumerate(convos):
            check_messages(convo, "messages" if len(convos) == 1 else f"messages[{i}]")
            tok = self.tokenizer
            prompts.append({"prompt": tok.apply_chat_template(convo, add_generation_prompt),
                            "prompt_token_ids": tok.apply_chat_template(
                                convo, add_generation_prompt, tokenize=True)})
        return self._run(prompts, sampling_params, on_token, False, "messages", len(convos) > 1)

    def _run(self, plist: List[Any], sampling_params: Any, on_token: Any, parse_special: bool,
             field: str, indexed: bool) -> List[RequestOutput]:
        check_bool("parse_special", parse_special)
        if on_token is not None and not callable(on_token):
            raise error("on_token", on_token, "None or a callable (request_id, text)")
        if sampling_params is None:
            sampling_params = SamplingParams()
        if isinstance(sampling_params, SamplingParams):
            params = [sampling_params] * len(plist)
        elif isinstance(sampling_params, (list, tuple)) and all(
                isinstance(p, SamplingParams) for p in sampling_params):
            params = list(sampling_params)
            if len(params) != len(plist):
                raise ValueError(f"sampling_params: {len(params)} given for {len(plist)} prompts; "
                                 "give one SamplingParams, or one per prompt")
        else:
            raise error("sampling_params", sampling_params,
                        "None, a SamplingParams or a list of them (one per prompt)")
        for p in params:
            p._validate()  # fields may have been changed since construction
        if self._owner == threading.get_ident():
            raise RuntimeError("LLM.generate was called from inside its own on_token callback; "
                               "call it after the running generate returns")
        with self._lock:
            self._owner = threading.get_ident()
            try:
                reqs = [self._make_request(p, sp, f"{field}[{i}]" if indexed else field,
                                           parse_special)
                        for i, (p, sp) in enumerate(zip(plist, params))]
                return self._loop(reqs, on_token)
            finally:
                self._owner = None

    def _loop(self, reqs: List[_Request], on_token: Any) -> List[RequestOutput]:
        waiting, running = list(reqs), []
        streams = {r.request_id: self.tokenizer.stream_decoder(continuation=True) for r in reqs}
        t_start = time.monotonic()
        prefill_tokens = decode_tokens = 0
        prefill_time = decode_time = 0.0
        self.num_preemptions = 0
        try:
            while waiting or running:
                batch, owners = self._schedule(waiting, running)
                # greedy requests without logprobs use the device's argmax: no logits transfer
                need_logits = any(not r.params.greedy or r.params.logprobs is not None
                                  or (kind == "prefill" and r.prompt_logprobs is not None
                                      and not r.prompt_logprobs_done)
                                  for r, kind, _ in owners)
                t0 = time.monotonic()
                out = self.runner.step(batch, return_logits=need_logits)
                dt = time.monotonic() - t0
                n_pre = sum(o[2] for o in owners if o[1] == "prefill")
                n_dec = len(owners) - sum(1 for o in owners if o[1] == "prefill")
                if n_pre:
                    prefill_tokens += n_pre
                    prefill_time += dt * n_pre / (n_pre + n_dec)
                if n_dec:
                    decode_tokens += n_dec
                    decode_time += dt * n_dec / (n_pre + n_dec)
                logits, starts = out["logits"], out["logits_start"]
                for i, (r, kind, chunk) in enumerate(owners):
                    rows = logits[starts[i]:starts[i + 1]]
                    if kind == "prefill":
                        if r.prompt_logprobs is not None and not r.prompt_logprobs_done:
                            self._prompt_logprobs(r, rows, r.num_computed)
                        r.num_computed += chunk
                        if r.num_computed < len(r.all_ids):
                            continue
                        r.prompt_logprobs_done = True
                        waiting.remove(r)
                        running.append(r)
                        if r.first_token_time is None:
                            r.first_token_time = time.monotonic()
                    else:
                        r.num_computed += 1
                    last = starts[i + 1] - 1
                    if r.params.greedy and r.params.logprobs is None:
                        tid = int(out["argmax"][last])
                        r.cumulative_logprob += float(out["argmax_logprob"][last])
                    else:
                        tid = self._sample(r, rows[-1])
                    r.output_ids.append(tid)
                    self._finish_check(r, tid)
                    if on_token is not None:
                        piece = streams[r.request_id].push(tid)
                        if piece:
                            on_token(r.request_id, piece)
                    if r.finish_reason is not None:
                        running.remove(r)
                        self.runner.free(r.request_id)
        finally:
            for r in reqs:
                if self.runner.has_request(r.request_id):
                    self.runner.free(r.request_id)
        self.last_metrics = {
            "prefill_tokens": prefill_tokens, "prefill_seconds": prefill_time,
            "prefill_tokens_per_s": prefill_tokens / prefill_time if prefill_time else 0.0,
            "decode_tokens": decode_tokens, "decode_seconds": decode_time,
            "decode_tokens_per_s": decode_tokens / decode_time if decode_time else 0.0,
            "num_preemptions": self.num_preemptions,
            "total_seconds": time.monotonic() - t_start}
        return [self._output(r) for r in reqs]

    def _output(self, r: _Request) -> RequestOutput:
        comp = CompletionOutput(0, r.text, list(r.output_ids), r.cumulative_logprob, r.logprobs,
                                r.finish_reason, r.stop_reason)
        return RequestOutput(r.request_id, r.prompt, list(r.prompt_ids), r.prompt_logprobs,
                             [comp], True, dict(self.last_metrics))


__all__ = ["LLM"]
