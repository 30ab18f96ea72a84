"""Multi-head attention: the pair's gradients against finite differences, and the KV-cache variant
of the module equal to the full forward on the prefix (the fast form against the pair is in
tests/test_fast.py)."""
import numpy as np
import pytest

from numpytransformer.core import fast
from numpytransformer.core.attention import causal_mask, padding_mask
from numpytransformer.core.gradcheck import KINK_TOL, SMOOTH_TOL, check_pair
from numpytransformer.core.multihead import PARAM_NAMES, multihead_attention_backward, multihead_attention_forward
from numpytransformer.nn.gpt import prefix_mask
from numpytransformer.nn.modules import MultiHeadAttention

_IDS = np.array([[1, 2, 3, 0], [4, 5, 0, 0]])  # pad id 0
MASKS = {"none": None, "padding+causal": padding_mask(_IDS, 0) & causal_mask(4), "padding": padding_mask(_IDS, 0)}
CACHE_TOL = 1e-12  # cached vs full: the same products on fewer rows, float64 rounding only


def _params(D, seed):
    """Random weights and biases (scale 0.5), so that no term hides behind a zero."""
    r = np.random.default_rng(seed)
    return {name: r.standard_normal((D, D) if name.startswith("W") else D) * 0.5 for name in PARAM_NAMES}


@pytest.mark.parametrize("kind, mask_name, tol", [
    ("self", "none", SMOOTH_TOL), ("self", "padding+causal", KINK_TOL),
    ("cross", "none", SMOOTH_TOL), ("cross", "padding", KINK_TOL),
])
def test_pair_gradients(kind, mask_name, tol):
    r = np.random.default_rng(1)
    inputs = {"x_q": r.standard_normal((2, 4, 6)), **_params(6, 2)}
    if kind == "cross":
        inputs["x_kv"] = r.standard_normal((2, 4, 6))
    wrt = ["x_q", None if kind == "self" else "x_kv", *PARAM_NAMES]
    kwargs = {"x_kv": None} if kind == "self" else {}
    errors = check_pair(multihead_attention_forward, multihead_attention_backward, inputs, wrt,
                        n_heads=2, mask=MASKS[mask_name], **kwargs)
    assert set(errors) == {name for name in wrt if name is not None}
    bad = {name: err for name, err in errors.items() if not err < tol}
    assert not bad, f"errors above {tol:g}: {bad}"


@pytest.mark.parametrize("kind", ["self", "cross"])
def test_pair_gradients_with_attention_dropout(kind):
    """Dropped attention weights (a fixed mask, scaled by 1 / (1 - p)) inside the pair."""
    r = np.random.default_rng(3)
    inputs = {"x_q": r.standard_normal((2, 4, 6)), **_params(6, 4)}
    if kind == "cross":
        inputs["x_kv"] = r.standard_normal((2, 5, 6))
    keep = (r.random((2, 2, 4, 4 if kind == "self" else 5)) >= 0.3) / 0.7  # (B, H, T, S)
    wrt = ["x_q", None if kind == "self" else "x_kv", *PARAM_NAMES]
    kwargs = {"x_kv": None} if kind == "self" else {}
    errors = check_pair(multihead_attention_forward, multihead_attention_backward, inputs, wrt,
                        n_heads=2, dropout_p=0.3, drop_mask=keep, **kwargs)
    bad = {name: err for name, err in errors.items() if not err < SMOOTH_TOL}
    assert not bad, f"errors above {SMOOTH_TOL:g}: {bad}"
    out, cache = multihead_attention_forward(inputs["x_q"], inputs.get("x_kv"), **_params(6, 4), n_heads=2,
                                             dropout_p=0.3, drop_mask=keep)
    plain, _ = multihead_attention_forward(inputs["x_q"], inputs.get("x_kv"), **_params(6, 4), n_heads=2)
    assert (cache.att.dropped == 0).any() and not np.allclose(out, plain)  # the mask did drop weights


def _module(D=8, H=2, seed=3):
    mha = MultiHeadAttention(D, H, np.random.default_rng(seed))
    for name, value in _params(D, seed + 1).items():
        mha.params[name][...] = value
    return mha


@pytest.mark.parametrize("on", [True, False], ids=["fast", "textbook"])
@pytest.mark.parametrize("steps", [(1, 1, 1, 1, 1, 1, 1), (3, 1, 2, 1)], ids=["one at a time", "in chunks"])
def test_kv_cache_equals_the_full_forward_on_the_prefix(on, steps):
    """Self-attention fed the positions a few at a time through ``kv_cache`` gives, at each step, the
    last rows of the full causal forward over every position so far; cross-attention, whose memory's
    keys are cached at the first step, gives the rows of the full forward over the same memory."""
    mha = _module()
    r = np.random.default_rng(5)
    x, memory = r.standard_normal((2, sum(steps), 8)), r.standard_normal((2, 5, 8))
    fast.use_fast(on)
    try:
        full_self = mha(x, mask=causal_mask(x.shape[1]))
        full_cross = mha(x, memory)
        self_cache, cross_cache, start = {}, {}, 0
        for n in steps:
            new = x[:, start:start + n]
            got = mha(new, mask=prefix_mask(n, start), kv_cache=self_cache)
            np.testing.assert_allclose(got, full_self[:, start:start + n], rtol=0, atol=CACHE_TOL)
            assert self_cache["k"].shape == (2, 2, start + n, 4)  # (B, H, positions so far, D/H)
            np.testing.assert_allclose(mha(new, memory, kv_cache=cross_cache), full_cross[:, start:start + n],
                                       rtol=0, atol=CACHE_TOL)
            start += n
    finally:
        fast.use_fast(True)
    assert np.abs(full_self[:, -1] - full_self[:, 0]).max() > 0.1  # the rows differ: the test compares something
