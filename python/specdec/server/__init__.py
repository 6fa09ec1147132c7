"""``specdec serve``: an OpenAI-compatible server (FastAPI + uvicorn) with speculative decoding.

    specdec serve --model qwen2.5-coder-1.5b-instruct-q4_k_m \\
        --speculative-config '{"method": "ngram", "num_speculative_tokens": 4}'

Its libraries (fastapi, uvicorn, prometheus_client) are dependencies of the package.
"""

from __future__ import annotations

from typing import Any, Optional


def plan_text(llm: Any, model_name: str, host: str, port: int, api_key: Optional[str],
              max_pending: int) -> str:
    """What the server planned, in words: printed at start."""
    mib = 2**20
    split = llm.kv_split
    lines = [
        f"specdec serve: {model_name} ({llm.config.architecture}, {llm.config.num_layers} layers) on "
        f"{llm.context.device.name}",
        f"  context length (max_model_len): {llm.runner.max_model_len} tokens per request",
        f"  concurrent requests (max_num_seqs): {llm.max_num_seqs}; in flight at most {max_pending} "
        "(more get 503)",
        f"  KV cache: target {split['target_bytes'] / mib:.1f} MiB"
        + (f", drafter {split['drafter_bytes'] / mib:.1f} MiB" if llm.drafter is not None else "")
        + f" ({llm.kv_sizing.rule})",
        f"  prefix caching: {'on' if llm.enable_prefix_caching else 'off'}",
    ]
    sc = llm.speculative_config
    lines.append(f"  speculative decoding: {sc.method}, k = {sc.num_speculative_tokens}" if sc is not None
                 else "  speculative decoding: off (plain decoding)")
    lines.append(f"  warm-up: {llm.warm_up_seconds:.1f} s (every kernel built before the first request)")
    lines.append(f"  listening on http://{host}:{port}/v1"
                 + (" (API key required)" if api_key else ""))
    return "\n".join(lines)


def build_app(*args: Any, **kwargs: Any) -> Any:
    from specdec.server.app import build_app as build
    return build(*args, **kwargs)


__all__ = ["build_app", "plan_text"]
