"""NumPy reference forward pass of a GGUF model, built the way llama.cpp builds it.

Independent of specdec's C++ model code: the file's metadata comes from ``specdec.read_gguf`` and
``specdec.load_model_config`` (the config under test is also what the engine runs), but every
tensor is dequantized by the ``gguf`` PyPI package (gguf-py, llama.cpp's own Python code) and all
math is plain NumPy. Architectures: llama (incl. chunked-local / NoPE layers and KV sharing),
qwen2 (QKV bias), qwen3 (QK norm), gemma3 (embedding scale, QK norm, post norms, GELU-tanh,
local RoPE base, attention scale) and deepseek2 MLA with dense FFNs. See docs/reference_model.md.

    model = NumpyModel("model.gguf")
    out = model.forward(tokens, hidden_layers=[3])   # teacher forcing over the whole sequence
    out.logits          # [num_tokens, vocab] float32
    out.hidden_states   # {3: [num_tokens, hidden_size]}: the residual stream after layer 3
    out.final_hidden    # [num_tokens, hidden_size]: after output_norm (the output head's input)
    outs = model.forward_batch([tokens_a, tokens_b])  # independent sequences, one weight pass

Weights are dequantized when a layer runs (and cached only for small models), so a 1.5B model
needs about one layer's f32 weights plus a slice of the output head at a time.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

import specdec

from .rope import rope, rope_yarn, yarn_attn_factor, yarn_corr_dims  # noqa: F401

__all__ = ["ForwardOutput", "GgufTensors", "NumpyModel", "attention_mask", "llamacpp_activation",
           "rms_norm", "rope"]

SUPPORTED_ARCHITECTURES = ("llama", "qwen2", "qwen3", "gemma3", "deepseek2", "phi3")
_CACHE_LIMIT_BYTES = 512 << 20   # cache every dequantized weight when they all fit in this
_HEAD_CHUNK_ROWS = 8192          # output-head rows dequantized at a time


class GgufTensors:
    """The tensors of a GGUF file, dequantized to float32 on request by gguf-py."""

    def __init__(self, path: Union[str, os.PathLike]) -> None:
        info = specdec.read_gguf(os.fspath(path))
        self.metadata = info["metadata"]
        self._data = np.memmap(os.fspath(path), dtype=np.uint8, mode="r")
        self._base = int(info["data_offset"])
        self._tensors = {t["name"]: t for t in info["tensors"]}

    def has(self, name: str) -> bool:
        return name in self._tensors

    def names(self) -> List[str]:
        return list(self._tensors)

    def type(self, name: str) -> GGMLQuantizationType:
        return GGMLQuantizationType[self._tensors[name]["type"].upper()]

    def shape(self, name: str) -> Tuple[int, ...]:
        """NumPy shape: GGUF dims reversed (ne0, the contiguous one, last)."""
        return tuple(int(d) for d in reversed(self._tensors[name]["dims"]))

    def _rows_raw(self, name: str) -> np.ndarray:  # [rows, row_bytes] uint8
        t = self._tensors[name]
        start = self._base + int(t["offset"])
        raw = self._data[start:start + int(t["size_bytes"])]
        rows = int(np.prod(t["dims"][1:], dtype=np.int64)) if len(t["dims"]) > 1 else 1
        return raw.reshape(rows, -1)

    def get(self, name: str) -> np.ndarray:
        """The whole tensor as float32, NumPy shape."""
        out = dequantize(np.asarray(self._rows_raw(name)), self.type(name))
        return np.ascontiguousarray(out, dtype=np.float32).reshape(self.shape(name))

    def rows(self, name: str, ids: Union[Sequence[int], slice]) -> np.ndarray:
        """Rows of a 2-D tensor (token ids of an embedding, a range of the output head)."""
        raw = self._rows_raw(name)[ids]
        return np.ascontiguousarray(dequantize(np.asarray(raw), self.type(name)), dtype=np.float32)

    def num_rows(self, name: str) -> int:
        return self._rows_raw(name).shape[0]


@dataclass
class ForwardOutput:
    logits: np.ndarray                        # [len(logits_for), vocab_size] float32
    hidden_states: Dict[int, np.ndarray] = field(default_factory=dict)  # layer -> [n, hidden]
    positions: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # [n]
    final_hidden: Optional[np.ndarray] = None  # [n, hidden]: output_norm(x), the head's input


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """x / sqrt(mean(x^2) + eps) * weight over the last axis; the sum in float64 as ggml does."""
    x64 = x.astype(np.float64)
    scale = 1.0 / np.sqrt(np.mean(x64 * x64, axis=-1, keepdims=True) + eps)
    return ((x64 * scale).astype(np.float32) * weight).astype(np.float32)


def attention_mask(layer: dict, positions: np.ndarray,
                   seq_ids: Optional[np.ndarray] = None) -> np.ndarray:
    """[n_query, n_key] bool, True where the query may attend the key (llama.cpp's masks).

    With ``seq_ids`` the tokens of several sequences are stacked and attend only their own."""
    p1 = positions[:, None]
    p0 = positions[None, :]
    allowed = p0 <= p1
    if seq_ids is not None:
        allowed &= seq_ids[:, None] == seq_ids[None, :]
    kind = layer.get("attention", "full")
    if kind == "sliding":  # key p0 masked for query p1 when p1 - p0 >= window
        allowed &= (p1 - p0) < int(layer["sliding_window"])
    elif kind == "chunked":  # key must be in the query's chunk
        chunk = int(layer["attention_chunk_size"])
        allowed &= p0 >= (p1 // chunk) * chunk
    return allowed


def llamacpp_activation(x: np.ndarray, weight_type: GGMLQuantizationType) -> np.ndarray:
    """x as llama.cpp's CPU matmul sees it: rounded to the weight type's vec_dot_type (Q8_0 for
    Q4_0/Q5_0/Q8_0/IQ4_NL, Q8_1 for Q4_1/Q5_1, Q8_K for K-quants and IQ4_XS, F16/BF16 for
    F16/BF16; F32 untouched).
    Used only by ``NumpyModel(emulate_llamacpp=True)`` to explain differences from llama.cpp."""
    T = GGMLQuantizationType
    if weight_type == T.F32:
        return x
    if weight_type == T.F16:
        return x.astype(np.float16).astype(np.float32)
    if weight_type == T.BF16:
        u = np.ascontiguousarray(x, np.float32).view(np.uint32)
        return ((u + np.uint32(0x7FFF) + ((u >> 16) & 1)) & np.uint32(0xFFFF0000)).view(np.float32)
    if weight_type.name.endswith("_K") or weight_type == T.IQ4_XS:
        # Q8_K: 256 per block, signed max -> -127, f32 scale
        b = x.reshape(-1, 256).astype(np.float32)
        mx = b[np.arange(b.shape[0]), np.abs(b).argmax(-1)][:, None]
        iscale = np.divide(np.float32(-127.0), mx, out=np.zeros_like(mx), where=mx != 0)
        q = np.minimum(127, np.rint(iscale * b))
        d = np.divide(np.float32(1.0), iscale, out=np.zeros_like(iscale), where=iscale != 0)
        return (q * d).astype(np.float32).reshape(x.shape)
    b = x.reshape(-1, 32).astype(np.float32)  # Q8_0 / Q8_1: d = amax / 127 stored as f16
    d = np.abs(b).max(-1, keepdims=True) / np.float32(127)
    inv = np.divide(np.float32(1.0), d, out=np.zeros_like(d), where=d > 0)
    q = np.trunc(b * inv + np.copysign(np.float32(0.5), b * inv))  # roundf: half away from 0
    return (q * d.astype(np.float16).astype(np.float32)).reshape(x.shape)


def int8_activation(x: np.ndarray, weight_type: GGMLQuantizationType) -> np.ndarray:
    """x as specdec's quantized matmuls see it (docs/quant.md): float weights (F32 / F16 / BF16)
    read x as it is; block formats int8 per 32 values with d = amax / 127 kept in f32,
    q = round-half-away(x * (1 / d)); with SPECDEC_Q8K_ACTIVATIONS=1 K-quants and IQ4_XS with one
    scale per 256 values, id = 127 / amax, q = round-half-even(x * id), d = 1 / id (Q8_K)."""
    T = GGMLQuantizationType
    if weight_type in (T.F32, T.F16, T.BF16):
        return x
    q8k = os.environ.get("SPECDEC_Q8K_ACTIVATIONS") == "1"
    if q8k and (weight_type.name.endswith("_K") or weight_type == T.IQ4_XS):
        b = np.ascontiguousarray(x, np.float32).reshape(-1, 256)
        amax = np.abs(b).max(-1, keepdims=True)
        iscale = np.divide(np.float32(127), amax, out=np.zeros_like(amax), where=amax > 0)
        d = np.divide(np.float32(1), iscale, out=np.zeros_like(iscale), where=iscale > 0)
        return (np.rint(b * iscale) * d).astype(np.float32).reshape(x.shape)
    b = np.ascontiguousarray(x, np.float32).reshape(-1, 32)
    d = np.abs(b).max(-1, keepdims=True) / np.float32(127)
    inv = np.divide(np.float32(1.0), d, out=np.zeros_like(d), where=d > 0)
    y = b * inv
    q = np.trunc(y + np.copysign(np.float32(0.5), y))
    return (q * d).astype(np.float32).reshape(x.shape)


def _attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, allowed: np.ndarray, scale: float,
               softcap: float, f16: bool = False, kv_f16: bool = False) -> np.ndarray:
    """softmax(q k^T * scale + mask) v per head; GQA: query head h reads KV head h // group.

    q [n, Hq, D], k [m, Hkv, D], v [m, Hkv, Dv] -> [n, Hq, Dv]. Scores and softmax in float64.
    ``f16``: round q, k, v and the probabilities to f16 as llama.cpp's default path does.
    """
    if f16:
        q, k, v = (t.astype(np.float16).astype(np.float32) for t in (q, k, v))
    if kv_f16:  # an f16 KV cache
        k, v = (t.astype(np.float16).astype(np.float32) for t in (k, v))
    group = q.shape[1] // k.shape[1]
    kk = np.repeat(k, group, axis=1).astype(np.float64)
    vv = np.repeat(v, group, axis=1).astype(np.float64)
    scores = np.einsum("nhd,mhd->hnm", q.astype(np.float64), kk) * scale
    if softcap > 0:
        scores = softcap * np.tanh(scores / softcap)
    scores = np.where(allowed[None, :, :], scores, -np.inf)
    scores -= scores.max(axis=-1, keepdims=True)
    p = np.exp(scores)
    p /= p.sum(axis=-1, keepdims=True)
    if f16:
        p = p.astype(np.float16).astype(np.float64)
    return np.einsum("hnm,mhd->nhd", p, vv).astype(np.float32)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    return (0.5 * x64 * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x64 + 0.044715 * x64 ** 3)))
            ).astype(np.float32)


def _silu(x: np.ndarray) -> np.ndarray:
    x64 = x.astype(np.float64)
    return (x64 / (1.0 + np.exp(-x64))).astype(np.float32)


class NumpyModel:
    """Teacher-forced forward of a GGUF model in NumPy (float32, float64 where cheap)."""

    def __init__(self, path: Union[str, os.PathLike], cache_weights: Optional[bool] = None,
                 emulate_llamacpp: bool = False, int8_activations: bool = False,
                 n_ctx: int = 0) -> None:
        """``emulate_llamacpp``: round matmul inputs as llama.cpp's CPU backend does (Q8
        activations, f16 K/V cache and attention inputs); a diagnostic, not the reference.
        ``int8_activations``: round matmul inputs as specdec's quantized matmuls do
        (``int8_activation``) and K/V to f16 as specdec's default cache: the model's arithmetic
        as specdec defines it, everything else exact. ``n_ctx``: the context the model runs
        with (llama.cpp's n_ctx_seq; the runner's max_model_len); LongRoPE (Phi-3) takes its
        long factors when it exceeds the original context, its short ones otherwise (0: short)."""
        self.path = os.fspath(path)
        self.emulate_llamacpp = emulate_llamacpp
        self.int8_activations = int8_activations
        self.tensors = GgufTensors(self.path)
        self.config = json.loads(specdec.load_model_config(self.path, progress=False).to_json())
        arch = self.config["architecture"]
        if arch not in SUPPORTED_ARCHITECTURES:
            raise NotImplementedError(f"architecture {arch!r}: the NumPy reference supports "
                                      f"{', '.join(SUPPORTED_ARCHITECTURES)}")
        moe = [n for n in self.tensors.names() if n.endswith("ffn_gate_inp.weight")]
        if moe:
            raise NotImplementedError(f"{self.path}: mixture-of-experts layers ({moe[0]}, ...) are "
                                      "not implemented by the NumPy reference (dense FFN only)")
        if self.config.get("rope_scaling_type") not in ("", "linear", "yarn", "llama3", "longrope"):
            raise NotImplementedError(f"rope scaling {self.config['rope_scaling_type']!r}")
        if cache_weights is None:
            total = sum(int(np.prod(self.tensors.shape(n))) * 4 for n in self.tensors.names())
            cache_weights = total <= _CACHE_LIMIT_BYTES
        self._cache: Optional[Dict[str, np.ndarray]] = {} if cache_weights else None
        # llama_model::get_rope_factors: rope_freqs, else LongRoPE's long / short factors.
        factors = "rope_freqs.weight"
        if not self.tensors.has(factors) and self.tensors.has("rope_factors_long.weight"):
            long = n_ctx > self.config["rope_original_context_length"]
            factors = "rope_factors_long.weight" if long else "rope_factors_short.weight"
        self._freq_factors = self.tensors.get(factors) if self.tensors.has(factors) else None

    # -- weights -----------------------------------------------------------------------------
    def weight(self, name: str) -> np.ndarray:
        if self._cache is not None and name in self._cache:
            return self._cache[name]
        w = self.tensors.get(name)
        if self._cache is not None:
            self._cache[name] = w
        return w

    def _linear(self, x: np.ndarray, prefix: str) -> np.ndarray:
        """x [n, in] @ W^T (+ bias): W is GGUF {in, out}, NumPy [out, in]."""
        if self.emulate_llamacpp:
            x = llamacpp_activation(x, self.tensors.type(prefix + ".weight"))
        if self.int8_activations:
            x = int8_activation(x, self.tensors.type(prefix + ".weight"))
        y = x @ self.weight(prefix + ".weight").T
        if self.tensors.has(prefix + ".bias"):
            y = y + self.weight(prefix + ".bias")
        return y.astype(np.float32)

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        return rms_norm(x, self.weight(name), self.config["norm_eps"])

    # -- forward -----------------------------------------------------------------------------
    def forward(self, tokens: Sequence[int], hidden_layers: Iterable[int] = (),
                logits_for: Optional[Sequence[int]] = None, num_layers: int = 0) -> ForwardOutput:
        """Logits at every position (or at ``logits_for``) of ``tokens`` with causal attention
        over the whole sequence, and the residual stream after each layer in ``hidden_layers``
        (negative indices count from the last layer). ``num_layers`` = L > 0: an early exit, the
        first L layers, then the final norm and the head (layer-skip drafting)."""
        out = self.forward_batch([tokens], hidden_layers, num_layers)[0]
        if logits_for is not None:
            rows = np.asarray(list(logits_for), dtype=np.int64)
            out.logits, out.final_hidden = out.logits[rows], out.final_hidden[rows]
        return out

    def logits(self, tokens: Sequence[int]) -> np.ndarray:
        return self.forward(tokens).logits

    def forward_batch(self, sequences: Sequence[Sequence[int]],
                      hidden_layers: Iterable[int] = (), num_layers: int = 0) -> List[ForwardOutput]:
        """``forward`` of several independent sequences in one pass over the weights (each
        weight is dequantized once for all of them)."""
        c = self.config
        seqs = [np.asarray(list(t), dtype=np.int64) for t in sequences]
        vocab_rows = self.tensors.num_rows("token_embd.weight")
        for t in seqs:
            if t.ndim != 1 or t.size == 0:
                raise ValueError("every sequence must be a non-empty sequence of token ids")
            if t.min() < 0 or t.max() >= vocab_rows:
                raise ValueError(f"token ids must be in [0, {vocab_rows})")
        ids = np.concatenate(seqs)
        positions = np.concatenate([np.arange(t.size, dtype=np.int64) for t in seqs])
        seq_ids = np.concatenate([np.full(t.size, i, dtype=np.int64) for i, t in enumerate(seqs)])
        wanted = {int(i) % c["num_layers"] for i in hidden_layers}
        x = self.tensors.rows("token_embd.weight", ids)
        if c["embedding_scale"] != 1.0:
            x = (x * np.float32(c["embedding_scale"])).astype(np.float32)
        kv_store: Dict[int, Tuple[np.ndarray, np.ndarray]] = {}
        hidden: Dict[int, np.ndarray] = {}
        for i in range(num_layers or c["num_layers"]):
            x = self._layer(i, x, positions, seq_ids, kv_store)
            if i in wanted:
                hidden[i] = x.copy()
        final = self._norm(x, "output_norm.weight")
        logits = self._logits(final)
        outs = []
        for i in range(len(seqs)):
            rows = seq_ids == i
            outs.append(ForwardOutput(logits=logits[rows],
                                      hidden_states={k: v[rows] for k, v in hidden.items()},
                                      positions=positions[rows], final_hidden=final[rows]))
        return outs

    def _layer(self, i: int, x: np.ndarray, positions: np.ndarray, seq_ids: np.ndarray,
               kv_store: Dict[int, Tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        c = self.config
        layer = c["layers"][i]
        p = f"blk.{i}."
        h = self._norm(x, p + "attn_norm.weight")
        if layer["attention"] == "mla":
            a = self._mla_attention(i, h, positions, seq_ids)
        else:
            a = self._attention(i, h, positions, seq_ids, kv_store)
        if c["post_norms"]:
            a = self._norm(a, p + "post_attention_norm.weight")
        x = (x + a).astype(np.float32)
        h = self._norm(x, p + "ffn_norm.weight")
        if self.tensors.has(p + "ffn_gate.weight"):
            gate = self._linear(h, p + "ffn_gate")
            up = self._linear(h, p + "ffn_up")
        else:  # Phi-3: ffn_up [2 ff] is gate then up (ggml_swiglu: silu(first half) * second)
            gate, up = np.split(self._linear(h, p + "ffn_up"), 2, axis=-1)
        act = _gelu_tanh(gate) if c["activation"] == "gelu_tanh" else _silu(gate)
        f = self._linear((act * up).astype(np.float32), p + "ffn_down")
        if c["post_norms"]:
            f = self._norm(f, p + "post_ffw_norm.weight")
        return (x + f).astype(np.float32)

    def _rope(self, x: np.ndarray, layer: dict, positions: np.ndarray) -> np.ndarray:
        """llama.cpp's RoPE of a layer: linear and YaRN scale every layer but the local layers of
        a model whose local layers have a base of their own (Gemma 3); Llama 3's scaling is the
        file's rope_freqs tensor (freq_factors), applied to every layer."""
        c = self.config
        neox = c["rope_type"] == "neox"
        local = c["rope_base_local"] > 0 and layer["attention"] != "full"
        kind = "" if local else c["rope_scaling_type"]
        factor = c["rope_scaling_factor"] if kind in ("linear", "yarn") else 1.0
        ext = c["rope_yarn_ext_factor"] if kind == "yarn" else 0.0  # llama_context's default
        n_ctx_orig = c["rope_original_context_length"] or c["context_length"]
        dims = yarn_corr_dims(c["rope_dim"], n_ctx_orig, layer["rope_base"],
                              c["rope_yarn_beta_fast"], c["rope_yarn_beta_slow"])
        attn = yarn_attn_factor(factor, ext, c["rope_attn_factor"] if not local else 1.0)
        return rope_yarn(x, positions, c["rope_dim"], layer["rope_base"], neox, 1.0 / factor,
                         ext, attn, dims, self._freq_factors)

    def _attention(self, i: int, h: np.ndarray, positions: np.ndarray, seq_ids: np.ndarray,
                   kv_store: Dict[int, Tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
        c = self.config
        layer = c["layers"][i]
        p = f"blk.{i}."
        n, hq, hkv = h.shape[0], c["num_q_heads"], c["num_kv_heads"]
        d, dv = c["head_size"], c["head_size_v"]
        if self.tensors.has(p + "attn_qkv.weight"):  # Phi-3: q | k | v rows in one tensor
            qkv = self._linear(h, p + "attn_qkv")
            q, k_fused, v_fused = np.split(qkv, [hq * d, hq * d + hkv * d], axis=-1)
        else:
            q, k_fused, v_fused = self._linear(h, p + "attn_q"), None, None
        q = q.reshape(n, hq, d)
        if c["qk_norm"]:
            q = self._norm(q, p + "attn_q_norm.weight")
        if layer.get("use_rope", True):
            q = self._rope(q, layer, positions)
        target = layer.get("kv_sharing_target", -1)
        if target >= 0:  # reads the KV its target layer wrote; computes none
            k, v = kv_store[target]
        else:
            k = (k_fused if k_fused is not None else self._linear(h, p + "attn_k")).reshape(n, hkv, d)
            v = (v_fused if v_fused is not None else self._linear(h, p + "attn_v")).reshape(n, hkv, dv)
            if c["qk_norm"]:
                k = self._norm(k, p + "attn_k_norm.weight")
            if layer.get("use_rope", True):
                k = self._rope(k, layer, positions)
            kv_store[i] = (k, v)
        scale = c["attention_scale"] or 1.0 / math.sqrt(d)
        mask = attention_mask(layer, positions, seq_ids)
        o = _attention(q, k, v, mask, scale, c["attn_logit_softcap"], self.emulate_llamacpp,
                       self.int8_activations)
        return self._linear(o.reshape(n, hq * dv), p + "attn_output")

    def _mla_attention(self, i: int, h: np.ndarray, positions: np.ndarray,
                       seq_ids: np.ndarray) -> np.ndarray:
        """DeepSeek-V2 multi-head latent attention, decompressed (per-head K and V)."""
        c, m = self.config, self.config["mla"]
        p = f"blk.{i}."
        n, heads = h.shape[0], c["num_q_heads"]
        nope, rot = m["qk_nope_head_dim"], m["qk_rope_head_dim"]
        dv, rank = m["v_head_dim"], m["kv_lora_rank"]
        if self.tensors.has(p + "attn_q_a.weight"):
            q_a = self._norm(self._linear(h, p + "attn_q_a"), p + "attn_q_a_norm.weight")
            q = self._linear(q_a, p + "attn_q_b")
        else:
            q = self._linear(h, p + "attn_q")
        q = q.reshape(n, heads, nope + rot)
        kv_pe = self._linear(h, p + "attn_kv_a_mqa")               # [n, rank + rot]
        latent = self._norm(kv_pe[:, :rank], p + "attn_kv_a_norm.weight")
        k_pe = kv_pe[:, None, rank:]                                # [n, 1, rot], shared by heads
        if self.tensors.has(p + "attn_kv_b.weight"):               # older files: one tensor
            kv = self._linear(latent, p + "attn_kv_b").reshape(n, heads, nope + dv)
            k_nope, v = kv[..., :nope], kv[..., nope:]
        else:  # newer files: attn_k_b [H, rank, nope] and attn_v_b [H, dv, rank] (NumPy shapes)
            k_nope = np.einsum("nc,hcd->nhd", latent, self.weight(p + "attn_k_b.weight"))
            v = np.einsum("nc,hvc->nhv", latent, self.weight(p + "attn_v_b.weight"))
        base = c["layers"][i]["rope_base"]
        q_pe = rope(q[..., nope:], positions, rot, base, False)
        k_pe = rope(k_pe, positions, rot, base, False)
        qf = np.concatenate([q[..., :nope], q_pe], axis=-1)
        kf = np.concatenate([k_nope, np.broadcast_to(k_pe, (n, heads, rot))], axis=-1)
        scale = c["attention_scale"] or 1.0 / math.sqrt(nope + rot)
        mask = attention_mask(c["layers"][i], positions, seq_ids)
        o = _attention(qf, kf.astype(np.float32), v.astype(np.float32), mask, scale,
                       c["attn_logit_softcap"])
        return self._linear(o.reshape(n, heads * dv), p + "attn_output")

    def _logits(self, h: np.ndarray) -> np.ndarray:
        """h [n, hidden] (after output_norm) -> logits [n, vocab]."""
        c = self.config
        head = "output.weight" if self.tensors.has("output.weight") else "token_embd.weight"
        if self.emulate_llamacpp:
            h = llamacpp_activation(h, self.tensors.type(head))
        if self.int8_activations:
            h = int8_activation(h, self.tensors.type(head))
        vocab = self.tensors.num_rows(head)
        out = np.empty((h.shape[0], vocab), dtype=np.float32)
        if self._cache is not None:
            out[:] = h @ self.weight(head).T
        else:
            for start in range(0, vocab, _HEAD_CHUNK_ROWS):
                stop = min(vocab, start + _HEAD_CHUNK_ROWS)
                out[:, start:stop] = h @ self.tensors.rows(head, slice(start, stop)).T
        if self.tensors.has("output.bias"):
            out += self.weight("output.bias")
        cap = c["final_logit_softcap"]
        if cap > 0:
            out = (cap * np.tanh(out.astype(np.float64) / cap)).astype(np.float32)
        return out
