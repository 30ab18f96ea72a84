"""The plain three-projection multi-head attention beside the fused one: both proven, both agree."""
import numpy as np
import pytest

from numpytransformer.core.attention import causal_mask, padding_mask
from numpytransformer.core.gradcheck import KINK_TOL, SMOOTH_TOL, check_pair
from numpytransformer.core.multihead import (
    PARAM_NAMES,
    multihead_attention_backward,
    multihead_attention_forward,
    plain_multihead_attention_backward,
    plain_multihead_attention_forward,
)

AGREE_TOL = 1e-12  # fused vs plain: the same arithmetic in another order, float64 rounding only

_IDS = np.array([[1, 2, 3, 0], [4, 5, 0, 0]])  # pad id 0
MASKS = {"none": None, "padding+causal": padding_mask(_IDS, 0) & causal_mask(4), "padding": padding_mask(_IDS, 0)}


def _params(D, seed):
    """Random weights and biases (scale 0.5), so that no term hides behind a zero."""
    r = np.random.default_rng(seed)
    return {name: r.standard_normal((D, D) if name.startswith("W") else D) * 0.5 for name in PARAM_NAMES}


def _inputs(kind, seed, D=6):
    r = np.random.default_rng(seed)
    x_q = r.standard_normal((2, 4, D))
    x_kv = None if kind == "self" else r.standard_normal((2, 4, D))
    return x_q, x_kv


@pytest.mark.parametrize("kind, mask_name, tol", [
    ("self", "none", SMOOTH_TOL), ("self", "padding+causal", KINK_TOL),
    ("cross", "none", SMOOTH_TOL), ("cross", "padding", KINK_TOL),
])
def test_plain_pair_gradients(kind, mask_name, tol):
    x_q, x_kv = _inputs(kind, 1)
    inputs = {"x_q": x_q, **_params(6, 2)}
    if kind == "cross":
        inputs["x_kv"] = x_kv
    wrt = ["x_q", None if kind == "self" else "x_kv", *PARAM_NAMES]
    kwargs = {"x_kv": None} if kind == "self" else {}
    errors = check_pair(plain_multihead_attention_forward, plain_multihead_attention_backward, inputs, wrt,
                        n_heads=2, mask=MASKS[mask_name], **kwargs)
    assert set(errors) == {name for name in wrt if name is not None}
    bad = {name: err for name, err in errors.items() if not err < tol}
    assert not bad, f"errors above {tol:g}: {bad}"


@pytest.mark.parametrize("kind, mask_name", [("self", "none"), ("self", "padding+causal"),
                                             ("cross", "none"), ("cross", "padding")])
@pytest.mark.parametrize("D, H", [(6, 2), (16, 4)])
def test_fused_and_plain_agree(kind, mask_name, D, H):
    x_q, x_kv = _inputs(kind, 3, D)
    params = _params(D, 4)
    out_f, cache_f = multihead_attention_forward(x_q, x_kv, **params, n_heads=H, mask=MASKS[mask_name])
    out_p, cache_p = plain_multihead_attention_forward(x_q, x_kv, **params, n_heads=H, mask=MASKS[mask_name])
    np.testing.assert_allclose(out_f, out_p, rtol=0, atol=AGREE_TOL)
    dout = np.random.default_rng(5).standard_normal(out_f.shape)
    grads_f = multihead_attention_backward(dout, cache_f)
    grads_p = plain_multihead_attention_backward(dout, cache_p)
    for name, g_f, g_p in zip(["x_q", "x_kv", *PARAM_NAMES], grads_f, grads_p):
        if kind == "self" and name == "x_kv":
            assert g_f is None and g_p is None  # self-attention: the gradient of x is all in dx_q
            continue
        assert g_f.shape == g_p.shape, name
        np.testing.assert_allclose(g_f, g_p, rtol=0, atol=AGREE_TOL, err_msg=f"d{name}")
    assert np.abs(grads_f[0]).max() > 0.1  # the comparison is not between zeros
