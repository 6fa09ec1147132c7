"""Attention backends: selection per layer and attention groups of a KV-cache plan."""

from __future__ import annotations

from typing import Mapping, Optional, Sequence, Union

from specdec import _core

LayersInfo = Union[int, Mapping[str, int], Sequence["_core.LayerAttentionInfo"]]


def default_device_type() -> str:
    """The type of the device SPECDEC_DEVICE / auto would pick ('cpu' without OpenCL)."""
    try:
        return _core.select_device("").type if _core.devices() else "cpu"
    except ValueError:
        return "cpu"


def layer_infos(config: "_core.KvCacheConfig", num_q_heads: LayersInfo,
                use_non_causal: bool = False, use_softcap: bool = False,
                use_sinks: bool = False) -> list:
    """Attention info for every layer of a plan: one q-head count for all layers, or a dict."""
    if isinstance(num_q_heads, int):
        heads = {name: num_q_heads for name in config.layer_specs()}
    elif isinstance(num_q_heads, Mapping):
        heads = dict(num_q_heads)
    else:
        return list(num_q_heads)
    return [_core.LayerAttentionInfo(name, n, use_non_causal, use_softcap, use_sinks)
            for name, n in heads.items()]


def initialize_attention(config: "_core.KvCacheConfig", num_q_heads: LayersInfo,
                         attention_backend: Optional[str] = None,
                         use_non_causal: bool = False,
                         device_type: Optional[str] = None, use_softcap: bool = False,
                         use_sinks: bool = False) -> "_core.AttentionSetup":
    """Chooses a backend for every layer (None / 'auto' = by the device's priority list) and
    groups the layers into attention groups inside their KV-cache groups.

    ``setup.layouts`` gives each layer's KV layout for :func:`specdec.allocate_kv_cache`.
    """
    infos = layer_infos(config, num_q_heads, use_non_causal, use_softcap, use_sinks)
    return _core.initialize_attention(config, infos, attention_backend or "",
                                      device_type or default_device_type())


def select_backend(requirements: "_core.AttentionRequirements", requested: Optional[str] = None,
                   device_type: Optional[str] = None) -> dict:
    """The backend for one layer's requirements, with every candidate's verdict."""
    return _core.select_backend(requirements, requested, device_type or default_device_type())
