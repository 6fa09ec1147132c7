"""A drafter's reduced vocabulary, in the style of FR-Spec: the drafter computes logits only for
the most frequent token ids, so each draft step reads a fraction of its lm_head (on the
Qwen2.5-Coder 0.5B the lm_head is a third of the weights a step reads).

Lossless: a token outside the reduced vocabulary is never drafted, but the target still verifies
and generates every token from its whole vocabulary; when sampling, the draft distribution is zero
outside it, which rejection sampling handles exactly. What it costs is acceptance, measured by
``specdec bench --draft-vocab-size``.

The ranking: token counts over a corpus written by ``specdec draft-vocab`` (``draft_vocab_file``),
else the lowest ids first (byte-level BPE vocabularies are numbered in merge order, which follows
frequency in the tokenizer's own training corpus). The end-of-generation ids are always kept.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence

import numpy as np

from specdec import _json
from specdec._files import write_file_atomic

FORMAT = "specdec-draft-vocab/1"
TEXT_SUFFIXES = (".py", ".md", ".txt", ".rst", ".c", ".h", ".cpp", ".hpp", ".cc", ".js", ".ts",
                 ".java", ".go", ".rs", ".sh", ".json", ".toml", ".yaml", ".yml", ".html", ".css")


def _error(field: str, value: object, allowed: str) -> ValueError:
    return ValueError(f"{field} = {value!r}: {allowed}")


def corpus_files(paths: Sequence[str], suffixes: Sequence[str] = TEXT_SUFFIXES) -> List[Path]:
    """Files named, and the text files (by suffix) under folders named, sorted per folder."""
    out: List[Path] = []
    for p in paths:
        path = Path(p)
        if path.is_file():
            out.append(path)
        elif path.is_dir():
            for root, dirs, files in os.walk(path):
                dirs.sort()
                out.extend(Path(root) / f for f in sorted(files) if f.endswith(tuple(suffixes)))
        else:
            raise _error("path", p, "an existing file or folder")
    return out


def count_tokens(tokenizer, files: Iterable[Path], vocab_size: int, max_chars: int = 0,
                 progress: Optional[Callable[[int], None]] = None) -> Dict[str, object]:
    """Token counts [vocab_size] over the files (read as UTF-8, undecodable bytes replaced), up to
    max_chars characters of text (0: all); progress(bytes of the file) after each file."""
    files = list(files)
    counts = np.zeros(vocab_size, dtype=np.int64)
    used = 0
    read = 0
    for f in files:
        if max_chars and read >= max_chars:
            break
        try:
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError as e:
            raise _error("path", str(f), f"a readable file ({e.strerror})") from None
        if max_chars:
            text = text[:max(0, max_chars - read)]
        read += len(text)
        if text:
            ids = np.asarray(tokenizer.encode(text, add_special=False), dtype=np.int64)
            ids = ids[(ids >= 0) & (ids < vocab_size)]
            counts += np.bincount(ids, minlength=vocab_size)
            used += 1
        if progress is not None:
            progress(f.stat().st_size)
    return {"counts": counts, "num_files": used, "num_chars": read, "num_tokens": int(counts.sum())}


def write_draft_vocab(out: str, model: str, tokenizer, vocab_size: int, stats: Dict[str, object],
                      sources: Sequence[str], field: str = "--out") -> Dict[str, object]:
    """Writes the ranking to ``out`` (``specdec._files.write_file_atomic``: a regular file or a
    new name in an existing folder, never through a symlink); ValueError naming ``field``."""
    counts: np.ndarray = stats["counts"]  # type: ignore[assignment]
    order = np.lexsort((np.arange(vocab_size), -counts))  # count descending, then id
    seen = [int(i) for i in order if counts[i] > 0]
    doc = {
        "format": FORMAT, "model": model, "vocab_size": vocab_size, "sources": list(sources),
        "num_files": stats["num_files"], "num_chars": stats["num_chars"], "num_tokens": stats["num_tokens"],
        "token_counts": [[i, int(counts[i])] for i in seen],
    }
    write_file_atomic(out, json.dumps(doc, separators=(",", ":")) + "\n", field)
    return doc


def read_ranking(path: str, vocab_size: int, field: str = "speculative_config.draft_vocab_file") -> List[int]:
    """Token ids by count, most frequent first, from a file written by ``specdec draft-vocab``."""
    try:
        doc = _json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise _error(field, path, "an existing file written by `specdec draft-vocab`") from None
    except (OSError, ValueError) as e:  # ValueError: not UTF-8, not JSON or nested too deeply
        raise _error(field, path, f"a JSON file written by `specdec draft-vocab` ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise _error(field, path, f"a file of format {FORMAT!r} (written by `specdec draft-vocab`)")
    if doc.get("vocab_size") != vocab_size:
        raise _error(field, path, f"token counts for a vocabulary of {vocab_size} ids (this file has "
                                  f"{doc.get('vocab_size')!r}: another tokenizer)")
    entries = doc.get("token_counts")
    if not isinstance(entries, list):
        raise _error(field, path, f"a 'token_counts' list (found {entries!r:.40})")
    ranked: List[int] = []
    for entry in entries:
        if (not isinstance(entry, list) or len(entry) != 2
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in entry)
                or not 0 <= entry[0] < vocab_size):
            raise _error(field, path, f"token_counts as [[id in [0, {vocab_size}), count], ...] "
                                      f"(found {entry!r})")
        ranked.append(entry[0])
    return ranked


def draft_vocab_ids(size: int, vocab_size: int, keep: Sequence[int] = (),
                    ranking: Optional[Sequence[int]] = None) -> List[int]:
    """`size` ids, increasing: the `keep` ids (end of generation), then by ranking, then lowest
    ids first."""
    if not 1 <= size:
        raise _error("speculative_config.draft_vocab_size", size, "0 (all) or an integer >= 1")
    if size >= vocab_size:
        raise _error("speculative_config.draft_vocab_size", size,
                     f"less than the drafter's vocabulary of {vocab_size} ids (0 for all of it)")
    chosen: List[int] = []
    taken = np.zeros(vocab_size, dtype=bool)

    def take(ids: Iterable[int]) -> None:
        for i in ids:
            if len(chosen) >= size:
                return
            if 0 <= i < vocab_size and not taken[i]:
                taken[i] = True
                chosen.append(int(i))

    take(keep)
    take(ranking or ())
    take(range(vocab_size))
    return sorted(chosen)
