"""Small GGUF models with random weights, for every architecture and weight format.

No small real model exists for MLA, chunked-local attention or KV sharing, and the real models
cover only a few weight formats; these files exercise every path. They load in specdec
(``load_model_config``, ``Tokenizer.from_file``) and, except the chunked-local and KV-sharing
variants (llama.cpp's ``llama`` architecture has neither), in llama.cpp too (``mistral`` runs
there without its window; ``phi3`` needs ``--override-kv general.name=str:random``, as llama.cpp
looks up Phi-3's special tokens by the model's name).

    path = write_random_model(tmp_path / "m.gguf", "gemma3", "Q4_K", seed=1)

Variants (``ARCHITECTURES``):
  llama          NORM RoPE, GQA, tied output head
  qwen2          NEOX RoPE, Q/K/V biases, separate output head
  qwen3          NEOX RoPE, per-head Q/K RMSNorm, head size != hidden / heads
  gemma3         6 layers (5 sliding, window 16, + 1 global), two RoPE bases, QK norm, post norms,
                 GELU-tanh, sqrt(hidden) embedding scale, MQA, key_length = 2 hidden / heads
  deepseek2      MLA as current llama.cpp converters write it: q_lora (attn_q_a, attn_q_a_norm,
                 attn_q_b), attn_kv_a_mqa, attn_kv_a_norm, per-head attn_k_b / attn_v_b, and the
                 *_mla head sizes; dense FFNs (leading_dense_block_count = block_count)
  deepseek2-kvb  the same with the older single attn_kv_b tensor (no *_mla keys)
  llama-chunked  llama with llama.attention.chunk_size = 16: layers i % 4 == 3 global and NoPE
  llama-kvshare  llama with llama.attention.shared_kv_layers = 2: the last 2 of 4 layers read
                 layer 1's KV (their own attn_k / attn_v are written but unused)
  llama3         Llama 3.x: base 5e5 and a rope_freqs tensor (per-pair divisors) computed as
                 llama.cpp's converter does from rope_scaling {llama3, factor 8, low_freq_factor
                 1, high_freq_factor 4, original 8192}: all three wavelength bands occur
  mistral        llama with llama.attention.sliding_window = 16: every layer slides (llama.cpp's
                 llama architecture ignores the key and attends fully)
  qwen2-yarn     qwen2 with rope.scaling.type yarn, factor 4, original_context_length 32768 (as
  qwen3-yarn     the converter writes Qwen's rope_scaling): YaRN's blend over pairs 5..10 of 16
  phi3           Phi-3 as llama.cpp's converter writes it: fused attn_qkv (q | k | v rows),
                 ffn_up holding gate then up (no ffn_gate), separate output head, NEOX RoPE,
                 LongRoPE (rope_factors_long / _short, original_context_length 32, attn_factor
                 sqrt(1 + ln(2048 / 32) / ln 32)), and a sliding_window key llama.cpp ignores

Sizes: block formats with 256-element blocks (Q4_K, Q5_K, Q6_K, IQ4_XS) need rows of 256, so
those files have hidden size 256; the others use 128. Every file is well under 5 MB. Weights are
drawn from ``numpy.random.default_rng(seed)``: the same arguments give the same bytes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple, Union

import numpy as np
from gguf import GGUFWriter, RopeScalingType

from specdec.testing.quantize import WEIGHT_FORMATS, block_size, quantize, storage_format

__all__ = ["ARCHITECTURES", "WEIGHT_FORMATS", "TokenizerSpec", "write_random_model", "byte_vocab",
           "llama3_rope_factors"]

ARCHITECTURES = ("llama", "qwen2", "qwen3", "gemma3", "deepseek2", "deepseek2-kvb",
                 "llama-chunked", "llama-kvshare", "llama3", "mistral", "qwen2-yarn", "qwen3-yarn",
                 "phi3")
# Scales chosen so that the logits depend on every layer (a tied head with large embeddings
# predicts the input token) and are spread (std ~2-4, median top-2 margin ~0.5).
EMBED_STD = 0.3      # token embedding
OUT_GAIN = 3.0       # attn_output / ffn_down std = OUT_GAIN / sqrt(fan_in)
BIAS_STD = 0.1       # qwen2 Q/K/V biases
POST_NORM = 4.0      # gemma3 post-norm weights (mean; std 0.5)
GEMMA_EMBED = 3.0    # gemma3 embedding std = EMBED_STD * GEMMA_EMBED / sqrt(hidden) before scaling
OUTPUT_NORM = 4.0    # gemma3 output_norm weight mean
WINDOW = 16          # gemma3 sliding window, llama-chunked chunk size: short prompts cross them
CONTEXT_LENGTH = 2048
LLAMA3_SCALING = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8192}
YARN_FACTOR, YARN_ORIGINAL_CONTEXT = 4.0, 32768
PHI3_ORIGINAL_CONTEXT = 32   # LongRoPE: runs with max_model_len > 32 take the long factors
_BASE_ARCHITECTURE = {"llama3": "llama", "mistral": "llama"}  # the GGUF architecture of a variant


@dataclass(frozen=True)
class _Dims:
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head: int
    layers: int


def _dims(variant: str, fmt: str) -> _Dims:
    h = 256 if block_size(fmt) == 256 else 128
    if variant == "gemma3":
        return _Dims(h, h, 4, 1, h // 2, 6)        # MQA, head size 2x hidden / heads
    if variant.startswith("qwen3"):
        return _Dims(h, h, 4, 2, h // 2, 2)        # head size 2x hidden / heads
    if variant == "deepseek2":                     # MLA files: one latent "KV head"
        return _Dims(h, h, 4, 1, h // 4, 2)
    if variant == "deepseek2-kvb":                 # per-head K and V after kv_b
        return _Dims(h, h, 4, 4, h // 4, 2)
    if variant in ("llama-chunked", "llama-kvshare"):
        return _Dims(h, h, 4, 2, h // 4, 4)
    return _Dims(h, h, 4, 2, h // 4, 2)


@dataclass(frozen=True)
class TokenizerSpec:
    tokens: List[str]
    scores: List[float]
    types: List[int]


def byte_vocab(size: int = 320) -> TokenizerSpec:
    """A SentencePiece-style vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then word pieces
    (``▁`` + letters, letter pairs) up to ``size``, so text tokenizes into pieces and bytes."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    letters = "etaoinshrdlucmfwypvbgk"
    pieces = ["▁"] + list(letters) + ["▁" + c for c in letters]
    pieces += [a + b for a in letters for b in letters]
    for p in pieces:
        if len(tokens) >= size:
            break
        tokens.append(p)
        types.append(1)
    scores = [0.0] * 259 + [-float(i) for i in range(len(tokens) - 259)]
    return TokenizerSpec(tokens, scores, types)


class _Builder:
    def __init__(self, variant: str, fmt: str, seed: int, dims: _Dims, vocab: int,
                 overrides: Optional[Dict[str, str]] = None) -> None:
        self.variant, self.fmt, self.d, self.vocab = variant, fmt, dims, vocab
        self.overrides = overrides or {}
        self.used: set = set()
        self.rng = np.random.default_rng(seed)
        self.tensors: List[Tuple[str, np.ndarray, str]] = []  # name, float32 data, format

    def draw(self, rows: int, cols: int, std: float = 0.0) -> np.ndarray:
        std = std or 1.0 / np.sqrt(cols)
        return (self.rng.standard_normal((rows, cols)) * std).astype(np.float32)

    def add(self, name: str, w: np.ndarray) -> None:
        """A weight in the file's format (NumPy shape; GGUF dims reversed)."""
        suffix = next((x for x in self.overrides if name == x or name.endswith("." + x)), None)
        if suffix is None:
            self.tensors.append((name, w, storage_format(self.fmt, w.shape[-1])))
            return
        fmt = self.overrides[suffix]
        stored = storage_format(fmt, w.shape[-1])
        if stored != fmt:  # an override is what the test asked for: no silent fallback
            raise ValueError(f"tensor_formats[{suffix!r}] = {fmt!r}: {name} has rows of "
                             f"{w.shape[-1]}, which {fmt} cannot hold (it would be {stored})")
        self.used.add(suffix)
        self.tensors.append((name, w, fmt))

    def matrix(self, name: str, rows: int, cols: int, std: float = 0.0) -> None:
        self.add(name, self.draw(rows, cols, std))

    def vector(self, name: str, n: int, mean: float = 1.0, std: float = 0.1) -> None:
        v = (mean + self.rng.standard_normal(n) * std).astype(np.float32)
        self.tensors.append((name, v, "F32"))


def _attention_tensors(b: _Builder, p: str, arch: str) -> None:
    d = b.d
    if arch == "phi3":  # one tensor: q rows, k rows, v rows
        b.add(p + "attn_qkv.weight", np.concatenate([
            b.draw(d.heads * d.head, d.hidden), b.draw(d.kv_heads * d.head, d.hidden),
            b.draw(d.kv_heads * d.head, d.hidden)]))
        b.matrix(p + "attn_output.weight", d.hidden, d.heads * d.head,
                 OUT_GAIN / np.sqrt(d.heads * d.head))
        return
    b.matrix(p + "attn_q.weight", d.heads * d.head, d.hidden)
    b.matrix(p + "attn_k.weight", d.kv_heads * d.head, d.hidden)
    b.matrix(p + "attn_v.weight", d.kv_heads * d.head, d.hidden)
    if arch == "qwen2":
        b.vector(p + "attn_q.bias", d.heads * d.head, 0.0, BIAS_STD)
        b.vector(p + "attn_k.bias", d.kv_heads * d.head, 0.0, BIAS_STD)
        b.vector(p + "attn_v.bias", d.kv_heads * d.head, 0.0, BIAS_STD)
    if arch in ("qwen3", "gemma3"):
        b.vector(p + "attn_q_norm.weight", d.head)
        b.vector(p + "attn_k_norm.weight", d.head)
    b.matrix(p + "attn_output.weight", d.hidden, d.heads * d.head,
             OUT_GAIN / np.sqrt(d.heads * d.head))


def _mla_sizes(d: _Dims) -> Dict[str, int]:
    # n_heads * v_head and both lora ranks must be rows of whole 256-blocks for K-quants / IQ4_XS.
    return {"nope": d.hidden // 4, "rope": d.hidden // 8, "v": d.hidden // 4,
            "kv_lora": d.hidden, "q_lora": d.hidden}


def _mla_tensors(b: _Builder, p: str, split_kv_b: bool) -> None:
    d, m = b.d, _mla_sizes(b.d)
    b.matrix(p + "attn_q_a.weight", m["q_lora"], d.hidden)
    b.vector(p + "attn_q_a_norm.weight", m["q_lora"])
    b.matrix(p + "attn_q_b.weight", d.heads * (m["nope"] + m["rope"]), m["q_lora"])
    b.matrix(p + "attn_kv_a_mqa.weight", m["kv_lora"] + m["rope"], d.hidden)
    b.vector(p + "attn_kv_a_norm.weight", m["kv_lora"])
    kv_b = b.draw(d.heads * (m["nope"] + m["v"]), m["kv_lora"])  # per head: k_nope rows, v rows
    if split_kv_b:  # as the converter splits it: GGUF {nope, kv_lora, heads}, {kv_lora, v, heads}
        per_head = kv_b.reshape(d.heads, m["nope"] + m["v"], m["kv_lora"])
        k_b = per_head[:, :m["nope"], :].transpose(0, 2, 1)
        b.add(p + "attn_k_b.weight", np.ascontiguousarray(k_b))
        b.add(p + "attn_v_b.weight", np.ascontiguousarray(per_head[:, m["nope"]:, :]))
    else:
        b.add(p + "attn_kv_b.weight", kv_b)
    b.matrix(p + "attn_output.weight", d.hidden, d.heads * m["v"],
             OUT_GAIN / np.sqrt(d.heads * m["v"]))


def llama3_rope_factors(head_dim: int, base: float, factor: float, low_freq_factor: float,
                        high_freq_factor: float, original_max_position_embeddings: int) -> np.ndarray:
    """The rope_freqs tensor llama.cpp's converter writes for rope_scaling type llama3
    (LlamaModel.generate_extra_tensors): per pair, 1 for wavelengths below original /
    high_freq_factor, factor above original / low_freq_factor, and between them
    1 / ((1 - smooth) / factor + smooth), smooth = (original / wavelength - low) / (high - low)."""
    freqs = 1.0 / (base ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    low_wavelen = original_max_position_embeddings / low_freq_factor
    high_wavelen = original_max_position_embeddings / high_freq_factor
    out = []
    for freq in freqs.astype(np.float32):
        wavelen = 2 * np.pi / freq
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(factor)
        else:
            smooth = (original_max_position_embeddings / wavelen - low_freq_factor) / (
                high_freq_factor - low_freq_factor)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)


def _build_tensors(b: _Builder, arch: str) -> None:
    d = b.d
    # Gemma scales the embedding by sqrt(hidden): its rows are drawn smaller, like real ones.
    embed_std = EMBED_STD * (GEMMA_EMBED / np.sqrt(d.hidden) if arch == "gemma3" else 1.0)
    b.matrix("token_embd.weight", b.vocab, d.hidden, std=embed_std)
    for i in range(d.layers):
        p = f"blk.{i}."
        b.vector(p + "attn_norm.weight", d.hidden)
        if arch == "deepseek2":
            _mla_tensors(b, p, b.variant == "deepseek2")
        else:
            _attention_tensors(b, p, arch)
        if arch == "gemma3":
            b.vector(p + "post_attention_norm.weight", d.hidden, POST_NORM, 0.5)
        b.vector(p + "ffn_norm.weight", d.hidden)
        if arch == "phi3":  # gate rows then up rows, as Phi-3's gate_up_proj
            b.add(p + "ffn_up.weight", np.concatenate([b.draw(d.ffn, d.hidden), b.draw(d.ffn, d.hidden)]))
        else:
            b.matrix(p + "ffn_gate.weight", d.ffn, d.hidden)
            b.matrix(p + "ffn_up.weight", d.ffn, d.hidden)
        b.matrix(p + "ffn_down.weight", d.hidden, d.ffn, OUT_GAIN / np.sqrt(d.ffn))
        if arch == "gemma3":
            b.vector(p + "post_ffw_norm.weight", d.hidden, POST_NORM, 0.5)
    b.vector("output_norm.weight", d.hidden, OUTPUT_NORM if arch == "gemma3" else 1.0)
    if arch in ("qwen2", "deepseek2", "phi3"):  # the others tie the output head to the embedding
        b.matrix("output.weight", b.vocab, d.hidden, std=2.0 / np.sqrt(d.hidden))
    if arch == "phi3":  # LongRoPE divisors: short ones near 1, long ones up to 40
        half = d.head // 2
        b.tensors.append(("rope_factors_long.weight", np.geomspace(1.0, 40.0, half).astype(np.float32), "F32"))
        b.tensors.append(("rope_factors_short.weight", np.linspace(1.0, 2.0, half).astype(np.float32), "F32"))
    if b.variant == "llama3":
        b.tensors.append(("rope_freqs.weight", llama3_rope_factors(d.head, 5e5, **LLAMA3_SCALING),
                          "F32"))


def _write_metadata(w: GGUFWriter, b: _Builder, arch: str, tok: TokenizerSpec) -> None:
    d, v = b.d, b.variant
    w.add_name(f"random {v} {b.fmt}")
    w.add_context_length(int(YARN_FACTOR * YARN_ORIGINAL_CONTEXT) if v.endswith("-yarn")
                         else CONTEXT_LENGTH)
    w.add_embedding_length(d.hidden)
    w.add_block_count(d.layers)
    w.add_feed_forward_length(d.ffn)
    w.add_head_count(d.heads)
    w.add_head_count_kv(d.kv_heads)
    w.add_layer_norm_rms_eps(1e-6 if arch in ("gemma3", "qwen2", "qwen3") else 1e-5)
    w.add_rope_freq_base(1e6 if arch in ("qwen2", "qwen3", "gemma3") else 5e5 if v == "llama3" else 1e4)
    w.add_vocab_size(b.vocab)
    if arch == "deepseek2":
        m = _mla_sizes(d)
        w.add_rope_dimension_count(m["rope"])
        w.add_q_lora_rank(m["q_lora"])
        w.add_kv_lora_rank(m["kv_lora"])
        if v == "deepseek2":  # current converters: MQA sizes in key/value_length, heads in *_mla
            w.add_key_length(m["kv_lora"] + m["rope"])
            w.add_value_length(m["kv_lora"])
            w.add_uint32(f"{arch}.attention.key_length_mla", m["nope"] + m["rope"])
            w.add_uint32(f"{arch}.attention.value_length_mla", m["v"])
        else:
            w.add_key_length(m["nope"] + m["rope"])
            w.add_value_length(m["v"])
        w.add_leading_dense_block_count(d.layers)
        w.add_expert_feed_forward_length(d.ffn)
        w.add_expert_shared_count(0)
    else:
        w.add_rope_dimension_count(d.head)
        if arch in ("qwen3", "gemma3"):
            w.add_key_length(d.head)
            w.add_value_length(d.head)
    if arch == "gemma3":
        w.add_sliding_window(WINDOW)
        w.add_float32(f"{arch}.rope.freq_base_swa", 1e4)
    if v in ("mistral", "phi3"):
        w.add_sliding_window(WINDOW)
    if arch == "phi3":  # what the converter writes for LongRoPE (phi.py): no scaling type
        w.add_rope_scaling_orig_ctx_len(PHI3_ORIGINAL_CONTEXT)
        scale = CONTEXT_LENGTH / PHI3_ORIGINAL_CONTEXT
        w.add_rope_scaling_attn_factors(float(np.sqrt(1 + np.log(scale) / np.log(PHI3_ORIGINAL_CONTEXT))))
    if v.endswith("-yarn"):  # what the converter writes for Qwen's rope_scaling (base.py)
        w.add_rope_scaling_type(RopeScalingType.YARN)
        w.add_rope_scaling_factor(YARN_FACTOR)
        w.add_rope_scaling_orig_ctx_len(YARN_ORIGINAL_CONTEXT)
    if v == "llama-chunked":
        w.add_uint32(f"{arch}.attention.chunk_size", WINDOW)
    if v == "llama-kvshare":
        w.add_uint32(f"{arch}.attention.shared_kv_layers", 2)
    w.add_tokenizer_model("llama")
    w.add_token_list(tok.tokens)
    w.add_token_scores(tok.scores)
    w.add_token_types(tok.types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(True)
    w.add_add_space_prefix(arch != "gemma3")


def write_random_model(path: Union[str, os.PathLike], architecture: str = "llama",
                       weight_format: str = "F32", seed: int = 0, vocab_size: int = 320,
                       extra_tensors: Optional[Dict[str, np.ndarray]] = None,
                       tensor_formats: Optional[Dict[str, str]] = None,
                       metadata: Optional[Dict[str, Union[str, int, float]]] = None) -> str:
    """Writes a random model of ``architecture`` (a variant in ARCHITECTURES) whose matrices are
    in ``weight_format`` (WEIGHT_FORMATS; a matrix whose rows do not fit its blocks falls back to
    Q8_0, then F16, as llama.cpp's quantizer does; norms and biases are F32). ``extra_tensors``
    (name -> array, stored F32) are added as they are: tests of files with tensors a model should
    not have. ``tensor_formats`` (name suffix -> format, e.g. ``{"attn_v.weight": "Q6_K"}``, as a
    Q4_K_M file mixes them) overrides the format of the matrices whose names end so.
    ``metadata`` (key -> str, int (u32) or float (f32)) adds keys the variant does not write:
    tests of files with keys a model should not have. Returns the path."""
    if architecture not in ARCHITECTURES:
        raise ValueError(f"architecture = {architecture!r}: expected one of "
                         f"{', '.join(ARCHITECTURES)}")
    if weight_format not in WEIGHT_FORMATS:
        raise ValueError(f"weight_format = {weight_format!r}: expected one of "
                         f"{', '.join(WEIGHT_FORMATS)}")
    arch = _BASE_ARCHITECTURE.get(architecture, architecture.split("-")[0])
    tok = byte_vocab(vocab_size)
    dims = _dims(architecture, weight_format)
    for suffix, fmt in (tensor_formats or {}).items():
        if fmt not in WEIGHT_FORMATS:
            raise ValueError(f"tensor_formats[{suffix!r}] = {fmt!r}: expected one of "
                             f"{', '.join(WEIGHT_FORMATS)}")
    b = _Builder(architecture, weight_format, seed, dims, len(tok.tokens), tensor_formats or {})
    _build_tensors(b, arch)
    unused = sorted(set(b.overrides) - b.used)
    if unused:
        raise ValueError(f"tensor_formats: no tensor of a {architecture} model ends in "
                         f"{', '.join(unused)}")
    path = os.fspath(path)
    w = GGUFWriter(path, arch)
    _write_metadata(w, b, arch, tok)
    for key, value in (metadata or {}).items():
        if isinstance(value, str):
            w.add_string(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        else:
            w.add_float32(key, float(value))
    for name, data, fmt in b.tensors:
        stored, qtype = quantize(data, fmt)
        w.add_tensor(name, stored, raw_dtype=qtype if stored.dtype == np.uint8 else None)
    for name, data in (extra_tensors or {}).items():
        w.add_tensor(name, np.ascontiguousarray(data, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
