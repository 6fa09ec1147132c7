"""The Hugging Face twin of a float GGUF model: the directory llama.cpp's converter would have
read to write that file (config.json, safetensors, tokenizer.json, tokenizer_config.json,
generation_config.json), so that the directory and the file must run the same forward pass.

The converter's changes are undone: Llama q/k rows go back from interleaved (NORM RoPE) to
rotate-half order, Gemma 3 norms are stored as w - 1 (HF's RMSNorm multiplies by 1 + w), and
Phi-3's rope_factors_long / _short tensors go back into config.json's LongRoPE rope_scaling
(long_factor / short_factor, original_max_position_embeddings at the top level, as Phi-3's configs
have it); its attn_qkv and gate | up ffn_up stay fused (qkv_proj, gate_up_proj).
Matrices keep their bytes (F32, F16 or BF16); 1-D tensors are written F32.

    write_hf_twin(write_random_model(tmp_path / "m.gguf", "qwen2", "BF16"), tmp_path / "hf",
                  num_shards=2)
"""

from __future__ import annotations

import json
import os
import struct
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from specdec._files import write_file_atomic

__all__ = ["write_hf_twin", "tokenizer_json", "write_safetensors"]

_ARCHS = ("llama", "qwen2", "qwen3", "gemma3", "phi3")
_ST_DTYPE = {0: "F32", 1: "F16", 30: "BF16"}  # GGML type id -> safetensors dtype
_LAYER = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
          "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
          "attn_k_norm": "self_attn.k_norm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
          "ffn_down": "mlp.down_proj", "post_attention_norm": "post_attention_layernorm",
          "post_ffw_norm": "post_feedforward_layernorm", "attn_qkv": "self_attn.qkv_proj"}
_ROPE_FACTORS = ("rope_freqs.weight", "rope_factors_long.weight", "rope_factors_short.weight")
QWEN2_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
               r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
LLAMA3_SPLIT = QWEN2_SPLIT.replace(r"\p{N}|", r"\p{N}{1,3}|")


def write_safetensors(path: Union[str, os.PathLike],
                      tensors: Sequence[Tuple[str, str, Tuple[int, ...], bytes]]) -> None:
    """A safetensors file of (name, dtype, shape, raw little-endian bytes)."""
    header: Dict[str, dict] = {}
    offset = 0
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    write_file_atomic(path, struct.pack("<Q", len(text)) + text + b"".join(t[3] for t in tensors), "path")


def _hf_name(name: str, arch: str) -> str:
    if name == "token_embd.weight":
        return "model.embed_tokens.weight"
    if name == "output_norm.weight":
        return "model.norm.weight"
    if name == "output.weight":
        return "lm_head.weight"
    _, layer, part, kind = name.split(".")
    if part == "ffn_norm":
        hf = "pre_feedforward_layernorm" if arch == "gemma3" else "post_attention_layernorm"
    elif part == "ffn_up" and arch == "phi3":  # gate rows then up rows
        hf = "mlp.gate_up_proj"
    else:
        hf = _LAYER[part]
    return f"model.layers.{layer}.{hf}.{kind}"


def _unpermute(rows: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's permute undone: interleaved pairs back to rotate-half order per head."""
    n = rows.shape[0]
    return rows.reshape(heads, n // heads // 2, 2, *rows.shape[1:]).swapaxes(1, 2).reshape(rows.shape)


def _tensors(reader, arch: str, md: Dict[str, object]) -> List[Tuple[str, str, Tuple[int, ...], bytes]]:
    heads, kv_heads = md[f"{arch}.attention.head_count"], md[f"{arch}.attention.head_count_kv"]
    out = []
    for t in reader.tensors:
        if t.name in _ROPE_FACTORS:  # Llama 3's and Phi-3's factors: config.json's rope_scaling
            continue
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))
        if int(t.tensor_type) not in _ST_DTYPE:
            raise ValueError(f"{t.name}: type {t.tensor_type.name}; a twin needs F32, F16 or BF16 tensors")
        dtype = _ST_DTYPE[int(t.tensor_type)]
        raw = np.frombuffer(np.asarray(t.data).tobytes(), dtype=np.float32 if dtype == "F32" else np.uint16)
        raw = raw.reshape(shape)
        if len(shape) == 1 and dtype != "F32":
            raise ValueError(f"{t.name}: 1-D tensors must be F32 here")
        if arch == "gemma3" and t.name.endswith("norm.weight"):
            raw = (raw.astype(np.float64) - 1.0).astype(np.float32)
        if arch == "llama" and t.name.split(".")[-2] in ("attn_q", "attn_k"):
            raw = _unpermute(raw, heads if ".attn_q." in t.name else kv_heads)
        out.append((_hf_name(t.name, arch), dtype, shape, np.ascontiguousarray(raw).tobytes()))
    return out


def _longrope(reader, arch: str, md: Dict[str, object]) -> Optional[dict]:
    """Phi-3's LongRoPE rope_scaling from the factor tensors, with attention_factor only where
    the file's attn_factor is not the one transformers and llama.cpp's converter compute."""
    factors = {t.name: [float(x) for x in np.asarray(t.data, dtype=np.float32)]
               for t in reader.tensors if t.name in _ROPE_FACTORS[1:]}
    if not factors:
        return None
    orig, ctx = md[f"{arch}.rope.scaling.original_context_length"], md[f"{arch}.context_length"]
    out = {"type": "longrope", "long_factor": factors["rope_factors_long.weight"],
           "short_factor": factors["rope_factors_short.weight"]}
    computed = float(np.sqrt(1 + np.log(ctx / orig) / np.log(orig))) if ctx > orig else 1.0
    attn = float(md.get(f"{arch}.rope.scaling.attn_factor", 1.0))
    if abs(attn - computed) > 1e-6 * computed:
        out["attention_factor"] = attn
    return out


def _rope_scaling(arch: str, md: Dict[str, object], has_freqs: bool,
                  rope_scaling: Optional[dict], reader=None) -> Optional[dict]:
    """config.json's rope_scaling: given (Llama 3: the parameters its rope_freqs came from),
    Phi-3's LongRoPE from its factor tensors, or YaRN's from the GGUF keys."""
    if rope_scaling is not None:
        return dict(rope_scaling)
    if arch == "phi3":
        return _longrope(reader, arch, md)
    if has_freqs:
        raise ValueError("the GGUF has a rope_freqs tensor: give rope_scaling (the llama3 "
                         "parameters it was computed from)")
    if md.get(f"{arch}.rope.scaling.type") == "yarn":
        out = {"rope_type": "yarn", "factor": md[f"{arch}.rope.scaling.factor"],
               "original_max_position_embeddings": md[f"{arch}.rope.scaling.original_context_length"]}
        for key, name in (("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow"),
                          ("yarn_ext_factor", "extrapolation_factor")):
            if f"{arch}.rope.scaling.{key}" in md:
                out[name] = md[f"{arch}.rope.scaling.{key}"]
        return out
    return None


def _config(arch: str, md: Dict[str, object], tied: bool) -> dict:
    a = lambda k, d=None: md.get(f"{arch}.{k}", d)  # noqa: E731
    heads = a("attention.head_count")
    hidden = a("embedding_length")
    head_dim = a("attention.key_length", hidden // heads)
    c = {"architectures": [{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
                            "gemma3": "Gemma3ForCausalLM", "phi3": "Phi3ForCausalLM"}[arch]],
         "model_type": "gemma3_text" if arch == "gemma3" else arch,
         "hidden_size": hidden, "intermediate_size": a("feed_forward_length"),
         "num_hidden_layers": a("block_count"), "num_attention_heads": heads,
         "num_key_value_heads": a("attention.head_count_kv"), "head_dim": head_dim,
         "vocab_size": a("vocab_size", len(md["tokenizer.ggml.tokens"])),
         "max_position_embeddings": a("context_length"), "rms_norm_eps": a("attention.layer_norm_rms_epsilon"),
         "rope_theta": a("rope.freq_base"), "tie_word_embeddings": tied,
         "hidden_act": "gelu_pytorch_tanh" if arch == "gemma3" else "silu",
         "bos_token_id": md.get("tokenizer.ggml.bos_token_id"), "eos_token_id": md.get("tokenizer.ggml.eos_token_id"),
         "torch_dtype": "float32"}
    if arch == "gemma3":
        n, window = c["num_hidden_layers"], a("attention.sliding_window")
        c.update(rope_local_base_freq=a("rope.freq_base_swa", 10000.0), sliding_window=window,
                 query_pre_attn_scalar=head_dim,
                 layer_types=["full_attention" if i % 6 == 5 else "sliding_attention" for i in range(n)])
    if arch == "llama":
        c["attention_bias"] = False
    if arch == "phi3":  # Phi3Config: head_dim hidden / heads; the original context at the top level
        if head_dim == hidden // heads:
            del c["head_dim"]
        rope_dim = a("rope.dimension_count", head_dim)
        if rope_dim != head_dim:  # rotated dims int(partial_rotary_factor * head_dim)
            c["partial_rotary_factor"] = rope_dim / head_dim
        c["original_max_position_embeddings"] = a("rope.scaling.original_context_length")
        c["sliding_window"] = a("attention.sliding_window")  # llama.cpp and specdec ignore it
    return c


def _spm_merges(tokens: List[str], scores: List[float], types: List[int]) -> List[List[str]]:
    """transformers' SentencePieceExtractor: every split of a piece into two pieces, ordered by the
    piece's score (highest first)."""
    ids = {t: i for i, t in enumerate(tokens) if types[i] == 1}
    merges: List[List[str]] = []
    for piece, _ in sorted(ids.items(), key=lambda kv: (-scores[kv[1]], kv[1])):
        splits = [(piece[:k], piece[k:]) for k in range(1, len(piece))]
        splits = sorted((ids[a], ids[b], [a, b]) for a, b in splits if a in ids and b in ids)
        merges += [m for *_, m in splits]  # within a piece: by the ids of its parts
    return merges


def tokenizer_json(md: Dict[str, object]) -> dict:
    """tokenizer.json of a GGUF tokenizer: SentencePiece-style BPE (tokenizer.ggml.model llama)
    or byte-level BPE (gpt2 with pre qwen2, llama-bpe, smollm or gpt-2)."""
    tokens, types = list(md["tokenizer.ggml.tokens"]), list(md["tokenizer.ggml.token_type"])
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": types[i] == 3} for i, t in enumerate(tokens) if types[i] in (3, 4)]
    vocab = {t: i for i, t in enumerate(tokens)}
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
             "vocab": vocab}
    bos = md.get("tokenizer.ggml.bos_token_id")
    add_bos = bool(md.get("tokenizer.ggml.add_bos_token", md["tokenizer.ggml.model"] == "llama"))
    post = None
    if add_bos and bos is not None:
        post = {"type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": tokens[bos], "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {tokens[bos]: {"id": tokens[bos], "ids": [bos], "tokens": [tokens[bos]]}}}
    if md["tokenizer.ggml.model"] == "llama":
        unk = md.get("tokenizer.ggml.unknown_token_id", 0)
        model.update(unk_token=tokens[unk], fuse_unk=True, byte_fallback=True,
                     merges=_spm_merges(tokens, list(md["tokenizer.ggml.scores"]), types))
        prefix = bool(md.get("tokenizer.ggml.add_space_prefix", True))
        replace = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
        normalizer = ({"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"}, replace]}
                      if prefix else replace)
        decoders = [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                    {"type": "ByteFallback"}, {"type": "Fuse"}]
        if prefix:
            decoders.append({"type": "Strip", "content": " ", "start": 1, "stop": 0})
        return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
                "normalizer": normalizer, "pre_tokenizer": None, "post_processor": post,
                "decoder": {"type": "Sequence", "decoders": decoders}, "model": model}
    pre = md.get("tokenizer.ggml.pre", "gpt-2")
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    if pre in ("qwen2", "llama-bpe"):
        split = {"type": "Split", "pattern": {"Regex": QWEN2_SPLIT if pre == "qwen2" else LLAMA3_SPLIT},
                 "behavior": "Isolated", "invert": False}
        pre_tok = {"type": "Sequence", "pretokenizers": [split, dict(byte_level, use_regex=False)]}
        model["ignore_merges"] = pre == "llama-bpe"
    elif pre == "smollm":
        pre_tok = {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, byte_level]}
    elif pre in ("gpt-2", "default"):
        pre_tok = byte_level
    else:
        raise ValueError(f"tokenizer.ggml.pre = {pre!r}: expected qwen2, llama-bpe, smollm or gpt-2")
    model["merges"] = [m.split(" ", 1) for m in md["tokenizer.ggml.merges"]]
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
            "pre_tokenizer": pre_tok, "post_processor": post, "decoder": dict(byte_level), "model": model}


def _metadata(reader) -> Dict[str, object]:
    return {name: f.contents() for name, f in reader.fields.items() if not name.startswith("GGUF.")}


def write_hf_twin(src: Union[str, os.PathLike], dst: Union[str, os.PathLike], num_shards: int = 1,
                  eos_token_ids: Optional[List[int]] = None, chat_template: Optional[str] = None,
                  rope_scaling: Optional[dict] = None) -> str:
    """Writes the twin directory of the float GGUF ``src`` (llama, qwen2, qwen3, gemma3 or phi3) to
    ``dst``: ``num_shards`` > 1 writes model-0000i-of-0000n.safetensors files and
    model.safetensors.index.json. ``eos_token_ids`` goes to generation_config.json (a list) and
    ``chat_template`` to tokenizer_config.json. Returns dst."""
    from gguf import GGUFReader

    reader = GGUFReader(os.fspath(src))
    md = _metadata(reader)
    arch = md["general.architecture"]
    if arch not in _ARCHS:
        raise ValueError(f"general.architecture = {arch!r}: a twin is written for {', '.join(_ARCHS)}")
    os.makedirs(dst, exist_ok=True)
    tensors = _tensors(reader, arch, md)
    tied = not any(name == "lm_head.weight" for name, *_ in tensors)
    config = _config(arch, md, tied)
    scaling = _rope_scaling(arch, md, any(t.name == "rope_freqs.weight" for t in reader.tensors),
                            rope_scaling, reader)
    if scaling is not None:
        config["rope_scaling"] = scaling
    write_file_atomic(os.path.join(dst, "config.json"), json.dumps(config, indent=1), "dst")
    if num_shards <= 1:
        write_safetensors(os.path.join(dst, "model.safetensors"), tensors)
    else:
        weight_map = {}
        for k in range(num_shards):
            name = f"model-{k + 1:05d}-of-{num_shards:05d}.safetensors"
            part = tensors[k::num_shards]
            write_safetensors(os.path.join(dst, name), part)
            weight_map.update({t[0]: name for t in part})
        index = {"metadata": {"total_size": sum(len(t[3]) for t in tensors)}, "weight_map": weight_map}
        write_file_atomic(os.path.join(dst, "model.safetensors.index.json"), json.dumps(index), "dst")
    write_file_atomic(os.path.join(dst, "tokenizer.json"), json.dumps(tokenizer_json(md), ensure_ascii=False), "dst")
    tokens = md["tokenizer.ggml.tokens"]
    cfg = {"add_bos_token": bool(md.get("tokenizer.ggml.add_bos_token", True)), "add_eos_token": False,
           "bos_token": tokens[md["tokenizer.ggml.bos_token_id"]], "eos_token": tokens[md["tokenizer.ggml.eos_token_id"]],
           "tokenizer_class": "PreTrainedTokenizerFast"}
    template = chat_template if chat_template is not None else md.get("tokenizer.chat_template")
    if template is not None:
        cfg["chat_template"] = template
    write_file_atomic(os.path.join(dst, "tokenizer_config.json"), json.dumps(cfg, ensure_ascii=False), "dst")
    gen = {"bos_token_id": md.get("tokenizer.ggml.bos_token_id"),
           "eos_token_id": eos_token_ids if eos_token_ids is not None else md["tokenizer.ggml.eos_token_id"]}
    write_file_atomic(os.path.join(dst, "generation_config.json"), json.dumps(gen), "dst")
    return os.fspath(dst)
