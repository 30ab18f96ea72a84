"""Inverted dropout, with the mask kept for the backward pass. Derived in lesson 6, §4 (Inverted dropout)."""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np


__all__ = ["dropout_forward", "dropout_backward",]


class DropoutCache(NamedTuple):
    mask: Optional[np.ndarray]  # None when nothing was dropped


def dropout_forward(x: np.ndarray, p: float, rng: Optional[np.random.Generator] = None,
                    training: bool = True, mask: Optional[np.ndarray] = None):
    """Zero each element with probability ``p`` and scale the survivors by ``1/(1-p)``.

    .. math:: \\text{out} = x \\odot m, \\quad m_i = \\frac{[u_i \\ge p]}{1-p},\\; u_i \\sim U(0,1)

    Scaling at training time ("inverted" dropout) keeps :math:`E[\\text{out}] = x`, so
    evaluation is the identity. Pass ``mask`` to reuse a fixed mask (gradient checks).
    Derived in lesson 6 (LayerNorm, the FFN and residuals), §4, "Inverted dropout, derived".

    Assumes a float ``x`` and, when given, a ``mask`` of its shape (:class:`Dropout` checks ``x``).

    Returns
    -------
    out : ndarray, same shape and dtype as ``x``
    cache : DropoutCache
    """
    if not 0.0 <= p < 1.0:
        raise ValueError(f"dropout p must be in [0, 1), got {p}")
    if mask is None:
        if not training or p == 0.0:
            return x, DropoutCache(None)
        if rng is None:
            raise ValueError("dropout_forward: rng is required when training with p > 0")
        keep = rng.random(x.shape, dtype=x.dtype) >= p
        mask = keep * x.dtype.type(1.0 / (1.0 - p))
    return x * mask, DropoutCache(mask)


def dropout_backward(dout: np.ndarray, cache: DropoutCache) -> np.ndarray:
    """``out = x * m`` with ``m`` fixed, so ``dx = dout * m``. Derived in lesson 6, §4."""
    return dout if cache.mask is None else dout * cache.mask
