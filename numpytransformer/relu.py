"""ReLU: ``out = max(x, 0)``."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .module import Module
from .validation import check_float, needs_checks

__all__ = ["relu_forward", "relu_backward", "ReLU"]


class ReLUCache(NamedTuple):
    positive: np.ndarray  # bool mask of x > 0


def relu_forward(x: np.ndarray):
    """:math:`\\text{out} = \\max(x, 0)` elementwise. Returns ``(out, cache)``.

    Assumes a finite float ``x`` (:class:`ReLU` checks); ``np.maximum`` would pass a NaN
    through. Negative inputs (and -0.0) give +0.0.
    """
    return np.maximum(x, 0), ReLUCache(x > 0)  # not x * (x > 0): a float-by-bool product is twice as slow


def relu_backward(dout: np.ndarray, cache: ReLUCache) -> np.ndarray:
    """dx of ReLU, shaped like ``x``; at the kink ``x == 0`` the convention is a derivative of 0.

    .. solution-only::

        The derivative is 1 where ``x > 0`` and 0 elsewhere.
    """
    ### BEGIN SOLUTION 1.2: dx of ReLU, shaped like x, with derivative 0 at the kink
    return dout * cache.positive
    ### END SOLUTION


class ReLU(Module):
    def forward(self, x):
        if needs_checks():  # False inside a model, which has checked its own inputs
            check_float(x, "x", min_ndim=0)
        out, self._cache = relu_forward(x)
        return out

    def backward(self, dout):
        return relu_backward(dout, self._pop_cache())
