import json
import struct

import pytest

import specdec

from paths import STORIES


def test_reads_the_real_gguf():
    f = specdec.read_gguf(STORIES)
    assert f["version"] in (2, 3)
    md = f["metadata"]
    assert md["general.architecture"] == "llama"
    assert md["llama.block_count"] == 5 and md["llama.embedding_length"] == 64
    assert len(md["tokenizer.ggml.tokens"]) == 512
    assert len(f["tensors"]) == 48
    for t in f["tensors"]:
        assert f["data_offset"] + t["offset"] + t["size_bytes"] <= f["file_size"]


def test_truncated_gguf_is_a_format_error(tmp_path):
    data = open(STORIES, "rb").read()
    for cut in (3, 100, 5000, len(data) - 1):
        path = tmp_path / f"cut{cut}.gguf"
        path.write_bytes(data[:cut])
        with pytest.raises(specdec.FormatError):
            specdec.read_gguf(str(path))
    assert issubclass(specdec.FormatError, ValueError)
    with pytest.raises(ValueError, match="path"):
        specdec.read_gguf(str(tmp_path / "missing.gguf"))


def write_safetensors(path, header, data=b""):
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data)


def test_safetensors_reader(tmp_path):
    good = tmp_path / "good.safetensors"
    write_safetensors(good, {"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
                             "__metadata__": {"format": "pt"}}, bytes(16))
    f = specdec.read_safetensors(str(good))
    assert f["tensors"][0]["name"] == "w" and f["tensors"][0]["shape"] == [2, 2]
    assert f["metadata"] == {"format": "pt"}
    bad = tmp_path / "bad.safetensors"
    write_safetensors(bad, {"w": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 16]}}, bytes(16))
    with pytest.raises(specdec.FormatError, match='tensor "w".*expected 64 bytes'):
        specdec.read_safetensors(str(bad))


def test_non_utf8_keys_and_strings_are_format_errors(tmp_path):
    """GGUF strings are UTF-8 by the format: a key or string that is not is a FormatError naming
    the key, the byte and the file, never a UnicodeDecodeError."""
    def s(b: bytes) -> bytes:
        return struct.pack("<Q", len(b)) + b
    path = tmp_path / "bad.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + s(b"bad\xffkey")
                     + struct.pack("<I", 8) + s(b"v"))
    with pytest.raises(specdec.FormatError, match=r"metadata #0: key at byte 24 is not valid "
                       r"UTF-8 \(byte 0xff at byte 35\).*bad.gguf"):
        specdec.read_gguf(str(path))
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + s(b"good.key")
                     + struct.pack("<I", 8) + s(b"v\xfe"))
    with pytest.raises(specdec.FormatError, match="metadata key 'good.key': string at byte 44 is "
                       "not valid UTF-8"):
        specdec.read_gguf(str(path))
