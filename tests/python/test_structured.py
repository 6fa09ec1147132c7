"""Structured outputs (specdec.structured, issue 36): outputs constrained to a JSON schema, a
regex, a choice or a grammar are valid; constrained speculative decoding is token for token
plain constrained decoding (greedy) and draws from the same distribution (sampling); drafts the
grammar forbids are cut before verification; bad and hostile constraints are refused quickly,
naming the field. Model: stories260K (512 tokens of TinyStories), which never writes JSON unless
made to."""

from __future__ import annotations

import json
import re
import time

import numpy as np
import pytest

import specdec
from specdec import SamplingParams, StructuredOutputsParams
from spec_helpers import STORIES

jsonschema = pytest.importorskip("jsonschema")

SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 12},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120},
                         "pets": {"type": "array", "items": {"enum": ["dog", "cat", "bird"]}, "maxItems": 3}},
          "required": ["name", "age", "pets"], "additionalProperties": False}
LARK = 'start: "The " animal " is " colour "."\nanimal: "dog" | "cat" | "bird"\ncolour: "red" | "big" | "happy"'
GBNF = 'root ::= "Tom " verb " the " noun\nverb ::= "saw" | "had" | "liked"\nnoun ::= "ball" | "dog" | "cake"'
PROMPTS = ["Once upon a time", "The dog", "Lily went to the park and saw a big red ball. She"]

CONSTRAINTS = {
    "json": dict(json=SCHEMA),
    "json_compact": dict(json=SCHEMA, disable_any_whitespace=True),
    "json_object": dict(json_object=True),
    "regex": dict(regex=r"(Tom|Lily) (is|was) [a-z]{2,8}\."),
    "choice": dict(choice=["happy", "sad", "a big red ball"]),
    "lark": dict(grammar=LARK),
    "gbnf": dict(grammar=GBNF),
}


def _params(kind, **kw):
    return SamplingParams(temperature=0, max_tokens=120, structured_outputs=StructuredOutputsParams(**CONSTRAINTS[kind]),
                          **kw)


def _valid(kind, text):
    c = CONSTRAINTS[kind]
    if kind.startswith("json"):
        value = json.loads(text)
        jsonschema.validate(value, c.get("json", {"type": "object"}))
        if c.get("disable_any_whitespace"):
            assert json.dumps(value, separators=(",", ":"), ensure_ascii=False) == text
    elif kind == "regex":
        assert re.fullmatch(c["regex"], text), text
    elif kind == "choice":
        assert text in c["choice"], text
    elif kind == "lark":
        assert re.fullmatch(r"The (dog|cat|bird) is (red|big|happy)\.", text), text
    else:
        assert re.fullmatch(r"Tom (saw|had|liked) the (ball|dog|cake)", text), text


@pytest.fixture(scope="module")
def plain_llm():
    return specdec.LLM(STORIES, progress=False)


@pytest.fixture(scope="module")
def plain_outputs(plain_llm):
    return {k: plain_llm.generate(PROMPTS, _params(k)) for k in CONSTRAINTS}


@pytest.mark.parametrize("kind", list(CONSTRAINTS))
def test_constrained_greedy_outputs_are_valid(plain_outputs, kind):
    for o in plain_outputs[kind]:
        out = o.outputs[0]
        if kind == "json_object" and out.finish_reason == "length":
            # any object: stories260K writes keys and values until the context ends; what it
            # wrote is still an object's start, one token at a time allowed by the grammar
            assert out.text.startswith("{") and len(o.prompt_token_ids) + len(out.token_ids) >= 100
            continue
        assert out.finish_reason == "stop", (kind, out.text)
        _valid(kind, out.text)


def test_unconstrained_requests_beside_constrained_ones_are_unchanged(plain_llm):
    free = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    want = [o.outputs[0].token_ids for o in plain_llm.generate(PROMPTS, free)]
    mixed = plain_llm.generate(PROMPTS * 2, [free] * 3 + [_params("json")] * 3)
    assert [o.outputs[0].token_ids for o in mixed[:3]] == want
    for o in mixed[3:]:
        _valid("json", o.outputs[0].text)


METHODS = {
    "ngram": {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3},
    "suffix": {"method": "suffix", "num_speculative_tokens": 5},
    "draft_model": {"method": "draft_model", "model": STORIES, "num_speculative_tokens": 3},
    "draft_model_adaptive": {"method": "draft_model", "model": STORIES, "num_speculative_tokens": 4,
                             "adaptive": True},
    "layer_skip": {"method": "layer_skip", "num_speculative_tokens": 3, "exit_layer": 3},
    "hybrid": {"method": "hybrid", "num_speculative_tokens": 3, "proposers": [
        {"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 2},
        {"method": "draft_model", "model": STORIES}]},
}


class FixedProposer(specdec.Proposer):
    """Drafts one fixed token over and over (one the grammar forbids: every draft is cut)."""

    def __init__(self, token):
        self.token = token

    def propose(self, requests):
        return [[self.token] * r.num_speculative_tokens for r in requests]


@pytest.mark.parametrize("method", list(METHODS))
def test_constrained_speculative_equals_plain_greedy(plain_outputs, method):
    llm = specdec.LLM(STORIES, progress=False, speculative_config=METHODS[method])
    free = (llm.runner.num_free_blocks(), llm.drafter.num_free_blocks() if llm.drafter else None)
    drafted = 0
    for kind in CONSTRAINTS:
        outs = llm.generate(PROMPTS, _params(kind))
        assert [o.outputs[0].token_ids for o in outs] == [o.outputs[0].token_ids for o in plain_outputs[kind]], kind
        drafted += llm.last_metrics["num_draft_tokens"]
    assert drafted > 0
    if method == "draft_model":  # the model drafting itself: every grammar-checked draft is right
        m = llm.last_metrics
        assert m["num_accepted_tokens"] == m["num_draft_tokens"]
    assert (llm.runner.num_free_blocks(), llm.drafter.num_free_blocks() if llm.drafter else None) == free


def test_drafts_the_grammar_forbids_are_cut_before_verification(plain_outputs):
    tok = specdec.LLM(STORIES, progress=False).tokenizer
    x = tok.encode_continuation("{")
    assert len(x) == 1
    llm = specdec.LLM(STORIES, progress=False, speculative_config={
        "method": "custom", "num_speculative_tokens": 3, "proposer": FixedProposer(x[0])})
    outs = llm.generate(PROMPTS, _params("regex"))  # a regex of letters: "{" is never allowed
    assert [o.outputs[0].token_ids for o in outs] == [o.outputs[0].token_ids for o in plain_outputs["regex"]]
    m = llm.last_metrics
    assert m["num_draft_tokens"] == 0 and m["num_steps"] > 0  # cut to nothing: no row verified


def test_constrained_sampling_distribution_equals_plain():
    """Constrained sampling: the first two choices of a regex drawn with speculation (a draft
    model; rejection sampling on the masked distributions) against plain constrained sampling."""
    from test_spec import _chi2_z

    so = StructuredOutputsParams(regex=r"(the|a|one|his|her) (dog|cat|bird|ball|tree|park) (is|was|ran|saw)")
    n, prompt = 600, "Tom had a toy. Tom saw"

    def sample(llm, seeds, seeded):
        params = [SamplingParams(temperature=1.0, max_tokens=12, structured_outputs=so,
                                 seed=s if seeded else None) for s in seeds]
        outs = llm.generate([prompt] * len(seeds), params)
        words = [o.outputs[0].text.split(" ") for o in outs]
        return np.array([hash(w[0]) % 1000 for w in words]), np.array([hash(" ".join(w[:2])) % 100000 for w in words])

    ref = sample(specdec.LLM(STORIES, progress=False, max_num_seqs=64), range(10**6, 10**6 + 1800), True)
    # a weaker drafter (some drafts rejected), and the model itself, whose unconstrained
    # distribution puts most of its mass on tokens the regex forbids: drafts with probabilities
    # keep their first forbidden token, rejected for sure, so the residual is drawn (cutting the
    # draft before it drew from p instead, which tilts the output by q's forbidden mass)
    for drafter in ({"draft_vocab_size": 48}, {}):
        llm = specdec.LLM(STORIES, progress=False, max_num_seqs=64, speculative_config={
            "method": "draft_model", "model": STORIES, "num_speculative_tokens": 3, **drafter})
        for seeded in (True, False):
            got = sample(llm, range(n), seeded)
            assert llm.last_metrics["num_draft_tokens"] > 0
            for a, b in zip(got, ref):
                assert _chi2_z(a, b) < 4.0, (drafter, seeded)
            assert len(np.unique(got[1])) > 3  # a distribution, not one answer


@pytest.mark.parametrize("fields,field", [
    ({}, "StructuredOutputsParams: none given"),
    ({"json": SCHEMA, "regex": "a"}, "json, regex given"),
    ({"choice": []}, "StructuredOutputsParams.choice"),
    ({"choice": ["a", 3]}, "StructuredOutputsParams.choice[1]"),
    ({"json": "{not json"}, "StructuredOutputsParams.json: not valid JSON"),
    ({"json": [1]}, "StructuredOutputsParams.json"),
    ({"regex": ""}, "StructuredOutputsParams.regex"),
    ({"regex": "a" * (300 * 1024)}, "at most 262144"),
    ({"grammar": 5}, "StructuredOutputsParams.grammar"),
    ({"json_object": "yes"}, "StructuredOutputsParams.json_object"),
    ({"json_object": True, "disable_any_whitespace": 2}, "StructuredOutputsParams.disable_any_whitespace"),
    ({"json": False}, "StructuredOutputsParams.json"),
    ({"regex": "a", "disable_any_whitespace": True}, "disable_any_whitespace: only with json or json_object"),
    ({"choice": ["a"], "whitespace_pattern": " "}, "whitespace_pattern: only with json or json_object"),
    ({"json_object": True, "disable_any_whitespace": True, "whitespace_pattern": " "}, "not beside"),
])
def test_bad_params_name_the_field(fields, field):
    with pytest.raises(ValueError, match=re.escape(field)):
        StructuredOutputsParams(**fields)


def test_params_from_a_dict_and_in_sampling_params():
    p = SamplingParams(structured_outputs={"choice": ["a", "b"]})
    assert isinstance(p.structured_outputs, StructuredOutputsParams) and p.structured_outputs.choice == ["a", "b"]
    with pytest.raises(ValueError, match=r"SamplingParams.structured_outputs: unknown keys \['jsn'\]"):
        SamplingParams(structured_outputs={"jsn": {}})
    with pytest.raises(ValueError, match="SamplingParams.structured_outputs"):
        SamplingParams(structured_outputs="json")


@pytest.mark.parametrize("fields,what", [
    ({"regex": "(unclosed"}, "structured_outputs.regex"),
    ({"grammar": "start: undefined_rule"}, "structured_outputs.grammar"),
    ({"grammar": "root ::= (("}, "structured_outputs.grammar"),
    ({"json": {"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}}, "structured_outputs.json"),
    ({"json": {"type": "strange"}}, "structured_outputs.json"),
    ({"regex": "[^\\s\\S]"}, "structured_outputs.regex"),  # matches nothing: refused at compile
    ({"grammar": 'start: "a" start'}, "structured_outputs.grammar"),  # an empty language
])
def test_constraints_the_library_cannot_take_are_refused(plain_llm, fields, what):
    with pytest.raises(ValueError, match=re.escape(what)):
        plain_llm.generate("x", SamplingParams(max_tokens=4, structured_outputs=fields))
    out = plain_llm.generate("Once", SamplingParams(temperature=0, max_tokens=3, structured_outputs={"choice": ["x"]}))
    assert out[0].outputs[0].text == "x"  # the engine still serves


@pytest.mark.parametrize("fields", [
    {"regex": "(a|b)*a(a|b){40}"},  # a DFA of 2^40 states
    {"regex": "(x{1000}){1000}"},  # a million-fold repetition
    {"regex": "((((a*)*)*)*)*b"},
    {"json": json.loads('{"type": "array", "items": ' * 300 + '{"type": "string"}' + "}" * 300)},
    {"grammar": "start: a0\n" + "".join(f"a{i}: a{i + 1} a{i + 1}\n" for i in range(60)) + 'a60: "x"\n'},
], ids=["dfa_blowup", "repetition", "nested_stars", "deep_schema", "doubling_grammar"])
def test_hostile_constraints_take_bounded_time(plain_llm, fields):
    """Refused (ValueError naming the field) or served, either way in bounded time: llguidance's
    fuel and state limits bound the compile and every mask."""
    t0 = time.monotonic()
    try:
        plain_llm.generate("x", SamplingParams(max_tokens=8, structured_outputs=fields))
    except ValueError as e:
        assert "structured_outputs" in str(e)
    assert time.monotonic() - t0 < 30


def test_grammars_are_compiled_once(plain_llm):
    so = plain_llm.structured_outputs
    for _ in range(3):
        plain_llm.generate("Once", _params("lark"))
    keys = [k for k in so._cache if k[0] == "grammar" and k[1] == LARK]
    assert len(keys) == 1


def test_the_one_call_decode_step_carries_constraints(plain_llm, plain_outputs):
    """With n-gram drafts every step can be the one-call C++ decode step; constrained requests
    keep it (drafts cut and rows masked through its hook), and unconstrained ones beside them get
    plain decoding's tokens."""
    llm = specdec.LLM(STORIES, progress=False, speculative_config=METHODS["ngram"])
    core = llm.engine.core
    hooked = []
    real = core.decode_step

    def spy(*args):
        hooked.append(args[-1] is not None)
        return real(*args)

    core.decode_step = spy
    free = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    want = [o.outputs[0].token_ids for o in plain_llm.generate(PROMPTS, free)]
    outs = llm.generate(PROMPTS * 2, [free] * 3 + [_params("json")] * 3)
    assert [o.outputs[0].token_ids for o in outs[:3]] == want
    assert [o.outputs[0].token_ids for o in outs[3:]] == [o.outputs[0].token_ids for o in plain_outputs["json"]]
    assert any(hooked) and llm.last_metrics["num_draft_tokens"] > 0


@pytest.mark.parametrize("method", ["plain", "ngram"])
def test_masks_computed_before_or_after_the_forward_give_the_same_tokens(plain_outputs, method):
    """mask_while_forward (the default: the masks from a worker thread during the forward, on
    the Python step path and inside the one-call decode step) off: the same tokens."""
    llm = specdec.LLM(STORIES, progress=False,
                      speculative_config=None if method == "plain" else METHODS[method])
    assert llm.engine.core.mask_while_forward
    llm.engine.core.mask_while_forward = False
    for kind in ("json", "regex", "gbnf"):
        outs = llm.generate(PROMPTS, _params(kind))
        assert [o.outputs[0].token_ids for o in outs] == [o.outputs[0].token_ids for o in plain_outputs[kind]]


def test_a_request_failing_on_its_grammar_leaves_the_batch_and_its_blocks(plain_llm):
    free = plain_llm.runner.num_free_blocks()
    good = SamplingParams(temperature=0, max_tokens=20, ignore_eos=True)
    bad = SamplingParams(temperature=0, max_tokens=8, structured_outputs={"regex": "(x{1000}){1000}"})
    sink = plain_llm.engine
    import queue
    q = queue.SimpleQueue()
    reqs = [plain_llm._make_request(p, sp) for p, sp in (("Once", good), ("The", bad), ("Lily", good))]
    for r in reqs:
        sink.add_request(r, q)
    outs = {}
    with pytest.raises(ValueError, match="structured_outputs.regex"):
        for item in sink.iterate(q, [r.request_id for r in reqs]):
            if item.finished:
                outs[item.request_id] = item
    while len(outs) < 2:  # the good ones go on to the end
        for item in sink.iterate(q, [r.request_id for r in (reqs[0], reqs[2]) if r.request_id not in outs]):
            if item.finished:
                outs[item.request_id] = item
    assert [len(outs[r.request_id].output.outputs[0].token_ids) for r in (reqs[0], reqs[2])] == [20, 20]
    assert plain_llm.runner.num_free_blocks() == free


def test_drafts_with_probabilities_keep_their_first_forbidden_token():
    """Point-mass drafts (n-gram, suffix, greedy) end before their first forbidden token; a draft
    with probabilities keeps it, to be rejected for sure so that the residual (p - q)+ is drawn
    there: drawing from p instead would tilt sampled output by q's mass on forbidden tokens."""
    from specdec.engine.core import _keep

    class Grammar:
        error = False

        def valid_prefix(self, tokens):
            return tokens.index(9) if 9 in tokens else len(tokens)

    g = Grammar()
    assert _keep(g, [1, 2, 9, 4], False) == 2
    assert _keep(g, [1, 2, 9, 4], True) == 3
    assert _keep(g, [1, 2, 3], True) == 3
    assert _keep(g, [9], True) == 1 and _keep(g, [9], False) == 0
    assert _keep(g, [], True) == 0


def test_every_documented_choice_count_and_a_true_schema(plain_llm):
    from specdec.structured import MAX_CHOICES
    many = [f"c{i}" for i in range(MAX_CHOICES)]
    out = plain_llm.generate("Once", SamplingParams(temperature=0, max_tokens=8, structured_outputs={"choice": many}))
    assert out[0].outputs[0].text in many
    for schema in (True, "true", {}):
        out = plain_llm.generate("Once", SamplingParams(temperature=0, max_tokens=30,
                                                        structured_outputs={"json": schema}))
        text = out[0].outputs[0].text
        assert out[0].outputs[0].finish_reason == "length" or json.loads(text) is not None or text == "null"
