#!/usr/bin/env python3
"""Writes the "dequantized twin" of a GGUF model: the same metadata and tokenizer, every tensor
dequantized (by gguf-py) to F32 (code: python/specdec/testing/twin.py).

llama.cpp's CPU backend quantizes activations to Q8 before multiplying them with quantized
weights; with F32 weights it does not. Comparing the NumPy reference with llama.cpp on the twin
therefore tests the forward pass itself (same weights bit for bit, plain f32 activations), while
the comparison on the original file also contains llama.cpp's activation rounding.

    .venv/bin/python bench/dequantized_twin.py SRC.gguf DST.gguf
"""

from __future__ import annotations

import sys
from pathlib import Path

from specdec.testing.twin import write_twin  # noqa: F401  (bench/reference_vs_llamacpp.py)


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    Path(sys.argv[2]).parent.mkdir(parents=True, exist_ok=True)
    write_twin(sys.argv[1], sys.argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main())
