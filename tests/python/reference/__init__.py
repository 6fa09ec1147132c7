"""Independent references the tests compare specdec against (NumPy and the ``gguf`` package only)."""
