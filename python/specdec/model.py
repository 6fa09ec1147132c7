"""Model configuration and inspection of model files (GGUF, Hugging Face directories).

Wherever a model path is taken, a catalog name (``specdec models``) is accepted too and is
fetched into the cache on first use.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, List, Union

from specdec import _core
from specdec._checks import printable
from specdec.hub import resolve_model
from specdec.kv import _size, format_kv_plan, parse_bytes, plan_kv_cache

ModelConfig = _core.ModelConfig


def _resolve(path_or_name: Union[str, os.PathLike], progress: bool = True) -> str:
    p = Path(os.fspath(path_or_name)).expanduser()
    if p.is_dir():
        if not (p / "config.json").is_file():
            raise ValueError(f"model = {str(p)!r}: a directory must hold config.json "
                             "(a Hugging Face model directory)")
        return str(p)
    return resolve_model(os.fspath(path_or_name), progress=progress)


def load_model_config(path_or_name: Union[str, os.PathLike], progress: bool = True) -> ModelConfig:
    """The ModelConfig of a GGUF file, a config.json, a Hugging Face directory or a catalog name."""
    return _core.load_model_config(_resolve(path_or_name, progress))


def _gguf_tokenizer(meta: Dict[str, Any]) -> Dict[str, Any]:
    tokens = meta.get("tokenizer.ggml.tokens") or []
    info: Dict[str, Any] = {"kind": meta.get("tokenizer.ggml.model"),
                            "pre": meta.get("tokenizer.ggml.pre"), "vocab_size": len(tokens)}
    special = {}
    for key in ("bos", "eos", "eot", "eom", "unknown", "padding", "seperator"):
        tid = meta.get(f"tokenizer.ggml.{key}_token_id")
        if isinstance(tid, int) and 0 <= tid < len(tokens):
            special[key] = {"id": tid, "text": tokens[tid]}
    info["special_tokens"] = special
    for key in ("add_bos_token", "add_eos_token", "add_space_prefix"):
        if f"tokenizer.ggml.{key}" in meta:
            info[key] = meta[f"tokenizer.ggml.{key}"]
    types = meta.get("tokenizer.ggml.token_type") or []
    info["num_control_tokens"] = sum(1 for t in types if t == 3)
    # the model's chat templates by name ("default": tokenizer.chat_template), run as written
    names = (["default"] if isinstance(meta.get("tokenizer.chat_template"), str) else []) + sorted(
        k[len("tokenizer.chat_template."):] for k, v in meta.items()
        if k.startswith("tokenizer.chat_template.") and isinstance(v, str))
    info["chat_templates"] = names
    return info


def _tensor_summary(tensors: List[dict], type_key: str) -> Dict[str, Dict[str, int]]:
    by_type: Dict[str, Dict[str, int]] = {}
    for t in tensors:
        entry = by_type.setdefault(t[type_key], {"count": 0, "bytes": 0})
        entry["count"] += 1
        entry["bytes"] += t["size_bytes"]
    return dict(sorted(by_type.items(), key=lambda kv: -kv[1]["bytes"]))


def weight_files(directory: Union[str, os.PathLike]) -> List[Path]:
    """The safetensors files a Hugging Face directory's weights are read from, as the runner
    reads them: the shards model.safetensors.index.json names, else model.safetensors, else every
    *.safetensors (a Mistral repository's consolidated.safetensors beside its shards is not
    counted twice)."""
    p = Path(directory)
    index = p / "model.safetensors.index.json"
    if index.is_file():
        try:
            names = json.loads(index.read_text(encoding="utf-8")).get("weight_map", {}).values()
            return sorted({p / n for n in names if isinstance(n, str) and (p / n).is_file()})
        except (OSError, ValueError, AttributeError):
            return []  # the runner says what is wrong with the index
    if (p / "model.safetensors").is_file():
        return [p / "model.safetensors"]
    return sorted(p.glob("*.safetensors"))


def _read_files(path: str, with_tokenizer: bool = True) -> Dict[str, Any]:
    p = Path(path)
    if p.is_dir():
        files = weight_files(p)
        tensors: List[dict] = []
        for f in files:
            tensors += _core.read_safetensors(str(f))["tensors"]
        tokenizer = None
        if with_tokenizer and files and (p / "tokenizer.json").is_file():  # as the runner reads it
            tokenizer = _gguf_tokenizer(_core.read_gguf(path)["metadata"])
        return {"format": "hf", "files": [f.name for f in files],
                "file_bytes": sum(f.stat().st_size for f in files),
                "tensors": _tensor_summary(tensors, "dtype"), "num_tensors": len(tensors),
                "tokenizer": tokenizer}
    g = _core.read_gguf(path)
    return {"format": f"gguf v{g['version']}", "files": [p.name], "file_bytes": g["file_size"],
            "tensors": _tensor_summary(g["tensors"], "type"), "num_tensors": len(g["tensors"]),
            "tokenizer": _gguf_tokenizer(g["metadata"])}


def inspect_model(path_or_name: Union[str, os.PathLike], kv_cache_memory_bytes: Union[int, str] = "1GiB",
                  max_model_len: int = 0, block_size: int = 16, dtype: str = "f16",
                  progress: bool = True) -> Dict[str, Any]:
    """Everything ``specdec inspect`` shows, as a dict (JSON-ready).

    The KV-cache plan uses ``kv_cache_memory_bytes`` and ``max_model_len`` (default: the model's
    context length, or the longest that fits the budget when it does not).
    """
    path = _resolve(path_or_name, progress)
    config = _core.load_model_config(path)
    unsupported = None
    has_weights = not Path(path).is_dir() or bool(weight_files(path))
    if has_weights and not path.endswith(".json"):
        # a GGUF file or a directory with weights: the checks of loading it (tensors, weight
        # formats, tokenizer), so that inspect accepts exactly what LLM runs. A broken file raises
        # FormatError; a sound one that specdec cannot run (MoE, YaRN on MLA, a weight format, a
        # tokenizer) is still described, with why. A directory with config.json alone is planned.
        try:
            _core.check_model_file(path)
        except _core.UnsupportedError as err:
            unsupported = str(err)
        except _core.FormatError:
            raise
        except ValueError as err:  # a directory missing a part (tokenizer.json, a tensor)
            if not Path(path).is_dir():
                raise
            unsupported = str(err)
    files = _read_files(path, with_tokenizer=unsupported is None)
    budget = parse_bytes(kv_cache_memory_bytes, "kv_cache_memory_bytes")
    layers = config.layer_kv_specs(block_size, dtype)
    fits = _core.max_model_len_for_budget(layers, budget, config.context_length)
    # not even one token fits: plan the whole context, so that the planner says what it needs
    length = max_model_len or min(config.context_length, fits) or config.context_length
    plan = plan_kv_cache(config.layer_kv_specs(block_size, dtype, length), budget, length,
                         model_name=config.name or Path(path).name)
    return {"path": path, "config": json.loads(config.to_json()), "files": files,
            "runnable": unsupported is None, "unsupported": unsupported,
            "kv_cache": {"budget_bytes": budget, "block_size": block_size, "dtype": dtype,
                         "max_model_len": length, "max_model_len_that_fits": fits,
                         "plan": json.loads(plan.to_json())},
            "_plan": plan}


def _layer_pattern(layers: List[dict]) -> str:
    kinds: Dict[str, List[int]] = {}
    for i, l in enumerate(layers):
        key = l["attention"] + (f" {l['sliding_window']}" if l["attention"] == "sliding" else "") \
            + (f" {l['attention_chunk_size']}" if l["attention"] == "chunked" else "")
        kinds.setdefault(key, []).append(i)
    from specdec.kv import compress_names
    return "; ".join(f"{k}: {compress_names([f'layers.{i}' for i in v])}" for k, v in kinds.items())


def _rope_scaling(c: Dict[str, Any]) -> str:
    """The RoPE scaling as the runner applies it (llama.cpp's definitions, docs/models.md)."""
    kind, factor = c["rope_scaling_type"], c["rope_scaling_factor"]
    orig = c["rope_original_context_length"] or c["context_length"]
    if kind == "linear":
        text = f", scaling linear x{factor:g} (angles / {factor:g})"
    elif kind == "yarn":
        low, high = c["rope_yarn_corr_dims"]
        text = (f", scaling yarn x{factor:g} from {orig} tokens (pairs <= {low:g} unscaled, >= {high:g} "
                f"/ {factor:g}, blended between; ext_factor {c['rope_yarn_ext_factor']:g}, beta "
                f"{c['rope_yarn_beta_fast']:g}/{c['rope_yarn_beta_slow']:g})")
    elif kind == "longrope":
        text = (f", scaling longrope (rope_factors_long when max_model_len > {orig}, "
                f"rope_factors_short otherwise)")
    elif kind == "llama3" and c["rope_freq_factors"]:
        text = ", scaling llama3 (per-pair divisors: the rope_freqs tensor)"
    elif kind == "llama3":
        text = (f", scaling llama3 x{factor:g} from {orig} tokens (low/high freq factor "
                f"{c['rope_llama3_low_freq_factor']:g}/{c['rope_llama3_high_freq_factor']:g})")
    else:
        text = ", rope_freqs divisors" if c["rope_freq_factors"] else ""
    if c["rope_freq_factors"] and kind not in ("", "llama3"):
        text += " and rope_freqs divisors"
    if c["rope_mscale"] != 1:
        text += f"; cos/sin x{c['rope_mscale']:.4g}"
    return text


def format_inspect(info: Dict[str, Any]) -> str:
    """The dict of :func:`inspect_model` as text for a person (what came from the file, such as
    its name, with control characters escaped: one field, one line)."""
    c, f, kv = info["config"], info["files"], info["kv_cache"]
    lines = [f"{printable(info['path'])}",
             f"  format        {f['format']}, {_size(f['file_bytes'])} in {len(f['files'])} file(s)",
             f"  architecture  {printable(c['architecture'])} ({printable(c['name']) or 'unnamed'})",
             f"  sizes         {c['num_layers']} layers, hidden {c['hidden_size']}, MLP "
             f"{c['intermediate_size']}, heads {c['num_q_heads']} q / {c['num_kv_heads']} kv x "
             f"{c['head_size']}" + (f" (v {c['head_size_v']})" if c['head_size_v'] != c['head_size'] else "")
             + f", vocab {c['vocab_size']}, context {c['context_length']}",
             f"  attention     {_layer_pattern(c['layers'])}",
             f"  rope          {c['rope_type']}, dim {c['rope_dim']}, base {c['rope_base']:g}"
             + (f", local base {c['rope_base_local']:g}" if c['rope_base_local'] else "")
             + _rope_scaling(c),
             f"  norms         RMSNorm eps {c['norm_eps']:g}"
             + (", QK norm" if c['qk_norm'] else "") + (", post norms" if c['post_norms'] else "")
             + (f", weight offset {c['norm_weight_offset']:g}" if c['norm_weight_offset'] else ""),
             f"  layers        {c['activation']} gated MLP; QKV bias {'yes' if c['qkv_bias'] else 'no'}; "
             f"output head {'tied to the embedding' if c['tied_embeddings'] else 'separate'}"
             + (f"; embedding scale {c['embedding_scale']:.4g}" if c['embedding_scale'] != 1 else "")
             + (f"; final softcap {c['final_logit_softcap']:g}" if c['final_logit_softcap'] else "")
             + (f"; {c['num_experts']} experts" if c['num_experts'] else "")]
    if "dflash" in c:
        dfl = c["dflash"]
        lines[-1] = (f"  layers        {c['activation']} gated MLP; no embedding or output head (the "
                     "target's)")
        lines.append(f"  DFlash        block drafter: context from the target's layers "
                     f"{', '.join(str(i) for i in dfl['target_layer_ids'])} (fc + hidden_norm), block "
                     f"{dfl['block_size']} (at most {dfl['block_size'] - 1} drafts), mask token "
                     f"{dfl['mask_token_id']}, non-causal attention")
    if "mla" in c:
        m = c["mla"]
        lines.append(f"  MLA           kv_lora_rank {m['kv_lora_rank']}, q_lora_rank {m['q_lora_rank']}, "
                     f"qk nope/rope {m['qk_nope_head_dim']}/{m['qk_rope_head_dim']}, v {m['v_head_dim']}")
    lines.append(f"  tensors       {f['num_tensors']}")
    for t, e in f["tensors"].items():
        lines.append(f"    {t:8s} {e['count']:5d} tensors  {_size(e['bytes']):>10s}")
    tok = f["tokenizer"]
    if tok:
        lines.append(f"  tokenizer     {printable(tok['kind'])} (pre {printable(tok['pre'] or '-')}), "
                     f"vocabulary {tok['vocab_size']}, "
                     f"{tok['num_control_tokens']} control tokens, chat templates "
                     f"{printable(', '.join(tok['chat_templates'])) or 'none'}")
        specials = ", ".join(f"{k} {v['id']} {v['text']!r}" for k, v in tok["special_tokens"].items())
        lines.append(f"    special     {specials}")
        flags = ", ".join(f"{k} {tok[k]}" for k in ("add_bos_token", "add_eos_token", "add_space_prefix") if k in tok)
        if flags:
            lines.append(f"    flags       {flags}")
    if not info.get("runnable", True):
        lines.append(f"  runnable      no: {printable(info['unsupported'])}")
    lines.append(f"  KV cache      budget {_size(kv['budget_bytes'])}, {kv['dtype']}, block {kv['block_size']}: "
                 f"longest request that fits {kv['max_model_len_that_fits']} tokens "
                 f"(context {c['context_length']}); plan for {kv['max_model_len']}")
    lines += ["    " + l for l in format_kv_plan(info["_plan"]).splitlines()]
    return "\n".join(lines)


__all__ = ["ModelConfig", "format_inspect", "inspect_model", "load_model_config"]
