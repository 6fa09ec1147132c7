"""KV-cache planning helpers: byte sizes, plans from Python values, readable plans."""

from __future__ import annotations

import re
from typing import Mapping, Sequence, Union

from specdec import _core
from specdec._checks import printable

MAX_BYTES = 1 << 62

LayersArg = Union[Sequence["_core.LayerKvSpec"], Mapping[str, "_core.KvCacheSpec"]]

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3,
          "gb": 1000**3, "t": 1000**4, "tb": 1000**4, "kib": 1024, "mib": 1024**2,
          "gib": 1024**3, "tib": 1024**4}


def parse_bytes(value: Union[int, str], field: str = "kv_cache_memory_bytes") -> int:
    """Bytes from an int or a string such as ``"512MiB"``, ``"1.5 GiB"``, ``"2e9"``."""
    if isinstance(value, bool):
        raise ValueError(f"{field} = {value!r}: must be a byte count such as 1073741824 or '1GiB'")
    if isinstance(value, int):
        if not 0 <= value < MAX_BYTES:
            raise ValueError(f"{field} = {value}: must be in [0, {MAX_BYTES})")
        return value
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][0-9]+)?)\s*([a-zA-Z]*)\s*", str(value))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(
            f"{field} = {value!r}: must be a byte count such as 1073741824, '512MiB' or '1.5GB' "
            f"(units: {', '.join(u for u in _UNITS if u)})")
    amount = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not amount < MAX_BYTES:
        raise ValueError(f"{field} = {value!r}: must be below {MAX_BYTES} bytes")
    return int(amount)


def _layer_list(layers: LayersArg) -> list:
    if isinstance(layers, Mapping):
        return [_core.LayerKvSpec(name, spec) for name, spec in layers.items()]
    return list(layers)


def plan_kv_cache(layers: LayersArg, kv_cache_memory_bytes: Union[int, str], max_model_len: int,
                  max_num_batched_tokens: int = 2048, num_blocks_override: int = 0,
                  model_name: str = "", disable_hybrid_kv_cache_manager: bool = False) -> "_core.KvCacheConfig":
    """Plans the KV cache of one model: groups, tensors and blocks from a byte budget.

    ``layers`` is a list of :class:`LayerKvSpec` or a dict layer name -> :class:`KvCacheSpec`.
    Raises ValueError naming the field for bad input, including a budget that cannot hold one
    request of ``max_model_len`` (the message gives the bytes needed and the largest length
    that fits). ``disable_hybrid_kv_cache_manager``: every attention layer in one group managed
    as full attention (vLLM's switch; each layer keeps its spec for its mask and metadata).
    """
    return _core.plan_kv_cache(_layer_list(layers), parse_bytes(kv_cache_memory_bytes),
                               max_model_len, max_num_batched_tokens, num_blocks_override,
                               model_name, disable_hybrid_kv_cache_manager)


def plan_target_and_drafter(target_layers: LayersArg, drafter_layers: LayersArg,
                            kv_cache_memory_bytes: Union[int, str], max_model_len: int,
                            drafter_fraction: float | None = None,
                            max_num_batched_tokens: int = 2048, target_name: str = "target",
                            drafter_name: str = "drafter",
                            target_disable_hybrid_kv_cache_manager: bool = False,
                            drafter_disable_hybrid_kv_cache_manager: bool = False) -> "_core.SpecDecodeKvPlan":
    """Plans a target and its drafter from one budget.

    By default the budget is split in proportion to what one ``max_model_len`` request needs in
    each model, so both hold the same number of requests; ``drafter_fraction`` fixes the
    drafter's share instead. ``plan.split`` states the rule used.
    """
    return _core.plan_target_and_drafter(_layer_list(target_layers), _layer_list(drafter_layers),
                                         parse_bytes(kv_cache_memory_bytes), max_model_len,
                                         drafter_fraction, max_num_batched_tokens, target_name,
                                         drafter_name, target_disable_hybrid_kv_cache_manager,
                                         drafter_disable_hybrid_kv_cache_manager)


def allocate_kv_cache(config: "_core.KvCacheConfig", layouts: Mapping[str, str] | None = None,
                      default_layout: str = "kv_major",
                      device: Union[str, "_core.Context", None] = None) -> "_core.KvCache":
    """Allocates a plan on an OpenCL device; ``layouts`` maps layer names to layout names."""
    if isinstance(device, _core.Context):
        ctx = device
    else:
        ctx = _core.Context("" if device is None else str(device))
    return _core.KvCache(config, dict(layouts or {}), default_layout, ctx)


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} B"


def compress_names(names: Sequence[str]) -> str:
    """``layers.0, layers.1, layers.2, layers.4`` -> ``layers.0-2, 4``."""
    groups: list = []  # [prefix, [[first, last], ...] or None]
    for name in names:
        m = re.fullmatch(r"(.*?)(\d+)", name)
        if not m:
            groups.append([name, None])
            continue
        prefix, i = m.group(1), int(m.group(2))
        if groups and groups[-1][0] == prefix and groups[-1][1] is not None:
            runs = groups[-1][1]
            if runs[-1][1] == i - 1:
                runs[-1][1] = i
            else:
                runs.append([i, i])
        else:
            groups.append([prefix, [[i, i]]])
    texts = []
    for prefix, runs in groups:
        if runs is None:
            texts.append(prefix)
        else:
            texts.append(prefix + ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs))
    return ", ".join(texts)


def _format_config(c: "_core.KvCacheConfig", indent: str = "") -> list[str]:
    out = [f"{indent}KV-cache plan{': ' + printable(c.model_name) if c.model_name else ''}",
           f"{indent}  max_model_len {c.max_model_len}, max_num_batched_tokens "
           f"{c.max_num_batched_tokens}, budget {_size(c.budget_bytes)}, allocated "
           f"{_size(c.total_bytes)} in {len(c.tensors)} tensors",
           f"{indent}  {len(c.groups)} KV-cache group{'s' if len(c.groups) != 1 else ''}; holds "
           f"{c.max_concurrent_requests} request(s) of {c.max_model_len} tokens at once"]
    if c.disable_hybrid_kv_cache_manager:
        out.append(f"{indent}  hybrid KV-cache manager off: every attention layer managed as full "
                   "attention (windows and chunks keep their masks; no block is freed early)")
    for gid, g in enumerate(c.groups):
        s = g.spec
        out.append(f"{indent}  group {gid}: {s.kind}"
                   + (f" (window {s.sliding_window})" if s.kind == "sliding_window" else "")
                   + (f" (chunk {s.attention_chunk_size})" if s.kind == "chunked_local" else ""))
        out.append(f"{indent}    spec      {s!r}")
        out.append(f"{indent}    layers    {len(g.layer_names)}: {compress_names(g.layer_names)}")
        kinds: dict = {}  # the layers' own specs: one attention metadata each
        for name, ls in zip(g.layer_names, g.layer_specs):
            kinds.setdefault((ls.kind, ls.sliding_window, ls.attention_chunk_size), []).append(name)
        if len(kinds) > 1 or next(iter(kinds))[0] != s.kind:
            for (kind, window, chunk), names in kinds.items():
                what = (f"{kind} (window {window})" if kind == "sliding_window" else
                        f"{kind} (chunk {chunk}: virtual batches)" if kind == "chunked_local" else kind)
                out.append(f"{indent}    metadata  {what}: {compress_names(names)}")
        if g.sharing_layer_names:
            out.append(f"{indent}    sharing   {len(g.sharing_layer_names)}: "
                       f"{compress_names(g.sharing_layer_names)} (read the cache of an owning layer)")
        out.append(f"{indent}    page      {_size(s.page_size_bytes)} per layer per block of "
                   f"{s.block_size} tokens; {_size(g.bytes_per_block)} per block over the group")
        out.append(f"{indent}    blocks    {g.num_blocks} ({g.usable_blocks} usable + null block); "
                   f"{g.max_blocks_per_request} per max_model_len request -> "
                   f"{g.max_concurrent_requests} request(s), {g.token_capacity} tokens")
    sizes: dict = {}
    for t in c.tensors:
        sizes.setdefault((t.group_id, t.size_bytes), []).append(t)
    out.append(f"{indent}  tensors")
    for (gid, size), ts in sizes.items():
        out.append(f"{indent}    {len(ts)} x {_size(size)} (group {gid}, one per owning layer)")
    for i, t in enumerate(c.tensors):
        if len(t.shared_by) > 1:
            out.append(f"{indent}    tensor {i} of {t.shared_by[0]} also read by "
                       f"{compress_names(t.shared_by[1:])}")
    return out


def format_kv_plan(plan: Union["_core.KvCacheConfig", "_core.SpecDecodeKvPlan"]) -> str:
    """A plan as text a person can read: groups, layers, page sizes, tensors, blocks, tokens."""
    if isinstance(plan, _core.SpecDecodeKvPlan):
        lines = [f"Target + drafter from one budget: target {_size(plan.target_budget_bytes)}, "
                 f"drafter {_size(plan.drafter_budget_bytes)}", f"  split: {plan.split}", "",
                 "[target]"]
        lines += _format_config(plan.target, "  ")
        lines += ["", "[drafter]"]
        lines += _format_config(plan.drafter, "  ")
        return "\n".join(lines)
    return "\n".join(_format_config(plan))
