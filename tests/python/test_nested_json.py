"""Deeply nested JSON through every entry point that parses it (issue 20, item 3): a clear one-line
ValueError naming the file or field and the depth limit; never a crash or a RecursionError.

The calls that used to crash the interpreter (SIGSEGV in C++) run in a child process so that a
regression fails its test instead of taking pytest down."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import specdec
from specdec import draft_vocab

from paths import STORIES_PATH as STORIES  # noqa: E402
LIMIT = "64 levels"  # what every message names


def nested_text(depth: int, leaf: str = "1") -> str:
    return "[" * depth + leaf + "]" * depth


def nested_list(depth: int) -> list:
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


def raised_in_child(code: str) -> str:
    """Runs code in a fresh interpreter and returns what it raised as
    '<is a ValueError> <type>: <message>' (or 'no error')."""
    script = ("import json, sys, specdec\ntry:\n" + textwrap.indent(textwrap.dedent(code), "    ") +
              "\nexcept Exception as e:\n"
              "    print(isinstance(e, ValueError), type(e).__name__ + ':', e)\n"
              "else:\n    print('no error')\n")
    proc = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    out = proc.stdout.strip()
    assert out.count("\n") == 0, out
    return out


def one_line_cli_error(*args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "specdec", *args], capture_output=True, text=True,
                          timeout=120)
    err = proc.stderr.strip()
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in err and err.count("\n") == 0, err[-2000:]
    assert err.startswith("specdec: error: "), err
    return err


def config_text(hidden_size: str) -> str:
    """A llama config.json with hidden_size as given (JSON text) and every other field sound."""
    fields = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 0, "intermediate_size": 64,
              "num_attention_heads": 2, "vocab_size": 32, "max_position_embeddings": 64}
    return json.dumps(fields).replace('"hidden_size": 0', '"hidden_size": ' + hidden_size)


@pytest.fixture(scope="module")
def deep_config_dir(tmp_path_factory):
    """A Hugging Face folder whose config.json nests hidden_size 200,000 deep."""
    d = tmp_path_factory.mktemp("deep_hf")
    (d / "config.json").write_text(config_text(nested_text(200_000)))
    return d


def test_load_model_config_of_a_deep_config_json(deep_config_dir):
    out = raised_in_child(f"specdec.load_model_config({str(deep_config_dir)!r})")
    assert out.startswith("True FormatError:"), out
    assert "config.json" in out and LIMIT in out, out


def test_model_config_from_deep_json_text():
    out = raised_in_child(f"specdec._core.model_config_from_hf_json({config_text(nested_text(100_000))!r})")
    assert out.startswith("True FormatError:") and LIMIT in out, out


def test_inspect_of_a_deep_config_json_is_one_line(deep_config_dir):
    err = one_line_cli_error("inspect", str(deep_config_dir))
    assert "config.json" in err and LIMIT in err, err


def test_a_config_field_nested_within_the_limit_is_shown_briefly(tmp_path):
    (tmp_path / "config.json").write_text(config_text(nested_text(60)))
    with pytest.raises(ValueError, match=r"hidden_size = \[\[\[.*\.\.\.: must be an integer") as e:
        specdec.load_model_config(str(tmp_path))
    assert len(str(e.value)) < 300


@pytest.mark.parametrize("text", [nested_text(100_000), '{"method": ' + nested_text(100_000) + "}"])
def test_speculative_config_from_deep_json_text(text):
    out = raised_in_child(f"specdec.SpeculativeConfig.from_json({text!r})")
    assert out.startswith("True ValueError: speculative_config"), out
    assert LIMIT in out, out


def test_llm_with_deep_speculative_config_text_fails_before_loading():
    text = '{"method": ' + nested_text(100_000) + "}"
    out = raised_in_child(f"specdec.LLM('/nonexistent/model.gguf', speculative_config={text!r})")
    assert out.startswith("True ValueError: speculative_config") and LIMIT in out, out


def test_generate_with_deep_speculative_config_is_one_line():
    # 60,000 deep: a command-line argument holds at most 128 KiB
    err = one_line_cli_error("generate", "--model", str(STORIES), "--prompt", "hi",
                             "--speculative-config", nested_text(60_000))
    assert "--speculative-config" in err and LIMIT in err, err


def test_speculative_config_field_nested_within_the_limit_names_the_field():
    with pytest.raises(ValueError, match=r"speculative_config\.method = \[\[\[.*\.\.\.: "):
        specdec.SpeculativeConfig.from_json('{"method": ' + nested_text(60) + "}")


@pytest.mark.parametrize("depth", [100, 100_000])
def test_dict_speculative_config_with_a_deep_python_value(depth):
    with pytest.raises(ValueError, match=r"speculative_config\.method = .*nest") as e:
        specdec.LLM("/nonexistent/model.gguf", speculative_config={"method": nested_list(depth)})
    assert LIMIT in str(e.value) and len(str(e.value)) < 300


def test_dict_speculative_config_with_a_cyclic_value():
    cycle: list = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match=r"speculative_config\.model = .*nest"):
        specdec.speculative.build_speculation({"method": "draft_model", "model": cycle})


def _deep_vocab_file(tmp_path) -> Path:
    path = tmp_path / "vocab.json"
    path.write_text('{"format": "' + draft_vocab.FORMAT + '", "vocab_size": 512, "token_counts": '
                    + nested_text(100_000) + "}")
    return path


def test_read_ranking_of_a_deep_file(tmp_path):
    path = _deep_vocab_file(tmp_path)
    with pytest.raises(ValueError, match=r"speculative_config\.draft_vocab_file = .*vocab\.json") as e:
        draft_vocab.read_ranking(str(path), 512)
    assert LIMIT in str(e.value)


def test_llm_with_a_deep_draft_vocab_file(tmp_path):
    path = _deep_vocab_file(tmp_path)
    config = {"method": "draft_model", "model": str(STORIES), "num_speculative_tokens": 2,
              "draft_vocab_size": 100, "draft_vocab_file": str(path)}
    with pytest.raises(ValueError, match=r"draft_vocab_file = .*vocab\.json.*64 levels"):
        specdec.LLM(str(STORIES), max_model_len=64, kv_cache_memory_bytes="16MiB", progress=False,
                    speculative_config=config)


def test_load_catalog_of_a_deep_file(tmp_path):
    path = tmp_path / "catalog.json"
    path.write_text('{"models": ' + nested_text(100_000) + "}")
    with pytest.raises(ValueError, match="catalog.json") as e:
        specdec.hub.load_catalog(path)
    assert LIMIT in str(e.value)


def test_shallow_json_still_loads(tmp_path):
    config = specdec.SpeculativeConfig.from_json(json.dumps({"method": "ngram", "num_speculative_tokens": 3}))
    assert config.method == "ngram"
    assert specdec.hub.load_catalog()  # the project's own catalog


def test_speculative_config_keywords_with_a_deep_python_value():
    with pytest.raises(ValueError, match=r"speculative_config"):
        specdec.SpeculativeConfig(method=nested_list(100_000))
    with pytest.raises(ValueError, match=r"speculative_config\.method = .*" + LIMIT):
        specdec.SpeculativeConfig(method=nested_list(100))


def test_shared_sub_lists_are_checked_in_linear_time():
    import time
    from specdec import _json
    a = []
    for _ in range(40):
        a = [a, a]  # 2^40 paths, 41 distinct lists
    t0 = time.perf_counter()
    assert not _json.too_deep(a, 64) and _json.too_deep(a, 30)
    assert time.perf_counter() - t0 < 5


def test_huge_field_names_and_values_make_short_messages():
    for text in (json.dumps({"method": "x" * 10_000_000}), json.dumps({"y" * 10_000_000: 1})):
        with pytest.raises(ValueError) as err:
            specdec.SpeculativeConfig.from_json(text)
        assert len(str(err.value)) < 2000
