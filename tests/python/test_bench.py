"""`specdec bench` end to end on the tiny model: JSON schema, plots written, lossless, errors.
Speed figures are never asserted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdec import bench, cli

from paths import STORIES  # noqa: E402


def test_bench_writes_json_and_plots(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "out"
    rc = cli.main(["bench", "--model", STORIES, "--drafter", STORIES, "--max-tokens", "12",
                   "--ks", "1,3", "--categories", "code_editing,chat", "--adaptive-max-k", "4",
                   "--peer", "off", "--out", str(out)])
    assert rc == 0
    data = json.loads((out / "bench.json").read_text())
    assert data["schema"] == "specdec.bench/1"
    for key in ("cpu", "isa", "opencl_device", "opencl_platform", "quant_isa_path", "quant_kernels", "versions"):
        assert key in data["machine"]
    assert data["machine"]["quant_isa_path"] in ("portable", "avx2", "avx512bw", "avx512vnni",  # OpenCL
                                                  "avx_vnni", "avx512_vnni", "amx_int8")  # native
    assert data["machine"]["opencl_platform"]  # the device's platform (was always empty)
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
    # plain decoding once more at the end: the machine's drift over the run, per category
    assert set(data["plain_drift"]) == {"code_editing", "chat"}
    for d in data["plain_drift"].values():
        assert d["same_tokens"] is True and d["ratio"] > 0 and d["last_tokens_per_s"] > 0
    assert data["summary"]["plain_drift_max"] >= 0
    for name in ("speedup_overview.png", "tokens_per_s.png", "speedup_vs_k.png", "acceptance_per_position.png"):
        png = (out / name).read_bytes()
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    text = capsys.readouterr().out
    assert "speedup vs specdec plain" in text and "wrote" in text
    assert "plain decoding again at the end" in text
    wrote = [line.split("/")[-1] for line in text.splitlines() if line.startswith("wrote ")]
    assert wrote[:2] == ["bench.json", "speedup_overview.png"]  # the at-a-glance plot first


def _row(method, cat, tps, k=0, adaptive=False, base=None):
    return {"method": method, "category": cat, "tokens_per_s": tps, "k": k, "adaptive": adaptive,
            "base_method": base or method, "speedup_vs_plain": None, "acceptance_rate_per_pos": []}


def test_glance_plot_speedups_and_missing_data(tmp_path):
    """The first plot: per category specdec plain, its best mode, each method's best k,
    llama.cpp plain (1.0) and its best mode (plain decoding where nothing beats it), as speedups
    over llama.cpp plain; a category
    without a llama.cpp plain figure falls back to specdec plain; missing data is no crash."""
    pytest.importorskip("matplotlib")
    rows = [_row("plain", "chat", 10.0), _row("plain", "code_editing", 10.0), _row("plain", "summarisation", 8.0),
            _row("ngram k=2", "chat", 12.0, 2, base="ngram"), _row("ngram k=4", "chat", 15.0, 4, base="ngram"),
            _row("ngram k=2", "code_editing", 30.0, 2, base="ngram"),
            _row("suffix adaptive k<=6", "chat", 11.0, 6, True, base="suffix"),
            _row("suffix k=2", "code_editing", None, 2, base="suffix"),
            _row("ngram k=2", "summarisation", 12.0, 2, base="ngram"),
            _row("plain", "code_generation", 10.0), _row("ngram k=2", "code_generation", 8.0, 2, base="ngram")]
    peer = [{"method": "llama.cpp plain", "category": "chat", "tokens_per_s": 20.0},
            {"method": "llama.cpp plain", "category": "code_editing", "tokens_per_s": 20.0},
            {"method": "llama.cpp plain", "category": "summarisation", "tokens_per_s": None},
            {"method": "llama.cpp lookup k=2", "category": "chat", "tokens_per_s": 25.0},
            {"method": "llama.cpp lookup k=4", "category": "chat", "tokens_per_s": 22.0},
            {"method": "llama.cpp plain", "category": "code_generation", "tokens_per_s": 20.0},
            {"method": "llama.cpp lookup k=2", "category": "code_generation", "tokens_per_s": 15.0}]
    result = {"specdec": rows, "llama_cpp": peer, "target": "/m/t.gguf",
              "categories": ["chat", "code_editing", "summarisation", "code_generation"],
              "machine": {"cpu": "cpu", "isa": [], "opencl_device": "dev"}}
    g = bench.glance_bars(result)
    s = {x["name"]: x["bars"] for x in g["series"]}
    assert list(s) == ["specdec plain", "specdec best mode", "ngram (best k)", "suffix (best k)",
                       "llama.cpp plain", "llama.cpp best mode"]
    assert g["baseline"] == {"chat": "llama.cpp plain", "code_editing": "llama.cpp plain",
                             "summarisation": "specdec plain", "code_generation": "llama.cpp plain"}
    assert s["specdec plain"]["chat"] == (0.5, None)
    assert s["specdec best mode"]["chat"] == (0.75, "ngram k=4")
    assert s["ngram (best k)"]["chat"] == (0.75, "k=4")
    assert s["suffix (best k)"]["chat"] == (0.55, "adaptive k≤6")
    assert "code_editing" not in s["suffix (best k)"] and "summarisation" not in s["suffix (best k)"]
    assert s["llama.cpp plain"]["chat"] == (1.0, None) and "summarisation" not in s["llama.cpp plain"]
    assert s["llama.cpp best mode"]["chat"] == (1.25, "lookup k=2")
    assert s["llama.cpp best mode"]["code_editing"] == (1.0, "plain")  # no speculative run there
    # where no speculative mode beats plain decoding, the best mode is plain decoding
    assert s["llama.cpp best mode"]["code_generation"] == (1.0, "plain")
    assert s["specdec best mode"]["code_generation"] == (0.5, "plain")
    assert s["ngram (best k)"]["code_generation"] == (0.4, "k=2")
    assert s["specdec best mode"]["summarisation"] == (1.5, "ngram k=2")
    files = bench.write_plots(result, tmp_path)
    assert [Path(f).name for f in files][:2] == ["speedup_overview.png", "tokens_per_s.png"]
    # no llama.cpp results: speedups over specdec plain, no llama.cpp bars
    g = bench.glance_bars({**result, "llama_cpp": []})
    assert set(g["baseline"].values()) == {"specdec plain"}
    assert [x["name"] for x in g["series"]][-1] == "suffix (best k)"
    assert bench.write_plots({**result, "llama_cpp": []}, tmp_path)[0].endswith("speedup_overview.png")


def test_bench_peer_rows_from_fake_tools(tmp_path):
    """The llama.cpp side: the tools' output is parsed into rows (fake tools print what the real
    ones print)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "llama-bench").write_text('#!/bin/sh\necho \'[{"avg_ts": 42.5}]\'\n')
    for tool in ("llama-speculative-simple", "llama-lookup"):
        (bindir / tool).write_text("#!/bin/sh\necho 'decoded 12 tokens in 0.5 seconds, speed: 24.0 t/s' >&2\n"
                                   "echo 'accept    = 75.000%' >&2\n")
    # llama_perf_context_print's two lines: the decode rate is the second one's, not the prompt's
    (bindir / "llama-completion").write_text(
        "#!/bin/sh\necho 'llama_perf_context_print: prompt eval time =      60.00 ms /    30 tokens "
        "(    2.00 ms per token,   500.00 tokens per second)' >&2\n"
        "echo 'llama_perf_context_print:        eval time =     250.00 ms /     7 runs   "
        "(   35.71 ms per token,    20.00 tokens per second)' >&2\n")
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
    completion = peer["llama.cpp plain (llama-completion)"]
    assert completion["tokens_per_s"] == 20.0 and completion["decoded_tokens"] == 7
    # the overview's llama.cpp plain is the decode rate on the same prompt
    g = bench.glance_bars(result)
    assert g["baseline"]["chat"] == "llama.cpp plain"
    lookup = next(x for x in g["series"] if x["name"] == "llama.cpp best mode")["bars"]["chat"]
    assert lookup == (pytest.approx(24.0 / 20.0), "lookup k=2")
    assert next(x for x in g["series"] if x["name"] == "llama.cpp plain")["bars"]["chat"] == (1.0, None)


@pytest.mark.parametrize("argv,message", [
    (["--categories", "poetry"], "--categories: 'poetry'"),
    (["--methods", "magic"], "--methods: 'magic'"),
    (["--ks", "0"], "--ks: 0"),
    (["--repeats", "0"], "--repeats"),
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


def test_bench_repeats_alternate_the_order_and_pair_each_round_with_its_plain(tmp_path):
    """--repeats 2: every mode twice, the second round in reverse order; a row's tokens/s is the
    median of its rounds and its speedup the median of the ratios to the same round's plain."""
    lines = []
    o = bench.BenchOptions(model=STORIES, drafter=None, max_tokens=24, ks=(2,), methods=("ngram", "suffix"),
                           adaptive=False, categories=("chat",), peer="off", out_dir=str(tmp_path / "o"),
                           plots=False, progress=None, repeats=2)
    result = bench.run(o, log=lines.append)
    runs = [ln.split()[0] for ln in lines if "tok/s" in ln and "round" in ln]
    assert runs == ["plain", "ngram", "suffix", "suffix", "ngram", "plain"], lines
    # a fresh proposer per round: the suffix tree of round 1 (which saw the answer) is not reused,
    # so both greedy rounds draft alike
    suffix = next(r for r in result["specdec"] if r["method"] == "suffix k=2")
    assert suffix["acceptance_rate_rounds"][0] == suffix["acceptance_rate_rounds"][1]
    rows = {r["method"]: r for r in result["specdec"]}
    ng, plain = rows["ngram k=2"], rows["plain"]
    assert len(ng["tokens_per_s_rounds"]) == 2 and ng["lossless"] and plain["lossless"]
    assert ng["tokens_per_s"] == pytest.approx(sum(ng["tokens_per_s_rounds"]) / 2)
    pairs = [a / b for a, b in zip(ng["tokens_per_s_rounds"], plain["tokens_per_s_rounds"])]
    assert ng["speedup_vs_plain_rounds"] == pytest.approx(pairs)
    assert ng["speedup_vs_plain"] == pytest.approx(sum(pairs) / 2)
    assert plain["speedup_vs_plain"] == pytest.approx(1.0) and result["repeats"] == 2
    # plain decoding at the end is held against the very first plain run, not the rounds' median
    assert result["plain_drift"]["chat"]["first_tokens_per_s"] == plain["tokens_per_s_rounds"][0]
