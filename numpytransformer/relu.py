"""ReLU: ``out = max(x, 0)``."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .module import Module

__all__ = ["relu_forward", "relu_backward", "ReLU"]


class ReLUCache(NamedTuple):
    positive: np.ndarray  # bool mask of x > 0


def relu_forward(x: np.ndarray):
    """:math:`\\text{out} = \\max(x, 0)` elementwise. Returns ``(out, cache)``."""
    positive = x > 0
    return x * positive, ReLUCache(positive)


def relu_backward(dout: np.ndarray, cache: ReLUCache) -> np.ndarray:
    """The derivative is 1 where ``x > 0`` and 0 elsewhere (0 is chosen at the kink)."""
    ### BEGIN SOLUTION 1.2: dx of ReLU, dout where x > 0 and 0 elsewhere
    return dout * cache.positive
    ### END SOLUTION


class ReLU(Module):
    def forward(self, x):
        out, self._cache = relu_forward(x)
        return out

    def backward(self, dout):
        return relu_backward(dout, self._pop_cache())
