"""Where the tests find their data: one place for every test file (`from paths import STORIES`).

stories260K.gguf (llama2.c's TinyStories 260K, MIT; see tests/data/models/README.md) is carried
in the repository, so a fresh clone needs nothing beside it. llama.cpp's vocabulary files and
token vectors come from the pinned llama-cpp-python sdist (llamacpp_sdist.models_dir())."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
STORIES_PATH = DATA / "models" / "stories260K.gguf"
STORIES = str(STORIES_PATH)
