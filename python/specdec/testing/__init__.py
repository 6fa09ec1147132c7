"""Test helpers that ship with specdec: random GGUF models of every architecture and weight
format (``random_model``), the quantizers they use (``quantize``) and dequantized twins of real
model files (``twin``), and the Hugging Face directory of a float GGUF (``hf_twin``). Needs the ``gguf`` package
(``pip install specdec[test]``); ``import specdec`` does not import this package."""

from specdec.testing.dflash import write_random_dflash
from specdec.testing.hf_twin import write_hf_twin
from specdec.testing.quantize import WEIGHT_FORMATS
from specdec.testing.random_model import ARCHITECTURES, write_random_model
from specdec.testing.twin import write_twin

__all__ = ["ARCHITECTURES", "WEIGHT_FORMATS", "write_hf_twin", "write_random_dflash", "write_random_model",
           "write_twin"]
