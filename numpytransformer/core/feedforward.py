"""The position-wise feed-forward network: ``FFN(x) = max(0, x W1 + b1) W2 + b2``. Derived in lesson 6, §3."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .gelu import GELUCache, gelu_backward, gelu_forward
from .linear import LinearCache, linear_backward, linear_forward
from .relu import ReLUCache, relu_backward, relu_forward

__all__ = ["ffn_forward", "ffn_backward", "gelu_ffn_forward", "gelu_ffn_backward"]


class FFNCache(NamedTuple):
    lin1: LinearCache
    relu: ReLUCache
    lin2: LinearCache


def ffn_forward(x: np.ndarray, W1: np.ndarray, b1: np.ndarray, W2: np.ndarray, b2: np.ndarray):
    """Two linear layers with a ReLU between them, applied to every position alike.

    .. math:: \\text{FFN}(x) = \\max(0, x W_1 + b_1) W_2 + b_2

    Derived in lesson 6 (LayerNorm, the FFN and residuals), §3.

    Parameters
    ----------
    x : ndarray, shape (..., D)
        Assumed finite and of the weights' dtype (:class:`FeedForward` checks).
    W1 : (D, D_ff), b1 : (D_ff,), W2 : (D_ff, D), b2 : (D,)

    Returns
    -------
    out : ndarray, shape (..., D)
    cache : FFNCache
    """
    h, c1 = linear_forward(x, W1, b1)  # (..., D_ff)
    a, cr = relu_forward(h)
    out, c2 = linear_forward(a, W2, b2)  # (..., D)
    return out, FFNCache(c1, cr, c2)


def ffn_backward(dout: np.ndarray, cache: FFNCache):
    """The chain rule through linear, ReLU, linear, in reverse order. Derived in lesson 6, §3.

    Returns
    -------
    dx, dW1, db1, dW2, db2
    """
    da, dW2, db2 = linear_backward(dout, cache.lin2)
    dh = relu_backward(da, cache.relu)
    dx, dW1, db1 = linear_backward(dh, cache.lin1)
    return dx, dW1, db1, dW2, db2


class GELUFFNCache(NamedTuple):
    lin1: LinearCache
    gelu: GELUCache
    lin2: LinearCache


def gelu_ffn_forward(x: np.ndarray, W1: np.ndarray, b1: np.ndarray, W2: np.ndarray, b2: np.ndarray,
                     approximate: bool = False):
    """The FFN of BERT and GPT-2: :func:`ffn_forward` with GELU in place of the ReLU.

    .. math:: \\text{FFN}(x) = \\text{GELU}(x W_1 + b_1) W_2 + b_2

    ``approximate`` picks GELU's tanh form (GPT-2's ``gelu_new``) over the exact one
    (:func:`~numpytransformer.core.gelu.gelu_forward`). Shapes as in :func:`ffn_forward`.
    Lesson 6 (LayerNorm, the FFN and residuals), §3, with the activation swapped.
    """
    h, c1 = linear_forward(x, W1, b1)  # (..., D_ff)
    a, cg = gelu_forward(h, approximate)
    out, c2 = linear_forward(a, W2, b2)  # (..., D)
    return out, GELUFFNCache(c1, cg, c2)


def gelu_ffn_backward(dout: np.ndarray, cache: GELUFFNCache):
    """The chain rule through linear, GELU, linear, in reverse order; as :func:`ffn_backward`.

    Returns
    -------
    dx, dW1, db1, dW2, db2
    """
    da, dW2, db2 = linear_backward(dout, cache.lin2)
    dh = gelu_backward(da, cache.gelu)
    dx, dW1, db1 = linear_backward(dh, cache.lin1)
    return dx, dW1, db1, dW2, db2
