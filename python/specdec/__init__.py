"""specdec: lossless speculative decoding on any OpenCL device.

A thin Python layer over the C++ core ``specdec._core``.
"""

from __future__ import annotations

from specdec._core import (
    AttentionGroup,
    AttentionRequirements,
    AttentionSetup,
    ChunkedLocalAttentionSpec,
    CommonAttentionMetadata,
    Context,
    DeviceInfo,
    FormatError,
    FullAttentionSpec,
    KvCache,
    KvCacheConfig,
    KvCacheGroup,
    KvCacheSpec,
    KvCacheTensor,
    LayerAttentionInfo,
    LayerKvSpec,
    LayerKvView,
    MLAAttentionSpec,
    OpenCLError,
    SlidingWindowSpec,
    SpecDecodeKvPlan,
    UnsupportedError,
    attention_backends,
    attention_priority,
    build_common_metadata,
    devices,
    example_model_layers,
    example_models,
    kernel_programs,
    layouts,
    make_layer_views,
    make_local_attention_virtual_batches,
    max_model_len_for_budget,
    min_kv_cache_bytes,
    read_gguf,
    read_safetensors,
    select_device,
    validate_backend,
)
from specdec._core import KvCacheManager, AllocationResult
from specdec._core import quant  # weight formats, dequantize, device matmul
from specdec.attention import initialize_attention, layer_infos, select_backend
from specdec.hub import (
    FetchError,
    cache_dir,
    fetch,
    list_models,
    load_catalog,
    resolve_model,
)
from specdec.llm import LLM
from specdec import engine, proposers
from specdec.proposers import Proposer
from specdec.speculative import SpeculativeConfig
from specdec.outputs import CompletionOutput, Logprob, RequestOutput, SamplingParams
from specdec.structured import StructuredOutputsParams
from specdec.model import ModelConfig, format_inspect, inspect_model, load_model_config
from specdec.tokenizer import StreamDecoder, Tokenizer
from specdec.kv import (
    allocate_kv_cache,
    format_kv_plan,
    parse_bytes,
    plan_kv_cache,
    plan_target_and_drafter,
)

__version__ = "0.1.0"

__all__ = [
    "quant",
    "LLM",
    "Proposer",
    "SpeculativeConfig",
    "engine",
    "proposers",
    "CompletionOutput",
    "Logprob",
    "RequestOutput",
    "SamplingParams",
    "StructuredOutputsParams",
    "FetchError",
    "ModelConfig",
    "cache_dir",
    "fetch",
    "format_inspect",
    "inspect_model",
    "list_models",
    "load_catalog",
    "load_model_config",
    "resolve_model",
    "AllocationResult",
    "AttentionGroup",
    "AttentionRequirements",
    "AttentionSetup",
    "CommonAttentionMetadata",
    "LayerAttentionInfo",
    "attention_backends",
    "attention_priority",
    "build_common_metadata",
    "initialize_attention",
    "layer_infos",
    "make_local_attention_virtual_batches",
    "read_gguf",
    "read_safetensors",
    "select_backend",
    "validate_backend",
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
    "StreamDecoder",
    "Tokenizer",
]
