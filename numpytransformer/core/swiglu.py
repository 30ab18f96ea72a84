"""The SwiGLU feed-forward network (Shazeer, 2020): a gated FFN, LLaMA's and PaLM's.

A sibling of lesson 6 (LayerNorm, the FFN and residuals), §3's FFN. Where the FFN passes one
projection through an activation, SwiGLU multiplies two: ``silu(x W1)``, a smooth gate, and
``x V``, the value it lets through. There are no biases, as in the paper and in LLaMA. At the
same hidden width ``D_ff`` it has half again the FFN's weights (three matrices, not two).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .linear import LinearCache, linear_backward, linear_forward

__all__ = ["swiglu_forward", "swiglu_backward"]


class SwiGLUCache(NamedTuple):
    lin1: LinearCache
    linv: LinearCache
    lin2: LinearCache
    h: np.ndarray  # x W1, (..., D_ff)
    sig: np.ndarray  # sigmoid(h)
    g: np.ndarray  # x V, (..., D_ff)
    a: np.ndarray  # silu(h) = h * sigmoid(h)


def swiglu_forward(x: np.ndarray, W1: np.ndarray, V: np.ndarray, W2: np.ndarray):
    """The gated FFN, applied to every position alike.

    .. math:: \\text{FFN}_{\\text{SwiGLU}}(x) = \\big(\\text{silu}(x W_1) \\odot x V\\big) W_2,
              \\quad \\text{silu}(h) = h\\,\\sigma(h)

    Sibling of lesson 6 (LayerNorm, the FFN and residuals), §3's FFN.

    Parameters
    ----------
    x : ndarray, shape (..., D)
        Assumed finite and of the weights' dtype (:class:`~numpytransformer.nn.modules.SwiGLU` checks).
    W1, V : ndarray, shape (D, D_ff)
    W2 : ndarray, shape (D_ff, D)

    Returns
    -------
    out : ndarray, shape (..., D)
    cache : SwiGLUCache
    """
    h, c1 = linear_forward(x, W1, None)  # (..., D_ff)
    g, cv = linear_forward(x, V, None)  # (..., D_ff)
    sig = 0.5 * (1.0 + np.tanh(0.5 * h))  # sigmoid(h), without exp(-h) overflowing for very negative h
    a = h * sig  # silu(h)
    out, c2 = linear_forward(a * g, W2, None)  # (..., D)
    return out, SwiGLUCache(c1, cv, c2, h, sig, g, a)


def swiglu_backward(dout: np.ndarray, cache: SwiGLUCache):
    """The chain rule through W2, the product, silu, and the two projections that read x.

    .. solution-only::

        With :math:`m = a \\odot g`: :math:`da = dm \\odot g`, :math:`dg = dm \\odot a`; silu's
        derivative is :math:`\\sigma(h) + h\\,\\sigma(h)(1 - \\sigma(h))`; ``x`` feeds both W1 and V,
        so its two gradients add.

    Sibling of lesson 6, §3's FFN backward.

    Returns
    -------
    dx, dW1, dV, dW2
    """
    lin1, linv, lin2, h, sig, g, a = cache
    ### BEGIN SOLUTION 6.2: dx, dW1, dV and dW2, back through W2, the gate product, silu and the two projections
    dm, dW2, _ = linear_backward(dout, lin2)  # (..., D_ff)
    da = dm * g
    dg = dm * a
    dh = da * sig * (1.0 + h * (1.0 - sig))  # silu'(h)
    dx1, dW1, _ = linear_backward(dh, lin1)
    dxv, dV, _ = linear_backward(dg, linv)
    dx = dx1 + dxv
    ### END SOLUTION
    return dx, dW1, dV, dW2
