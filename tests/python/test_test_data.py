"""A clone passes its own tests with nothing beside it: the model the tests use is carried in the
repository (with its licence), and no test, benchmark default or script reads ../shared."""

from __future__ import annotations

import hashlib
import re

from paths import DATA, REPO, STORIES_PATH

STORIES_SHA256 = "047bf46455a544931cff6fef14d7910154c56afbc23ab1c5e56a72e69912c04b"
# a path built into ../shared: `"shared" / "models"`, `/ "shared" /`, `../shared/`, the old macro
OUTSIDE = re.compile(r"""["']shared["']\s*[/,]|/\s*["']shared["']|\.\./shared/|SPECDEC_SHARED_DIR""")
# compares the project's catalog with ../shared's copy only where that copy exists
OPTIONAL = {"tests/python/test_hub.py"}


def test_the_carried_model_is_the_documented_one():
    digest = hashlib.sha256(STORIES_PATH.read_bytes()).hexdigest()
    assert digest == STORIES_SHA256
    readme = (DATA / "models" / "README.md").read_text(encoding="utf-8")
    assert STORIES_SHA256 in readme and "MIT" in readme
    licence = (DATA / "models" / "LICENSE.llama2.c").read_text(encoding="utf-8")
    assert "MIT License" in licence and "Copyright (c) 2023 Andrej" in licence


def test_nothing_reads_outside_the_clone():
    found = []
    folders = ["tests/python", "tests/cpp", "bench", "scripts"]
    for folder in folders:
        for path in sorted((REPO / folder).rglob("*")):
            rel = str(path.relative_to(REPO))
            if path.suffix not in (".py", ".cpp", ".h", ".sh", ".txt") or rel in OPTIONAL \
                    or path.name == "test_test_data.py":
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                if OUTSIDE.search(line):
                    found.append(f"{rel}:{n}: {line.strip()}")
    for doc in ["README.md", *(p.relative_to(REPO) for p in (REPO / "docs").glob("*.md"))]:
        for n, line in enumerate((REPO / doc).read_text(encoding="utf-8").splitlines(), 1):
            if "../shared/models/stories260K.gguf" in line:
                found.append(f"{doc}:{n}: {line.strip()}")
    assert found == [], "\n".join(found)
