"""Softmax and log-softmax, numerically stable: the one home of both in the library.

Derived in lesson 2 (Softmax and cross-entropy), §1. The loss (``losses.py``), attention,
decoding and sampling all take theirs from here; the fast form the Modules run
(``fast.softmax``) is checked against this one in ``tests/test_fast.py``.
"""
from __future__ import annotations

import numpy as np

__all__ = ["softmax", "log_softmax"]


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Softmax along ``axis``.

    .. math:: \\text{softmax}(x)_i = \\frac{e^{x_i - m}}{\\sum_j e^{x_j - m}}, \\qquad m = \\max_j x_j

    Subtracting the max changes nothing mathematically and keeps ``exp`` from
    overflowing: the largest exponent is 0, so the sum is at least 1.

    Parameters
    ----------
    x : float ndarray
    axis : int, optional

    Returns
    -------
    ndarray, shaped and typed like ``x``
    """
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Log of the softmax along ``axis``, without taking the log of a tiny probability.

    .. math:: \\log \\text{softmax}(x)_i = (x_i - m) - \\log \\sum_j e^{x_j - m}, \\qquad m = \\max_j x_j

    ``np.log(softmax(x))`` would give ``-inf`` where a probability underflows to 0;
    this stays finite.

    Parameters
    ----------
    x : float ndarray
    axis : int, optional

    Returns
    -------
    ndarray, shaped and typed like ``x``
    """
    shifted = x - x.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
