"""Tokenizers read from GGUF metadata (a thin layer over ``specdec._core.Tokenizer``); a Hugging
Face directory's tokenizer.json, tokenizer_config.json and generation_config.json are read into
the same metadata (cpp/model/hf_tokenizer.cpp).

SentencePiece-style BPE (``tokenizer.ggml.model = llama``: Llama, Gemma, Phi-3) and byte-level
BPE (``gpt2``: SmolLM2, Qwen2.5, GPT-2, StarCoder, DeepSeek-Coder), tokenizing exactly as
llama.cpp does. See docs/tokenizer.md.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from specdec import _core
from specdec._checks import check_bool, check_text, error

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


def _plain_list(field: str, value: Any) -> Optional[List[Any]]:
    from specdec.chat_template import plain_data

    if value is None:
        return None
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple)):
        raise error(field, value, "a list of dicts (or None)")
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise error(f"{field}[{i}]", item, "a dict")
    return plain_data(list(value), field)


def _plain_mapping(field: str, value: Any) -> Dict[str, Any]:
    from specdec.chat_template import RESERVED_VARIABLES, plain_data

    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise error(field, value, "a dict of template variables (or None)")
    for key in value:
        if key in RESERVED_VARIABLES:
            raise error(f"{field} key", key, "a template variable of the caller's; "
                        f"{', '.join(RESERVED_VARIABLES)} are set by specdec (tools and "
                        "documents have their own arguments)")
    return plain_data(dict(value), field)


class StreamDecoder:
    """Detokenizes one id at a time: ``push`` returns the text completed so far (holding back an
    unfinished UTF-8 character), ``flush`` what is left. The pieces joined equal ``decode``."""

    def __init__(self, tokenizer: "Tokenizer", special: bool = False,
                 continuation: bool = False) -> None:
        self._core = _core.StreamDecoder(tokenizer._core, special, continuation)

    def push(self, token_id: int) -> str:
        return self._core.push(token_id)

    def push_many(self, token_ids: List[int]) -> str:
        """push for each id, in one call: the text they complete."""
        return self._core.push_many(token_ids)

    def flush(self) -> str:
        return self._core.flush()

    def reset(self) -> None:
        self._core.reset()


class Tokenizer:
    """The tokenizer of a GGUF model file."""

    def __init__(self, core: "_core.Tokenizer", path: str = "") -> None:
        self._core = core
        self.path = path
        self._special_texts: Optional[Dict[str, str]] = None

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

    def encode_continuation(self, text: Union[str, bytes]) -> List[int]:
        """Token ids of ``text`` continuing earlier text: no BOS / EOS, control-token text stays
        text, and no SPM space prefix at its start (``encode`` puts one at a text's start)."""
        if not isinstance(text, (bytes, bytearray)):
            check_text("text", text, "a str or bytes")
        return self._core.encode_continuation(bytes(text) if isinstance(text, bytearray) else text)

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

    @property
    def eog_token_ids(self) -> List[int]:
        """The ids that end generation (EOS, EOT, ...), sorted."""
        return list(self._core.eog_token_ids)

    def stream_decoder(self, special: bool = False, continuation: bool = False) -> StreamDecoder:
        return StreamDecoder(self, special, continuation)

    def apply_chat_template(self, messages: Sequence[Mapping[str, Any]],
                            add_generation_prompt: bool = True, tokenize: bool = False, *,
                            tools: Optional[Sequence[Mapping[str, Any]]] = None,
                            documents: Optional[Sequence[Mapping[str, Any]]] = None,
                            chat_template: Optional[str] = None,
                            continue_final_message: bool = False,
                            chat_template_kwargs: Optional[Mapping[str, Any]] = None,
                            ) -> Union[str, List[int]]:
        """Renders a conversation with the model's chat template, run as written in jinja2's
        sandbox, in a worker process under a time and memory limit (see
        ``specdec.chat_template``).

        ``messages``: ``[{"role": ..., "content": ...}, ...]``; other keys (``tool_calls``,
        ``tool_call_id``, ``reasoning_content``, ...) reach the template as given. ``tools`` and
        ``documents`` are passed to the template; with ``tools`` the model's ``tool_use``
        template is used when it has one. ``chat_template``: the name of one of the model's
        templates (``chat_template_names``) or Jinja source. ``continue_final_message``: end the
        text right after the last message's content (the reply continues it).
        ``chat_template_kwargs``: extra template variables (``enable_thinking``, ...).

        The text is as the template wrote it, a leading BOS included (as in transformers):
        encode it with ``add_special=False`` when it starts with one. ``tokenize=True`` returns
        the ids, one BOS (the template's, or the one the tokenizer adds); only the template's
        own text can become control tokens: control-token text inside the caller's strings
        stays text, so a message holding ``<|im_end|><|im_start|>system`` cannot open a turn.
        (The string form loses that: encoding it with ``parse_special=True`` would not.)

        ChatTemplateError (a ValueError) when the model has no template, the template does not
        compile, raises (e.g. for roles it does not accept) or runs past a limit."""
        text, markup = self._render_chat(messages, add_generation_prompt, tokenize, tools=tools,
                                         documents=documents, chat_template=chat_template,
                                         continue_final_message=continue_final_message,
                                         chat_template_kwargs=chat_template_kwargs)
        return self._chat_ids(text, markup) if tokenize else text

    def chat_prompt(self, messages: Sequence[Mapping[str, Any]],
                    add_generation_prompt: bool = True, **options: Any) -> Tuple[str, List[int]]:
        """``(text, ids)``: ``apply_chat_template`` with ``tokenize=False`` and with
        ``tokenize=True`` (same keyword options), from one render."""
        text, markup = self._render_chat(messages, add_generation_prompt, True, **options)
        return text, self._chat_ids(text, markup)

    def _render_chat(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool,
                     protect: bool, *, tools: Optional[Sequence[Mapping[str, Any]]] = None,
                     documents: Optional[Sequence[Mapping[str, Any]]] = None,
                     chat_template: Optional[str] = None, continue_final_message: bool = False,
                     chat_template_kwargs: Optional[Mapping[str, Any]] = None,
                     ) -> Tuple[str, List[Tuple[int, int]]]:
        from specdec import _chat_worker
        from specdec.chat_template import check_conversation

        check_bool("add_generation_prompt", add_generation_prompt)
        check_bool("tokenize", protect)
        check_bool("continue_final_message", continue_final_message)
        if continue_final_message and add_generation_prompt:
            raise ValueError("continue_final_message = True needs add_generation_prompt = False")
        msgs = check_conversation(messages)
        name, source = self._template_source(chat_template, tools is not None)
        extra = _plain_mapping("chat_template_kwargs", chat_template_kwargs)
        tools_, docs = _plain_list("tools", tools), _plain_list("documents", documents)
        control = self._control_texts((msgs, tools_, docs, extra)) if protect else None
        return _chat_worker.render(
            source, msgs, name=name, add_generation_prompt=add_generation_prompt,
            continue_final_message=continue_final_message, tools=tools_, documents=docs,
            special_tokens=self._template_tokens(), control=control, extra=extra)

    def _control_texts(self, data: Any) -> List[Tuple[str, List[Tuple[int, int]]]]:
        """(string, its control-token spans) for each string in `data` (keys too) that holds
        control-token text: what the worker's render swaps out (chat_template._Render)."""
        seen: Dict[str, None] = {}
        stack = [data]
        while stack:
            value = stack.pop()
            if isinstance(value, str):
                seen[value] = None
            elif isinstance(value, dict):
                stack.extend(value.keys())
                stack.extend(value.values())
            elif isinstance(value, (list, tuple)):
                stack.extend(value)
        out = []
        for text in seen:
            spans = self._core.control_text_spans(text)
            if spans:
                out.append((text, [tuple(s) for s in spans]))
        return out

    def _chat_ids(self, text: str, markup: List[Tuple[int, int]]) -> List[int]:
        """The ids of a rendered chat: a BOS the template wrote first is the one BOS (not a
        second one before the tokenizer's)."""
        bos = self._bos_text() if self.add_bos else ""
        n = len(bos.encode())
        if bos and text.startswith(bos) and markup and markup[0][0] == 0 and markup[0][1] >= n:
            text = text[len(bos):]
            markup = [(max(b - n, 0), e - n) for b, e in markup if e > n]
        return list(self._core.encode_with_markup(text, markup, True))

    @property
    def chat_template_names(self) -> List[str]:
        """Names of the model's chat templates: "default" (tokenizer.chat_template) when it has
        one, then its named ones (tokenizer.chat_template.<name>)."""
        return ((["default"] if self.chat_template else [])
                + sorted(self._core.named_chat_templates))

    def _template_source(self, chat_template: Optional[str], with_tools: bool):
        from specdec.chat_template import ChatTemplateError

        named = dict(self._core.named_chat_templates)
        if self.chat_template:
            named.setdefault("default", self.chat_template)
        if chat_template is None:
            name = "tool_use" if with_tools and "tool_use" in named else "default"
            if name not in named:
                raise ChatTemplateError(
                    f"{self.path or 'this model'} has no chat template "
                    "(tokenizer.chat_template); pass chat_template= Jinja source")
            return name, named[name]
        check_text("chat_template", chat_template, "a template name or Jinja source",
                   empty_ok=False)
        if chat_template in named:
            return chat_template, named[chat_template]
        if "{{" in chat_template or "{%" in chat_template:
            return "given", chat_template
        raise ChatTemplateError(
            f"chat_template = {chat_template!r}: neither Jinja source nor one of this model's "
            f"templates ({', '.join(sorted(named)) or 'it has none'})")

    def _bos_text(self) -> str:
        bos = self.bos_token_id
        return "" if bos is None else self._core.token_text(bos)

    def _template_tokens(self) -> Dict[str, str]:
        if self._special_texts is None:
            out = {"bos_token": self._bos_text(), "eos_token": ""}
            if self.eos_token_id is not None:
                out["eos_token"] = self._core.token_text(self.eos_token_id)
            self._special_texts = out
        return dict(self._special_texts)

    @property
    def vocab_size(self) -> int:
        return self._core.vocab_size

    @property
    def kind(self) -> str:
        """"spm" (tokenizer.ggml.model = llama), "bpe" (gpt2, gemma4), "wpm" (bert) or "ugm" (t5)."""
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
