#!/usr/bin/env python3
"""Writes the "dequantized twin" of a GGUF model: the same metadata and tokenizer, every tensor
dequantized (by gguf-py) to F32.

llama.cpp's CPU backend quantizes activations to Q8 before multiplying them with quantized
weights; with F32 weights it does not. Comparing the NumPy reference with llama.cpp on the twin
therefore tests the forward pass itself (same weights bit for bit, plain f32 activations), while
the comparison on the original file also contains llama.cpp's activation rounding.

    .venv/bin/python bench/dequantized_twin.py SRC.gguf DST.gguf
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
from gguf.quants import dequantize

_SKIP_KEYS = ("general.architecture", "general.file_type", "general.alignment")


def write_twin(src: str, dst: str) -> str:
    reader = GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = GGUFWriter(dst, arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name in _SKIP_KEYS:
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), vtype, sub_type=sub)
    writer.add_file_type(0)  # all F32
    shapes = []
    for t in reader.tensors:
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))  # NumPy order
        shapes.append(shape)
        writer.add_tensor_info(t.name, shape, np.dtype(np.float32),
                               int(np.prod(shape)) * 4, raw_dtype=GGMLQuantizationType.F32)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t, shape in zip(reader.tensors, shapes):
        data = dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32).reshape(shape)
        writer.write_tensor_data(data)
    writer.close()
    return dst


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    Path(sys.argv[2]).parent.mkdir(parents=True, exist_ok=True)
    write_twin(sys.argv[1], sys.argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
