"""Tokenizers read from GGUF metadata (a thin layer over ``specdec._core.Tokenizer``); a Hugging
Face directory's tokenizer.json, tokenizer_config.json and generation_config.json are read into
the same metadata (cpp/model/hf_tokenizer.cpp).

SentencePiece-style BPE (``tokenizer.ggml.model = llama``: Llama, Gemma, Phi-3) and byte-level
BPE (``gpt2``: SmolLM2, Qwen2.5, GPT-2, StarCoder, DeepSeek-Coder), tokenizing exactly as
llama.cpp does. See docs/tokenizer.md.
"""

from __future__ import annotations

import os
from typing import Iterable, List, Mapping, Optional, Sequence, Union

from specdec import _core
from specdec._checks import check_bool, check_messages, check_text

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

    def __init__(self, tokenizer: "Tokenizer", special: bool = False,
                 continuation: bool = False) -> None:
        self._core = _core.StreamDecoder(tokenizer._core, special, continuation)

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
        """Reads the tokenizer of a GGUF file, of a Hugging Face directory (tokenizer.json; the
        chat template, BOS/EOS and add_bos_token from tokenizer_config.json; every eos_token_id of
        generation_config.json ends generation), or of a catalog model by name (fetched if needed).

        Raises FormatError for malformed tokenizer metadata and UnsupportedError for tokenizer
        models or pre-tokenizers that are not implemented."""
        path = _resolve(path_or_name)
        return cls(_core.Tokenizer.from_file(path), path)

    def encode(self, text: Union[str, bytes], add_special: bool = True,
               parse_special: bool = False) -> List[int]:
        """Token ids of ``text``. ``add_special`` adds BOS/EOS as the file says;
        ``parse_special`` turns control-token text such as ``<|im_start|>`` into its id.
        ``bytes`` are tokenized as is (invalid UTF-8 allowed); a str must be valid Unicode."""
        if not isinstance(text, (bytes, bytearray)):
            check_text("text", text, "a str or bytes")
        check_bool("add_special", add_special)
        check_bool("parse_special", parse_special)
        return self._core.encode(bytes(text) if isinstance(text, bytearray) else text,
                                 add_special, parse_special)

    def decode(self, ids: Iterable[int], special: bool = False, continuation: bool = False) -> str:
        """Text of ``ids``; control tokens are rendered only when ``special``. Invalid UTF-8 in
        the result is replaced by U+FFFD (``decode_bytes`` gives the raw bytes).
        ``continuation``: the ids continue a text (tokens generated after a prompt), so the
        leading space that SPM vocabularies strip at the start of a text is kept."""
        return self._core.decode(list(ids), special, continuation)

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

    def stream_decoder(self, special: bool = False, continuation: bool = False) -> StreamDecoder:
        return StreamDecoder(self, special, continuation)

    def apply_chat_template(self, messages: Sequence[Mapping[str, str]],
                            add_generation_prompt: bool = True,
                            tokenize: bool = False) -> Union[str, List[int]]:
        """Renders ``[{"role": ..., "content": ...}, ...]`` with the file's chat template
        (ChatML or Gemma); UnsupportedError for other templates or none.

        ``tokenize=True`` returns the token ids (BOS as the file says): the template's markers
        are control tokens and the messages' text is never parsed for control tokens, so a
        message holding ``<|im_end|><|im_start|>system`` cannot open a turn. The rendered string
        (``tokenize=False``) loses that distinction: encoding it with ``parse_special=True``
        would turn such text into control tokens."""
        pairs = check_messages(messages)
        check_bool("add_generation_prompt", add_generation_prompt)
        check_bool("tokenize", tokenize)
        if tokenize:
            return list(self._core.encode_chat(pairs, add_generation_prompt, True))
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
