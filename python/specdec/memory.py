"""How large an ``LLM``'s KV cache is and how long its requests may be, when the user does not say.

The KV cache is sized from what the requests can need — ``max_num_seqs`` requests of
``max_model_len`` tokens, in the target and in the drafter — capped by ``memory_utilization`` of
the device's memory less the weights (vLLM's ``gpu_memory_utilization``: 0.9 by default on a GPU,
0.5 on a CPU device, whose memory is the system's — at most what the system has available). When ``max_model_len`` is not given and one request of the
model's whole context does not fit under the cap, ``max_model_len`` is lowered to what fits, with a
one-line notice (llama.cpp also defaults to a context that fits). What the user asks for
explicitly is never lowered: an explicit ``max_model_len`` that cannot fit is a clear error.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Any, Optional, Tuple

from specdec import _core

log = logging.getLogger("specdec")

# the default share of the device's memory for weights and KV cache: vLLM's 0.9 on a GPU; half
# on a CPU device, whose memory is the system's (and a KV cache is zero-filled, so it is touched)
GPU_MEMORY_UTILIZATION = 0.9
CPU_MEMORY_UTILIZATION = 0.5


def default_memory_utilization(device: Any) -> float:
    return CPU_MEMORY_UTILIZATION if str(device.type).lower() == "cpu" else GPU_MEMORY_UTILIZATION


@dataclass
class KvSizing:
    max_model_len: int           # tokens per request (prompt + output)
    kv_cache_memory_bytes: int   # target and drafter together
    request_bytes: int           # KV of one max_model_len request in both models
    cap_bytes: int               # the most the KV cache may take
    rule: str                    # how the size was chosen, in words
    notice: Optional[str] = None  # set when max_model_len was lowered to fit


def available_memory_bytes(device: Any) -> Tuple[int, str]:
    """(bytes, what they are) of the memory the device can give: its global memory, and on a
    CPU device at most what the system has available now (``MemAvailable``)."""
    total = int(device.global_mem_bytes)
    what = f"{device.name}'s {total / 2**30:.1f} GiB"
    if str(device.type).lower() == "cpu":
        avail = _mem_available_bytes()
        if avail is not None and avail < total:
            total, what = avail, f"the {avail / 2**30:.1f} GiB of memory available"
        room = _cgroup_room_bytes()
        if room is not None and room < total:
            total, what = room, f"the {room / 2**30:.1f} GiB left under this cgroup's memory limit"
    return total, what


def _cgroup_room_bytes() -> Optional[int]:
    """What this process's memory cgroup (a container's limit) still allows, or None: cgroup v2
    ``memory.max`` less ``memory.current``, or v1 ``limit_in_bytes`` less ``usage_in_bytes``."""
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            with open(limit_file, encoding="ascii") as f:
                limit = f.read().strip()
            with open(usage_file, encoding="ascii") as f:
                usage = int(f.read().strip())
        except (OSError, ValueError):
            continue
        if limit == "max" or not limit.isdigit() or int(limit) >= 1 << 60:
            return None  # no limit
        return max(0, int(limit) - usage)
    return None


def _mem_available_bytes() -> Optional[int]:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _request_bytes(cfg, length: int, block_size: int, dtype: str, max_num_batched_tokens: int,
                   disable_hybrid: bool = False) -> int:
    specs = cfg.layer_kv_specs(block_size, dtype, length)
    return _core.min_kv_cache_bytes(specs, length, max_num_batched_tokens, disable_hybrid)


def size_kv_cache(target_cfg, drafter_cfg, *, max_model_len: int, drafter_max_model_len: int,
                  kv_cache_memory_bytes: Optional[int], memory_utilization: Optional[float], device: Any,
                  weights_bytes: int, block_size: int, dtype: str, drafter_dtype: str,
                  max_num_seqs: int, max_num_batched_tokens: int, drafter_kv_bytes: int = 0,
                  drafter_fraction: float = 0.0, disable_hybrid_kv_cache_manager: bool = False,
                  drafter_disable_hybrid_kv_cache_manager: bool = False) -> KvSizing:
    """The KV-cache size and max_model_len of an LLM (see the module's text).

    ``max_model_len`` 0 means the target's context, lowered to what fits; the drafter holds at
    most ``drafter_max_model_len`` tokens of a request (its context, or its own max_model_len:
    it stops drafting beyond). ``kv_cache_memory_bytes`` None means sized from the requests and
    capped by memory. The drafter's share as the user fixed it: ``drafter_kv_bytes`` (added to
    what the target's requests need) or ``drafter_fraction`` of the whole."""
    context = target_cfg.context_length
    length = max_model_len or context
    fixed = drafter_kv_bytes if drafter_cfg is not None else 0

    def one_request(n: int) -> int:
        need = _request_bytes(target_cfg, n, block_size, dtype, max_num_batched_tokens,
                              disable_hybrid_kv_cache_manager)
        if drafter_cfg is None or fixed:
            return need
        if drafter_fraction:
            return int(need / (1 - drafter_fraction)) + 1  # the target's share holds it
        d = min(n, drafter_max_model_len) if drafter_max_model_len else n
        return need + _request_bytes(drafter_cfg, d, block_size, drafter_dtype, max_num_batched_tokens,
                                     drafter_disable_hybrid_kv_cache_manager)

    models = "the target and the drafter" if drafter_cfg is not None else "the model"
    if memory_utilization is None:
        memory_utilization = default_memory_utilization(device)
    if kv_cache_memory_bytes is not None:
        cap = kv_cache_memory_bytes
        source = f"kv_cache_memory_bytes = {cap} ({cap / 2**20:.1f} MiB)"
        fix = "raise kv_cache_memory_bytes"
        if fixed >= cap:
            raise ValueError(f"speculative_config.draft_kv_cache_memory_bytes = {fixed}: less than "
                             f"kv_cache_memory_bytes = {cap} (the drafter's share of it)")
    else:
        memory, what = available_memory_bytes(device)
        cap = int(memory * memory_utilization) - weights_bytes
        source = (f"memory_utilization = {memory_utilization} of {what}, less "
                  f"{weights_bytes / 2**20:.0f} MiB of weights: {max(cap, 0) / 2**20:.1f} MiB")
        fix = "raise memory_utilization, or give kv_cache_memory_bytes"
        if cap - fixed <= 0:
            raise ValueError(f"memory_utilization = {memory_utilization}: {what} times it leaves no "
                             f"room for a KV cache beside {weights_bytes / 2**20:.0f} MiB of weights"
                             + (f" and the drafter's {fixed} bytes" if fixed else "")
                             + "; a larger fraction (at most 1), or kv_cache_memory_bytes, is needed")
    cap -= fixed  # what the target's requests (and a proportional drafter) may take
    if fixed:
        source += f", less the drafter's draft_kv_cache_memory_bytes = {fixed}"
    need = one_request(length)
    notice = None
    if need > cap:
        if max_model_len:
            raise ValueError(
                f"max_model_len = {max_model_len}: one request of {max_model_len} tokens needs "
                f"{need / 2**20:.1f} MiB of KV cache for {models}, more than {source}; lower "
                f"max_model_len or {fix}")
        fit = _largest_fitting_length(one_request, cap, context)
        if fit < 2:
            raise ValueError(f"{source}: does not hold one request of even two tokens for "
                             f"{models}; {fix}")
        notice = (f"specdec: max_model_len lowered to {fit} tokens (the model's context is "
                  f"{context}): one request of {context} tokens needs {need / 2**20:.1f} MiB of KV "
                  f"cache for {models}, more than {source}; {fix} for longer requests")
        length, need = fit, one_request(fit)
    if kv_cache_memory_bytes is not None:
        total, rule = cap + fixed, source
    else:
        total = min(cap, max_num_seqs * need) + fixed
        rule = (f"{max_num_seqs} requests (max_num_seqs) of {length} tokens: "
                f"{max_num_seqs * need / 2**20:.1f} MiB, capped by {source}")
    return KvSizing(length, total, need, cap + fixed, rule, notice)


def _largest_fitting_length(one_request, cap: int, limit: int) -> int:
    """The largest n in [1, limit] with one_request(n) <= cap (0 when none)."""
    if one_request(1) > cap:
        return 0
    lo, hi = 1, limit
    while lo < hi:
        mid = lo + (hi - lo + 1) // 2
        if one_request(mid) <= cap:
            lo = mid
        else:
            hi = mid - 1
    return lo


__all__ = ["CPU_MEMORY_UTILIZATION", "GPU_MEMORY_UTILIZATION", "KvSizing", "available_memory_bytes",
           "default_memory_utilization", "size_kv_cache"]
