"""Summarising a sequence into one vector for classification.

No lesson derives these two: the mean pool is a linear map (weight 1/count at each real position),
so its backward is lesson 1 (Backprop by hand), §2's ``dx = dout W^T``; the first-token summary is a
lookup, whose backward is lesson 3 (Token embeddings), §2's scatter.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["mean_pool_forward", "mean_pool_backward", "first_token_forward", "first_token_backward"]


class MeanPoolCache(NamedTuple):
    weights: np.ndarray  # (B, T, 1): 1/count at real positions, 0 at pads


def mean_pool_forward(h: np.ndarray, valid: np.ndarray):
    """Mean over the real (non-pad) positions.

    .. math:: \\text{out}_b = \\frac{1}{|\\{t: v_{b,t}\\}|} \\sum_{t:\\,v_{b,t}} h_{b,t}

    Parameters
    ----------
    h : ndarray, shape (B, T, D)
    valid : bool ndarray, shape (B, T); a row with no real position pools to zeros.

    Returns
    -------
    out : (B, D),  cache : MeanPoolCache
    """
    count = np.maximum(valid.sum(axis=1, keepdims=True), 1)  # (B, 1)
    weights = (valid / count).astype(h.dtype)[:, :, None]  # (B, T, 1)
    return (h * weights).sum(axis=1), MeanPoolCache(weights)


def mean_pool_backward(dout: np.ndarray, cache: MeanPoolCache) -> np.ndarray:
    """Each real position received weight ``1/count``, so it gets ``dout / count``."""
    return dout[:, None, :] * cache.weights  # (B, T, D)


def first_token_forward(h: np.ndarray):
    """The vector at position 0 (a [CLS]-style summary). Returns ``(out (B, D), T)``."""
    return h[:, 0].copy(), h.shape[1]


def first_token_backward(dout: np.ndarray, T: int) -> np.ndarray:
    """Gradient flows to position 0 only."""
    dh = np.zeros((dout.shape[0], T, dout.shape[1]), dtype=dout.dtype)
    dh[:, 0] = dout
    return dh
