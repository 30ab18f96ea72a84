"""The one softmax / log_softmax (numpytransformer/core/softmax.py) and the names that re-export it.

Its fast form (fast.softmax, written into an array of the caller's) is checked in test_fast.py.
"""
import numpy as np
import pytest

from numpytransformer.core.softmax import log_softmax, softmax


def _naive_softmax(x, axis):
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_matches_the_definition_on_moderate_values(axis):
    x = np.random.default_rng(0).standard_normal((3, 4, 5))
    np.testing.assert_allclose(softmax(x, axis=axis), _naive_softmax(x, axis), rtol=1e-14)
    np.testing.assert_allclose(log_softmax(x, axis=axis), np.log(_naive_softmax(x, axis)), rtol=1e-13)
    np.testing.assert_allclose(softmax(x, axis=axis).sum(axis=axis), 1.0, rtol=1e-15)


def test_stable_where_the_naive_formula_overflows_or_underflows():
    x = np.array([[1000.0, 999.0, -1000.0]])
    with np.errstate(over="ignore", invalid="ignore"):
        assert np.isnan(_naive_softmax(x, -1)).any()
    p = softmax(x)
    np.testing.assert_allclose(p, softmax(x - 1000.0), rtol=1e-15)
    assert p[0, 2] == 0.0  # underflows: log would be -inf
    logp = log_softmax(x)
    assert np.isfinite(logp).all()
    np.testing.assert_allclose(logp[0, 2], -2000.0 - np.log1p(np.exp(-1.0)), rtol=1e-15)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_preserved(dtype):
    x = np.random.default_rng(1).standard_normal((2, 6)).astype(dtype)
    assert softmax(x).dtype == dtype and log_softmax(x).dtype == dtype


def test_old_import_paths_are_the_same_functions():
    from numpytransformer.core.attention import softmax as attention_softmax
    from numpytransformer.nn.decoding import log_softmax as decoding_log_softmax

    assert attention_softmax is softmax and decoding_log_softmax is log_softmax
