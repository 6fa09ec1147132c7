"""`specdec bench` end to end on the tiny model: JSON schema, plots written, lossless, errors.
Speed figures are never asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdec import bench, cli

STORIES = str(Path(__file__).resolve().parents[2].parent / "shared" / "models" / "stories260K.gguf")


def test_bench_writes_json_and_plots(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "out"
    rc = cli.main(["bench", "--model", STORIES, "--drafter", STORIES, "--max-tokens", "12",
                   "--ks", "1,3", "--categories", "code_editing,chat", "--adaptive-max-k", "4",
                   "--peer", "off", "--out", str(out)])
    assert rc == 0
    data = json.loads((out / "bench.json").read_text())
    assert data["schema"] == "specdec.bench/1"
    for key in ("cpu", "isa", "opencl_device", "quant_isa_path", "versions"):
        assert key in data["machine"]
    assert data["machine"]["quant_isa_path"] in ("portable", "avx2", "avx512bw", "avx512vnni")
    assert data["bandwidth"]["all_threads_gb_s"] > 0
    methods = {r["method"] for r in data["specdec"]}
    assert {"plain", "draft_model k=1", "draft_model k=3", "ngram k=1", "ngram k=3", "suffix k=1",
            "suffix k=3", "draft_model adaptive k<=4", "ngram adaptive k<=4",
            "suffix adaptive k<=4"} == methods
    assert len(data["specdec"]) == len(methods) * 2
    for r in data["specdec"]:
        assert r["lossless"] is True and r["output_tokens"] == 12
        assert r["tokens_per_s"] > 0 and r["speedup_vs_plain"] > 0
    dm = [r for r in data["specdec"] if r["method"] == "draft_model k=3"]
    assert all(r["acceptance_rate"] == 1.0 for r in dm)  # the model drafting for itself
    assert len(dm[0]["acceptance_rate_per_pos"]) == 3
    assert data["summary"]["all_lossless"] is True
    assert set(data["summary"]["adaptive_min_speedup_per_category"]) == {
        "draft_model adaptive k<=4", "ngram adaptive k<=4", "suffix adaptive k<=4"}
    assert data["llama_cpp"] == []
    for name in ("tokens_per_s.png", "speedup_vs_k.png", "acceptance_per_position.png"):
        png = (out / name).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    text = capsys.readouterr().out
    assert "speedup vs specdec plain" in text and "wrote" in text


def test_bench_peer_rows_from_fake_tools(tmp_path):
    """The llama.cpp side: the tools' output is parsed into rows (fake tools print what the real
    ones print)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "llama-bench").write_text('#!/bin/sh\necho \'[{"avg_ts": 42.5}]\'\n')
    for tool in ("llama-speculative-simple", "llama-lookup"):
        (bindir / tool).write_text("#!/bin/sh\necho 'decoded 12 tokens in 0.5 seconds, speed: 24.0 t/s' >&2\n"
                                   "echo 'accept    = 75.000%' >&2\n")
    for f in bindir.iterdir():
        f.chmod(0o755)
    o = bench.BenchOptions(model=STORIES, drafter=STORIES, max_tokens=8, ks=(2,), methods=("ngram",),
                           adaptive=False, categories=("chat",), peer="require", peer_bin=str(bindir),
                           out_dir=str(tmp_path / "o"), plots=False, progress=None)
    result = bench.run(o, log=lambda s: None)
    peer = {r["method"]: r for r in result["llama_cpp"]}
    assert peer["llama.cpp plain"]["tokens_per_s"] == 42.5
    assert peer["llama.cpp lookup k=2"]["tokens_per_s"] == 24.0
    assert peer["llama.cpp lookup k=2"]["acceptance_rate"] == pytest.approx(0.75)
    assert "llama.cpp plain" in bench.table(result)


@pytest.mark.parametrize("argv,message", [
    (["--categories", "poetry"], "--categories: 'poetry'"),
    (["--methods", "magic"], "--methods: 'magic'"),
    (["--ks", "0"], "--ks: 0"),
    (["--peer", "require", "--peer-bin", "/nonexistent"], "--peer require"),
    (["--max-tokens", "125"], "--max-tokens = 125"),
    (["--methods", "ngram", "--draft-vocab-size", "64"], "--draft-vocab-size = 64"),
    (["--draft-vocab-file", "x.json"], "--draft-vocab-file = 'x.json': only with --draft-vocab-size"),
    (["--draft-vocab-size", "64", "--draft-vocab-file", "/no/such.json"], "an existing file"),
])
def test_bench_bad_options_are_clear(argv, message, capsys, tmp_path):
    rc = cli.main(["bench", "--model", STORIES, "--drafter", STORIES, "--out", str(tmp_path), *argv])
    assert rc != 0
    assert message in capsys.readouterr().err


def test_bench_reduced_draft_vocabulary_rows(tmp_path):
    out = tmp_path / "out"
    rc = cli.main(["bench", "--model", STORIES, "--drafter", STORIES, "--max-tokens", "12",
                   "--ks", "2", "--methods", "draft_model", "--categories", "chat", "--no-adaptive",
                   "--draft-vocab-size", "32", "--peer", "off", "--no-plots", "--out", str(out)])
    assert rc == 0
    data = json.loads((out / "bench.json").read_text())
    rows = {r["method"]: r for r in data["specdec"]}
    assert set(rows) == {"plain", "draft_model k=2", "draft_model vocab=32 k=2"}
    red = rows["draft_model vocab=32 k=2"]
    assert red["lossless"] and red["config"]["draft_vocab_size"] == 32
    assert red["base_method"] == "draft_model vocab=32"
    assert data["draft_vocab_size"] == 32 and data["summary"]["draft_vocab"]["size"] == 32
    assert 0 < data["summary"]["draft_vocab"]["acceptance_vs_whole_vocab"] <= 1.0
