"""The typed input and output of ModelRunner.step: StepRequest (keyword constructor, attributes,
repr, a clear error naming the field for a bad value, tuples refused) and StepOutput (what the
C++ step computed: argmax of the logits, logits_start, rows(i), hidden states)."""

import gc
import re

import numpy as np
import pytest

from specdec import _core
from specdec._core import StepOutput, StepRequest

from paths import STORIES  # noqa: E402


@pytest.fixture(scope="module")
def runner(context):
    return _core.ModelRunner(context, STORIES, "", 128, 16 << 20)


def _lse(x):
    x = np.asarray(x, np.float64)
    m = x.max(1)
    return m + np.log(np.exp(x - m[:, None]).sum(1))


# ---------------------------------------------------------------- StepRequest
def test_constructor_defaults_attributes_and_repr():
    r = StepRequest("a", [1, 2, 3])
    assert (r.request_id, r.tokens, r.num_computed_tokens, r.num_logits, r.num_committed_tokens) == \
        ("a", [1, 2, 3], 0, 1, -1)
    assert repr(r) == ("StepRequest(request_id='a', tokens=[1, 2, 3], num_computed_tokens=0, "
                       "num_logits=1, num_committed_tokens=-1)")
    r = StepRequest(request_id="b", tokens=(4, 5), num_computed_tokens=7, num_logits=2,
                    num_committed_tokens=6)
    assert (r.request_id, r.tokens, r.num_computed_tokens, r.num_logits, r.num_committed_tokens) == \
        ("b", [4, 5], 7, 2, 6)
    r.request_id, r.tokens = "c", [9]
    r.num_computed_tokens, r.num_logits, r.num_committed_tokens = 3, 0, 2
    assert r == StepRequest("c", [9], num_computed_tokens=3, num_logits=0, num_committed_tokens=2)
    assert r != StepRequest("c", [9], num_computed_tokens=3) and r != ("c", [9], 3, 0, 2)
    with pytest.raises(TypeError):
        hash(r)  # mutable


def test_tokens_from_numpy_and_range_and_long_repr():
    r = StepRequest("a", np.arange(3, 23, dtype=np.int32), num_computed_tokens=np.int64(4),
                    num_logits=np.int32(2))
    assert r.tokens == list(range(3, 23)) and r.num_computed_tokens == 4 and r.num_logits == 2
    assert StepRequest("a", range(5)).tokens == [0, 1, 2, 3, 4]
    assert repr(r) == ("StepRequest(request_id='a', tokens=[3, 4, 5, 6, 7, 8, 9, 10, ...] (20 tokens), "
                       "num_computed_tokens=4, num_logits=2, num_committed_tokens=-1)")
    tokens = r.tokens
    tokens.append(1)  # a copy: the request is unchanged
    assert len(r.tokens) == 20


def test_counts_are_keyword_only():
    with pytest.raises(TypeError, match=re.escape("StepRequest: 2 positional count(s) after tokens: "
                                                  "num_computed_tokens, num_logits and num_committed_tokens "
                                                  "are keyword arguments")):
        StepRequest("a", [1, 2], 0, 1)  # the positional form the tuples had: which int is which?
    with pytest.raises(TypeError, match=re.escape("StepRequest: unknown keyword argument(s) "
                                                  "'num_tokens': the fields are")):
        StepRequest("a", [1, 2], num_tokens=2)


@pytest.mark.parametrize("kw,error,message", [
    ({"request_id": 5}, TypeError, "StepRequest.request_id = 5: a str (got int)"),
    ({"tokens": "abc"}, TypeError, "StepRequest.tokens = 'abc': a sequence of token ids"),
    ({"tokens": 7}, TypeError, "StepRequest.tokens = 7: a sequence of token ids"),
    ({"tokens": np.zeros((2, 2), np.int32)}, TypeError, "StepRequest.tokens = array("),
    ({"tokens": [1, 2.5]}, TypeError,
     "StepRequest.tokens[1] = 2.5: a token id: an int in [0, 2**31) (got float)"),
    ({"tokens": [1, True]}, TypeError, "StepRequest.tokens[1] = True"),
    ({"tokens": [1, -3]}, ValueError, "StepRequest.tokens[1] = -3: a token id: an int in [0, 2**31)"),
    ({"tokens": [2 ** 31]}, ValueError, "StepRequest.tokens[0] = 2147483648"),
    ({"num_computed_tokens": 1.0}, TypeError, "StepRequest.num_computed_tokens = 1.0: an int >= 0"),
    ({"num_computed_tokens": -1}, ValueError, "StepRequest.num_computed_tokens = -1: an int >= 0"),
    ({"num_logits": "3"}, TypeError,
     "StepRequest.num_logits = '3': an int in [0, number of new tokens]"),
    ({"num_logits": None}, TypeError, "StepRequest.num_logits = None"),
    ({"num_logits": -1}, ValueError, "StepRequest.num_logits = -1"),
    ({"num_logits": 2 ** 40}, ValueError, "StepRequest.num_logits = 1099511627776"),
    ({"num_committed_tokens": -2}, ValueError, "StepRequest.num_committed_tokens = -2: an int >= -1"),
    ({"num_committed_tokens": 2 ** 70}, ValueError,
     "StepRequest.num_committed_tokens = 1180591620717411303424"),
])
def test_a_bad_field_names_itself(kw, error, message):
    args = {"request_id": "a", "tokens": [1, 2], **kw}
    with pytest.raises(error, match=re.escape(message)):
        StepRequest(**args)
    # the setters check the same way and leave the request unchanged
    r = StepRequest("a", [1, 2], num_logits=2)
    (field, value), = kw.items()
    before = repr(r)
    with pytest.raises(error, match=re.escape(message)):
        setattr(r, field, value)
    assert repr(r) == before


# ---------------------------------------------------------------- ModelRunner.step
def test_step_refuses_tuples_and_other_types(runner):
    with pytest.raises(TypeError, match=re.escape("requests[0] = ('a', [1, 2], 0, 1): a StepRequest; "
                                                  "positional tuples are no longer accepted")):
        runner.step([("a", [1, 2], 0, 1)])
    with pytest.raises(TypeError, match=re.escape("requests[1] = 5: a StepRequest (got int)")):
        runner.step([StepRequest("a", [1]), 5])
    with pytest.raises(TypeError, match="put the one request in a list"):
        runner.step(StepRequest("a", [1]))
    with pytest.raises(TypeError, match="a list of StepRequest"):
        runner.step("a")
    assert not runner.has_request("a")  # nothing ran


def test_step_output_is_what_the_step_computed(runner):
    a, b = [1, 50, 100, 7, 3], [9, 42, 8]
    requests = [StepRequest("a", a, num_logits=3), StepRequest("b", b)]
    out = runner.step(requests, hidden_layers=[-1, 0])
    try:
        assert isinstance(out, StepOutput)
        assert out.vocab_size == runner.num_logit_columns == 512
        assert out.logits_start == [0, 3, 4]
        assert (out.num_requests, out.num_rows) == (2, 4)
        assert out.rows(0) == slice(0, 3) and out.rows(1) == slice(3, 4) and out.rows(-1) == slice(3, 4)
        with pytest.raises(IndexError, match="request index 2"):
            out.rows(2)
        assert out.logits.dtype == np.float32 and out.logits.shape == (4, 512)
        assert out.argmax.dtype == np.int32 and out.argmax.shape == (4,)
        assert out.argmax_logprob.dtype == np.float32 and out.argmax_logprob.shape == (4,)
        np.testing.assert_array_equal(out.argmax, out.logits.argmax(1))
        np.testing.assert_allclose(out.argmax_logprob, out.logits.max(1) - _lse(out.logits), atol=2e-5)
        hidden = out.hidden
        assert sorted(hidden) == [-1, 0]
        for h in hidden.values():
            assert h.dtype == np.float32 and h.shape == (len(a) + len(b), runner.config.hidden_size)
        assert repr(out) == ("StepOutput(num_requests=2, num_rows=4, vocab_size=512, "
                             "logits=float32[4, 512], hidden=[-1, 0])")
        for name in ("logits", "logits_start", "argmax", "argmax_logprob", "hidden", "vocab_size"):
            with pytest.raises(AttributeError):
                setattr(out, name, None)
        out.logits_start.append(9)  # a copy
        assert out.logits_start == [0, 3, 4]

        # the same step without logits: the same rows, argmax and logprobs, bitwise
        runner.free("a")
        runner.free("b")
        lean = runner.step(requests, return_logits=False)
        assert lean.logits.shape == (0, 512) and lean.logits_start == out.logits_start
        assert lean.hidden == {}
        np.testing.assert_array_equal(lean.argmax, out.argmax)
        np.testing.assert_array_equal(lean.argmax_logprob, out.argmax_logprob)
        np.testing.assert_array_equal(lean.argmax[lean.rows(1)], out.argmax[3:4])

        # the arrays own the step's memory: they outlive the result
        logits, argmax = out.logits, out.argmax
        expect = logits.copy()
        del out, hidden
        gc.collect()
        np.testing.assert_array_equal(logits, expect)
        np.testing.assert_array_equal(argmax, expect.argmax(1))
    finally:
        for rid in ("a", "b"):
            if runner.has_request(rid):
                runner.free(rid)


def test_an_empty_step_and_a_reused_request(runner):
    empty = runner.step([])
    assert empty.logits_start == [0] and empty.num_requests == 0 and empty.num_rows == 0
    assert empty.logits.shape == (0, 512) and len(empty.argmax) == 0 and empty.hidden == {}
    req = StepRequest("r", [5, 6, 7])
    first = runner.step([req])
    runner.free("r")
    again = runner.step([req])  # the step copied the request: it can be stepped again
    np.testing.assert_array_equal(first.logits, again.logits)
    runner.free("r")
    with pytest.raises(TypeError):
        StepOutput()
