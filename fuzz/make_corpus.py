#!/usr/bin/env python3
"""Writes the seed corpus of the GGUF and safetensors fuzzers (fuzz/corpus/{gguf,safetensors}/).

Every seed is a small *valid* file, so the fuzzers start from inputs that reach the deep end of
each reader (tensor placement, overlap checks, typed values) rather than the magic check.
Standard library only; the output is deterministic. Regenerate with

    python3 fuzz/make_corpus.py [--stories PATH_TO_stories260K.gguf]

Inputs that once crashed a reader are added by hand as `crash-<what>` files and are never
rewritten by this script.
"""

from __future__ import annotations

import argparse
import json
import struct
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_STORIES = HERE.parent.parent / "shared" / "models" / "stories260K.gguf"

# gguf_type ids
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
SCALAR_FORMATS = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f",
                  BOOL: "?", U64: "Q", I64: "q", F64: "d"}
# ggml type id -> (block size, bytes per block)
GGML = {"f32": (0, 1, 4), "f16": (1, 1, 2), "q4_0": (2, 32, 18), "q8_0": (8, 32, 34),
        "q4_K": (12, 256, 144), "q6_K": (14, 256, 210), "i8": (24, 1, 1), "i32": (26, 1, 4),
        "f64": (28, 1, 8), "bf16": (30, 1, 2), "iq4_nl": (20, 32, 18), "mxfp4": (39, 32, 17)}


def gguf_string(text: str | bytes) -> bytes:
    data = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(data)) + data


def gguf_value(kind: int, value) -> bytes:
    """Encodes a value without its type id; arrays are (element kind, [values])."""
    if kind == STRING:
        return gguf_string(value)
    if kind == ARRAY:
        elem_kind, items = value
        out = struct.pack("<IQ", elem_kind, len(items))
        return out + b"".join(gguf_value(elem_kind, item) for item in items)
    return struct.pack("<" + SCALAR_FORMATS[kind], value)


def gguf_file(version: int, kvs: list, tensors: list, alignment: int = 32) -> bytes:
    """kvs: (key, kind, value); tensors: (name, dims, ggml type name). Data bytes count up."""
    infos, offset, sizes = [], 0, []
    for name, dims, type_name in tensors:
        type_id, block, block_bytes = GGML[type_name]
        count = 1
        for dim in dims:
            count *= dim
        size = count // block * block_bytes
        infos.append(gguf_string(name) + struct.pack("<I", len(dims)) +
                     b"".join(struct.pack("<q", d) for d in dims) +
                     struct.pack("<IQ", type_id, offset))
        sizes.append((offset, size))
        offset += (size + alignment - 1) // alignment * alignment
    out = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    out += b"".join(gguf_string(k) + struct.pack("<I", kind) + gguf_value(kind, v)
                    for k, kind, v in kvs)
    out += b"".join(infos)
    if not tensors:
        return out
    out += bytes(-len(out) % alignment)
    data = bytearray(offset if sizes else 0)
    for begin, size in sizes:
        data[begin:begin + size] = bytes(i & 0xFF for i in range(size))
    end = sizes[-1][0] + sizes[-1][1]
    return out + bytes(data[:end])


def gguf_seeds() -> dict[str, bytes]:
    every_type = [
        ("u8", U8, 200), ("i8", I8, -100), ("u16", U16, 60000), ("i16", I16, -30000),
        ("u32", U32, 4000000000), ("i32", I32, -2000000000), ("f32", F32, 1.5),
        ("bool", BOOL, True), ("str", STRING, "hello"), ("u64", U64, 1 << 60),
        ("i64", I64, -(1 << 60)), ("f64", F64, 0.25),
        ("strs", ARRAY, (STRING, ["a", "", "ccc"])),
        ("nested", ARRAY, (ARRAY, [(I32, [1, 2]), (I32, [])])),
        ("empty", ARRAY, (F32, [])),
        ("general.alignment", U32, 64), ("general.architecture", STRING, "test"),
    ]
    tokenizer = [
        ("general.architecture", STRING, "llama"),
        ("tokenizer.ggml.model", STRING, "gpt2"),
        ("tokenizer.ggml.tokens", ARRAY, (STRING, ["<s>", "</s>", "a", "\u0120b", "\u00e9t\u00e9"])),
        ("tokenizer.ggml.scores", ARRAY, (F32, [0.0, 0.0, -1.0, -2.5, -3.0])),
        ("tokenizer.ggml.token_type", ARRAY, (I32, [3, 3, 1, 1, 6])),
        ("tokenizer.ggml.merges", ARRAY, (STRING, ["a b", "\u0120 b"])),
        ("tokenizer.ggml.bos_token_id", U32, 0),
        ("tokenizer.ggml.add_bos_token", BOOL, False),
        ("llama.context_length", U64, 4096),
        ("llama.rope.freq_base", F64, 10000.0),
    ]
    nested = [("deep", ARRAY, (ARRAY, [(ARRAY, [(U8, [1, 2, 3]), (STRING, ["x"])]),
                                        (ARRAY, [(BOOL, [True, False])])]))]
    quantized = [(f"t.{name}", [256, 2] if block > 1 else [3, 2, 2], name)
                 for name, (_, block, _) in GGML.items()]
    return {
        "every_type_v3.gguf": gguf_file(3, every_type, [("a.weight", [4, 2], "f32"),
                                                         ("b.weight", [32], "q8_0"),
                                                         ("c.weight", [3], "f16")], 64),
        "every_type_v2.gguf": gguf_file(2, every_type[:12], [("x", [2, 2, 2, 2], "f32")]),
        "tokenizer_no_tensors.gguf": gguf_file(3, tokenizer, []),
        "nested_arrays.gguf": gguf_file(3, nested, []),
        "empty.gguf": gguf_file(3, [], []),
        "quantized_types.gguf": gguf_file(3, [("general.alignment", U32, 8)], quantized, 8),
        "scalar_tensor.gguf": gguf_file(3, [], [("s", [], "f32"), ("v", [1], "i32")]),
    }


def stories_seeds(path: Path) -> dict[str, bytes]:
    """Cuts of the real stories260K model: its metadata alone, and all its tensor infos with
    every dimension set to 1 (so the data section is tiny)."""
    data = path.read_bytes()
    _, _, num_tensors, num_kvs = struct.unpack_from("<4sIQQ", data, 0)
    pos = 24

    def skip_value(kind: int) -> None:
        nonlocal pos
        if kind == STRING:
            pos += 8 + struct.unpack_from("<Q", data, pos)[0]
        elif kind == ARRAY:
            elem_kind, count = struct.unpack_from("<IQ", data, pos)
            pos += 12
            for _ in range(count):
                skip_value(elem_kind)
        else:
            pos += struct.calcsize("<" + SCALAR_FORMATS[kind])

    for _ in range(num_kvs):
        skip_value(STRING)
        kind = struct.unpack_from("<I", data, pos)[0]
        pos += 4
        skip_value(kind)
    metadata = struct.pack("<QQ", 0, num_kvs) + data[24:pos]
    tiny = bytearray(data[:pos])
    for i in range(num_tensors):
        name_len = struct.unpack_from("<Q", data, pos)[0]
        tiny += data[pos:pos + 8 + name_len]
        pos += 8 + name_len
        num_dims = struct.unpack_from("<I", data, pos)[0]
        tiny += struct.pack("<I", num_dims) + struct.pack("<q", 1) * num_dims
        pos += 4 + 8 * num_dims
        type_id = struct.unpack_from("<I", data, pos)[0]
        assert type_id == 0, "stories260K is all f32"
        tiny += struct.pack("<IQ", type_id, 32 * i)
        pos += 12
    tiny += bytes(-len(tiny) % 32) + bytes(32 * (num_tensors - 1) + 4)
    return {"stories260K_metadata.gguf": data[:8] + metadata,
            "stories260K_tiny_tensors.gguf": bytes(tiny)}


def safetensors_file(tensors: dict, metadata: dict | None = None, pad_to: int = 8,
                     data_bytes: int | None = None) -> bytes:
    """tensors: name -> (dtype, shape, [begin, end]); data bytes count up."""
    header = {name: {"dtype": d, "shape": s, "data_offsets": o}
              for name, (d, s, o) in tensors.items()}
    if metadata is not None:
        header = {"__metadata__": metadata, **header}
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * (-len(text) % pad_to)
    end = max([o[1] for _, _, o in tensors.values()], default=0)
    size = end if data_bytes is None else data_bytes
    return struct.pack("<Q", len(text)) + text + bytes(i & 0xFF for i in range(size))


def safetensors_seeds() -> dict[str, bytes]:
    sizes = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "I16": 2,
             "F16": 2, "BF16": 2, "U32": 4, "I32": 4, "F32": 4, "U64": 8, "I64": 8, "F64": 8}
    every_dtype, offset = {}, 0
    for name, size in sizes.items():
        every_dtype[f"t.{name.lower()}"] = (name, [2, 3], [offset, offset + 6 * size])
        offset += 6 * size
    engine = {
        "model.embed_tokens.weight": ("BF16", [4, 8], [0, 64]),
        "model.layers.0.self_attn.q_proj.weight": ("F16", [8, 8], [64, 192]),
        "model.norm.weight": ("F32", [8], [192, 224]),
        "lm_head.weight": ("I8", [4, 8], [224, 256]),
    }
    edge = {
        "scalar": ("F32", [], [0, 4]),
        "empty": ("F16", [0, 7], [4, 4]),
        "after_gap": ("F64", [1, 1, 1, 1, 1, 1, 1, 2], [16, 32]),
        "caf\u00e9 \u2603": ("U8", [3], [32, 35]),
    }
    return {
        "every_dtype.safetensors": safetensors_file(every_dtype),
        "engine_dtypes.safetensors": safetensors_file(
            engine, {"format": "pt", "note": "seed \u00e9"}),
        "edge_cases.safetensors": safetensors_file(edge, {}, pad_to=1, data_bytes=40),
        "empty_header.safetensors": safetensors_file({}),
        "metadata_only.safetensors": safetensors_file({}, {"format": "pt"}),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stories", type=Path, default=DEFAULT_STORIES)
    args = parser.parse_args()
    seeds = {"gguf": gguf_seeds(), "safetensors": safetensors_seeds()}
    if args.stories.exists():
        seeds["gguf"].update(stories_seeds(args.stories))
    else:
        print(f"note: {args.stories} not found; skipping the stories260K seeds")
    for kind, files in seeds.items():
        out_dir = HERE / "corpus" / kind
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, data in files.items():
            (out_dir / name).write_bytes(data)
            print(f"{kind}/{name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
