"""The "dequantized twin" of a GGUF model: the same metadata and tokenizer, every tensor
dequantized (by gguf-py) to F32 (or F16).

Quantized engines (llama.cpp, specdec) round activations to int8 before multiplying them with
block-format weights; with float weights they do not. Comparing a reference with an engine on the
twin therefore tests the forward pass itself (the same weights, plain float activations), while
the comparison on the original file also contains the activation rounding."""

from __future__ import annotations

import os
from typing import Union

import numpy as np

_SKIP_KEYS = ("general.architecture", "general.file_type", "general.alignment")


def write_twin(src: Union[str, os.PathLike], dst: Union[str, os.PathLike], dtype: str = "F32") -> str:
    """Writes the twin of ``src`` to ``dst`` with every tensor in ``dtype`` ("F32" or "F16";
    F16 rounds the dequantized weights, and the twin is then its own model). Returns dst."""
    from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
    from gguf.quants import dequantize

    if dtype not in ("F32", "F16"):
        raise ValueError(f"dtype = {dtype!r}: expected 'F32' or 'F16'")
    np_type = np.float32 if dtype == "F32" else np.float16
    g_type = GGMLQuantizationType.F32 if dtype == "F32" else GGMLQuantizationType.F16
    src, dst = os.fspath(src), os.fspath(dst)
    reader = GGUFReader(src)
    writer = GGUFWriter(dst, reader.fields["general.architecture"].contents())
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name in _SKIP_KEYS:
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), vtype, sub_type=sub)
    writer.add_file_type(0 if dtype == "F32" else 1)
    shapes = []
    for t in reader.tensors:
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))  # NumPy order
        # 1-D tensors (norms, biases) stay F32, as converters write them
        tt, nt = (g_type, np_type) if len(shape) > 1 else (GGMLQuantizationType.F32, np.float32)
        shapes.append((shape, nt))
        writer.add_tensor_info(t.name, shape, np.dtype(nt), int(np.prod(shape)) * np.dtype(nt).itemsize,
                               raw_dtype=tt)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for t, (shape, nt) in zip(reader.tensors, shapes):
        data = dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32).reshape(shape)
        writer.write_tensor_data(data.astype(nt))
    writer.close()
    return dst
