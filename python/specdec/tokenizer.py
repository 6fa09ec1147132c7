"""Tokenizers read from GGUF metadata (a thin layer over ``specdec._core.Tokenizer``).

SentencePiece-style BPE (``tokenizer.ggml.model = llama``: Llama, Gemma, Phi-3) and byte-level
BPE (``gpt2``: SmolLM2, Qwen2.5, GPT-2, StarCoder, DeepSeek-Coder), tokenizing exactly as
llama.cpp does. See docs/tokenizer.md.
"""

from __future__ import annotations

import os
from typing import Iterable, List, Mapping, Optional, Sequence, Union

from specdec import _core

__all__ = ["Tokenizer", "StreamDecoder"]

PathOrName = Union[str, "os.PathLike[str]"]


def _resolve(path_or_name: PathOrName) -> str:
    path = os.fspath(path_or_name)
    if os.path.exists(path):
        return path
    try:
        from specdec.hub import resolve_model
    except ImportError:  # model catalog not available: only paths
        return path
    return resolve_model(path)


class StreamDecoder:
    """Detokenizes one id at a time: ``push`` returns the text completed so far (holding back an
    unfinished UTF-8 character), ``flush`` what is left. The pieces joined equal ``decode``."""

    def __init__(self, tokenizer: "Tokenizer", special: bool = False) -> None:
        self._core = _core.StreamDecoder(tokenizer._core, special)

    def push(self, token_id: int) -> str:
        return self._core.push(token_id)

    def flush(self) -> str:
        return self._core.flush()

    def reset(self) -> None:
        self._core.reset()


class Tokenizer:
    """The tokenizer of a GGUF model file."""

    def __init__(self, core: "_core.Tokenizer", path: str = "") -> None:
        self._core = core
        self.path = path

    @classmethod
    def from_file(cls, path_or_name: PathOrName) -> "Tokenizer":
        """Reads the tokenizer of a GGUF file, or of a catalog model by name (fetched if needed).

        Raises FormatError for malformed tokenizer metadata and UnsupportedError for tokenizer
        models or pre-tokenizers that are not implemented."""
        path = _resolve(path_or_name)
        return cls(_core.Tokenizer.from_file(path), path)

    def encode(self, text: Union[str, bytes], add_special: bool = True,
               parse_special: bool = False) -> List[int]:
        """Token ids of ``text``. ``add_special`` adds BOS/EOS as the file says;
        ``parse_special`` turns control-token text such as ``<|im_start|>`` into its id.
        ``bytes`` are tokenized as is (invalid UTF-8 allowed)."""
        return self._core.encode(text, add_special, parse_special)

    def decode(self, ids: Iterable[int], special: bool = False) -> str:
        """Text of ``ids``; control tokens are rendered only when ``special``. Invalid UTF-8 in
        the result is replaced by U+FFFD (``decode_bytes`` gives the raw bytes)."""
        return self._core.decode(list(ids), special)

    def decode_bytes(self, ids: Iterable[int], special: bool = False) -> bytes:
        return self._core.decode_bytes(list(ids), special)

    def token_to_piece(self, token_id: int, special: bool = True) -> bytes:
        """The bytes of one token (possibly part of a UTF-8 character)."""
        return self._core.token_to_piece(token_id, special)

    def token_text(self, token_id: int) -> str:
        return self._core.token_text(token_id)

    def token_type(self, token_id: int) -> str:
        """"normal", "control", "user_defined", "byte", "unknown", "unused" or "undefined"."""
        return self._core.token_type(token_id)

    def token_id(self, text: str) -> Optional[int]:
        """The id of the token whose text is exactly ``text``, or None."""
        return self._core.token_id(text)

    def is_eog(self, token_id: int) -> bool:
        return self._core.is_eog(token_id)

    def stream_decoder(self, special: bool = False) -> StreamDecoder:
        return StreamDecoder(self, special)

    def apply_chat_template(self, messages: Sequence[Mapping[str, str]],
                            add_generation_prompt: bool = True) -> str:
        """Renders ``[{"role": ..., "content": ...}, ...]`` with the file's chat template
        (ChatML or Gemma); UnsupportedError for other templates or none. Encode the result with
        ``parse_special=True``."""
        pairs = []
        for i, m in enumerate(messages):
            try:
                pairs.append((str(m["role"]), str(m["content"])))
            except (KeyError, TypeError):
                raise ValueError(f"messages[{i}] = {m!r}: expected a dict with 'role' and "
                                 "'content'") from None
        return self._core.apply_chat_template(pairs, add_generation_prompt)

    @property
    def vocab_size(self) -> int:
        return self._core.vocab_size

    @property
    def kind(self) -> str:
        """"spm" (tokenizer.ggml.model = llama) or "bpe" (gpt2)."""
        return self._core.kind

    @property
    def pre(self) -> str:
        """The BPE pre-tokenizer name (tokenizer.ggml.pre; "default" when absent)."""
        return self._core.pre

    @property
    def bos_token_id(self) -> Optional[int]:
        return self._core.bos_token_id

    @property
    def eos_token_id(self) -> Optional[int]:
        return self._core.eos_token_id

    @property
    def eos_token_ids(self) -> List[int]:
        """Every end-of-generation id (EOS, EOT, EOM, <|im_end|>, <end_of_turn>, ...), sorted."""
        return list(self._core.eog_token_ids)

    @property
    def add_bos(self) -> bool:
        return self._core.add_bos

    @property
    def add_eos(self) -> bool:
        return self._core.add_eos

    @property
    def chat_template(self) -> Optional[str]:
        return self._core.chat_template

    def __repr__(self) -> str:
        return (f"Tokenizer(kind={self.kind!r}, pre={self.pre!r}, vocab_size={self.vocab_size}, "
                f"path={self.path!r})")
