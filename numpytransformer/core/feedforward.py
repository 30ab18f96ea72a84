"""The position-wise feed-forward network: ``FFN(x) = max(0, x W1 + b1) W2 + b2``. Derived in lesson 6, §3."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .linear import LinearCache, linear_backward, linear_forward
from .relu import ReLUCache, relu_backward, relu_forward

__all__ = ["ffn_forward", "ffn_backward",]


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
    ### BEGIN SOLUTION 6.2: dx, dW1, db1, dW2 and db2, back through W2, the ReLU and W1
    da, dW2, db2 = linear_backward(dout, cache.lin2)
    dh = relu_backward(da, cache.relu)
    dx, dW1, db1 = linear_backward(dh, cache.lin1)
    ### END SOLUTION
    return dx, dW1, db1, dW2, db2
