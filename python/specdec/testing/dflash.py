"""DFlash drafter checkpoints as z-lab lays them out (a directory: ``config.json`` with
``dflash_config``, ``model.safetensors``), with random weights for a given target, and the
safetensors writer they need (NumPy only)."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Dict, Optional, Sequence, Union

import numpy as np

from specdec._files import write_file_atomic
from specdec.model import load_model_config


def _bf16_bytes(a: np.ndarray) -> bytes:
    bits = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even
    return rounded.tobytes()


def bf16_round(a: np.ndarray) -> np.ndarray:
    """The float32 values a BF16 store of ``a`` holds."""
    bits = np.frombuffer(_bf16_bytes(a), dtype=np.uint16).astype(np.uint32) << 16
    return bits.view(np.float32).reshape(np.shape(a))


def write_safetensors(path: Union[str, os.PathLike], tensors: Dict[str, np.ndarray], dtype: str = "F32") -> None:
    """``tensors`` (float arrays) as a safetensors file, every tensor in ``dtype`` (F32, F16, BF16)."""
    header: Dict[str, object] = {}
    blobs = []
    offset = 0
    for name, a in tensors.items():
        if dtype == "F32":
            data = np.ascontiguousarray(a, dtype=np.float32).tobytes()
        elif dtype == "F16":
            data = np.ascontiguousarray(a, dtype=np.float16).tobytes()
        elif dtype == "BF16":
            data = _bf16_bytes(a)
        else:
            raise ValueError(f"dtype = {dtype!r}: F32, F16 or BF16")
        header[name] = {"dtype": dtype, "shape": list(np.shape(a)), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    write_file_atomic(path, struct.pack("<Q", len(text)) + text + b"".join(blobs), "path")


def dflash_config(target_path: str, num_layers: int = 1, target_layer_ids: Optional[Sequence[int]] = None,
                  block_size: int = 4, mask_token_id: Optional[int] = None, num_heads: int = 4,
                  num_kv_heads: int = 2, head_dim: int = 32, intermediate_size: Optional[int] = None,
                  rope_theta: float = 10000.0) -> dict:
    """A Qwen3-style DFlash drafter config (Hugging Face names) sized for ``target_path``."""
    t = load_model_config(target_path)
    ids = list(target_layer_ids) if target_layer_ids is not None else sorted(
        {max(0, t.num_layers // 4), max(0, t.num_layers // 2), max(0, t.num_layers - 2)})
    return {
        "architectures": ["DFlashDraftModel"], "model_type": "qwen3",
        "hidden_size": t.hidden_size, "num_hidden_layers": num_layers, "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads, "head_dim": head_dim,
        "intermediate_size": intermediate_size or 2 * t.hidden_size, "hidden_act": "silu",
        "rms_norm_eps": 1e-6, "rope_theta": rope_theta, "max_position_embeddings": t.context_length,
        "vocab_size": t.vocab_size, "attention_bias": False, "tie_word_embeddings": False,
        "dflash_config": {"target_layer_ids": ids, "block_size": block_size,
                          "mask_token_id": t.vocab_size - 1 if mask_token_id is None else mask_token_id},
    }


def random_dflash_weights(config: dict, seed: int = 0, scale: float = 0.5) -> Dict[str, np.ndarray]:
    """Random weights in z-lab's names ([out, in] matrices), norms near 1."""
    rng = np.random.default_rng(seed)
    d, hd = config["hidden_size"], config["head_dim"]
    h, kvh, ff = config["num_attention_heads"], config["num_key_value_heads"], config["intermediate_size"]
    n_ctx = len(config["dflash_config"]["target_layer_ids"])

    def mat(o, i):
        return (rng.standard_normal((o, i)) * scale / np.sqrt(i)).astype(np.float32)

    def norm(n):
        return (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w: Dict[str, np.ndarray] = {}
    for i in range(config["num_hidden_layers"]):
        p = f"layers.{i}."
        w[p + "input_layernorm.weight"] = norm(d)
        w[p + "self_attn.q_proj.weight"] = mat(h * hd, d)
        w[p + "self_attn.k_proj.weight"] = mat(kvh * hd, d)
        w[p + "self_attn.v_proj.weight"] = mat(kvh * hd, d)
        w[p + "self_attn.o_proj.weight"] = mat(d, h * hd)
        w[p + "self_attn.q_norm.weight"] = norm(hd)
        w[p + "self_attn.k_norm.weight"] = norm(hd)
        w[p + "post_attention_layernorm.weight"] = norm(d)
        w[p + "mlp.gate_proj.weight"] = mat(ff, d)
        w[p + "mlp.up_proj.weight"] = mat(ff, d)
        w[p + "mlp.down_proj.weight"] = mat(d, ff)
    w["norm.weight"] = norm(d)
    w["fc.weight"] = mat(d, n_ctx * d)
    w["hidden_norm.weight"] = norm(d)
    return w


def write_dflash_checkpoint(directory: Union[str, os.PathLike], config: dict, weights: Dict[str, np.ndarray],
                            dtype: str = "F32") -> Path:
    """``config.json`` and ``model.safetensors`` in ``directory`` (created)."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    write_file_atomic(out / "config.json", json.dumps(config, indent=1) + "\n", "directory")
    write_safetensors(out / "model.safetensors", weights, dtype)
    return out


def write_random_dflash(directory: Union[str, os.PathLike], target_path: str, seed: int = 0,
                        dtype: str = "F32", **config_fields) -> Path:
    """A random-weight DFlash drafter for ``target_path`` (see ``dflash_config`` for the fields)."""
    config = dflash_config(target_path, **config_fields)
    return write_dflash_checkpoint(directory, config, random_dflash_weights(config, seed), dtype)
