"""specdec: lossless speculative decoding on any OpenCL device.

A thin Python layer over the C++ core ``specdec._core``.
"""

from __future__ import annotations

from specdec._core import (
    ChunkedLocalAttentionSpec,
    Context,
    DeviceInfo,
    FormatError,
    FullAttentionSpec,
    KvCache,
    KvCacheConfig,
    KvCacheGroup,
    KvCacheSpec,
    KvCacheTensor,
    LayerKvSpec,
    LayerKvView,
    MLAAttentionSpec,
    OpenCLError,
    SlidingWindowSpec,
    SpecDecodeKvPlan,
    UnsupportedError,
    devices,
    example_model_layers,
    example_models,
    kernel_programs,
    layouts,
    make_layer_views,
    max_model_len_for_budget,
    min_kv_cache_bytes,
    select_device,
)
from specdec._core import KvCacheManager, AllocationResult
from specdec.kv import (
    allocate_kv_cache,
    format_kv_plan,
    parse_bytes,
    plan_kv_cache,
    plan_target_and_drafter,
)

__version__ = "0.1.0"

__all__ = [
    "AllocationResult",
    "ChunkedLocalAttentionSpec",
    "Context",
    "DeviceInfo",
    "FormatError",
    "FullAttentionSpec",
    "KvCache",
    "KvCacheConfig",
    "KvCacheGroup",
    "KvCacheManager",
    "KvCacheSpec",
    "KvCacheTensor",
    "LayerKvSpec",
    "LayerKvView",
    "MLAAttentionSpec",
    "OpenCLError",
    "SlidingWindowSpec",
    "SpecDecodeKvPlan",
    "UnsupportedError",
    "allocate_kv_cache",
    "devices",
    "example_model_layers",
    "example_models",
    "format_kv_plan",
    "kernel_programs",
    "layouts",
    "make_layer_views",
    "max_model_len_for_budget",
    "min_kv_cache_bytes",
    "parse_bytes",
    "plan_kv_cache",
    "plan_target_and_drafter",
    "select_device",
]
