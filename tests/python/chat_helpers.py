"""GGUF files holding only a tokenizer and chat templates (for chat-template tests)."""

from __future__ import annotations

from typing import Mapping, Optional


def with_chat_template(src, dst, template: Optional[str],
                       named: Optional[Mapping[str, str]] = None) -> str:
    """A GGUF holding the tokenizer of `src` with `template` as tokenizer.chat_template (none
    when None) and `named` as tokenizer.chat_template.<name>."""
    from gguf import GGUFReader, GGUFValueType, GGUFWriter
    reader = GGUFReader(src)
    writer = GGUFWriter(str(dst), reader.fields["general.architecture"].contents())
    for name, field in reader.fields.items():
        if not name.startswith("tokenizer.") or name.startswith("tokenizer.chat_template"):
            continue
        vtype = field.types[0]
        sub = field.types[-1] if vtype == GGUFValueType.ARRAY else None
        writer.add_key_value(name, field.contents(), vtype, sub_type=sub)
    if template is not None:
        writer.add_chat_template(template)
    for name, source in (named or {}).items():
        writer.add_string(f"tokenizer.chat_template.{name}", source)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    return str(dst)
