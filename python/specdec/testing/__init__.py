"""Test helpers that ship with specdec: random GGUF models of every architecture and weight
format (``random_model``) and the quantizers they use (``quantize``). Needs the ``gguf`` package
(``pip install specdec[test]``); ``import specdec`` does not import this package."""

from specdec.testing.quantize import WEIGHT_FORMATS
from specdec.testing.random_model import ARCHITECTURES, write_random_model

__all__ = ["ARCHITECTURES", "WEIGHT_FORMATS", "write_random_model"]
