"""ReLU: ``out = max(x, 0)``. Derived in lesson 1 (Backprop by hand), §4."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np


__all__ = ["relu_forward", "relu_backward",]


class ReLUCache(NamedTuple):
    positive: np.ndarray  # bool mask of x > 0


def relu_forward(x: np.ndarray):
    """:math:`\\text{out} = \\max(x, 0)` elementwise. Returns ``(out, cache)``.

    Assumes a finite float ``x`` (:class:`ReLU` checks); ``np.maximum`` would pass a NaN
    through. Negative inputs (and -0.0) give +0.0. Derived in lesson 1 (Backprop by hand), §4.
    """
    out = np.maximum(x, 0)
    return out, ReLUCache(x > 0)


def relu_backward(dout: np.ndarray, cache: ReLUCache) -> np.ndarray:
    """dx of ReLU, shaped like ``x``; at the kink ``x == 0`` the convention is a derivative of 0.

    The derivative is 1 where ``x > 0`` and 0 elsewhere: ``dx = dout * [x > 0]``.

    Derived in lesson 1 (Backprop by hand), §4.
    """
    return dout * cache.positive
