"""Linear (fully connected) layer: ``out = x W + b``. Derived in lesson 1 (Backprop by hand), §1-2."""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np


__all__ = ["linear_forward", "linear_backward", "xavier_uniform"]


class LinearCache(NamedTuple):
    x: np.ndarray
    W: np.ndarray


def linear_forward(x: np.ndarray, W: np.ndarray, b: Optional[np.ndarray]):
    """Affine map on the last axis.

    .. math:: \\text{out} = x W + b

    Derived in lesson 1 (Backprop by hand), §1-2.

    Parameters
    ----------
    x : ndarray, shape (..., D_in)
    W : ndarray, shape (D_in, D_out)
    b : ndarray, shape (D_out,), or None

    Assumes what :class:`Linear` checks: matching widths and dtypes, finite values
    (NaN or inf would pass through silently).

    Returns
    -------
    out : ndarray, shape (..., D_out)
    cache : LinearCache
    """
    # Every leading axis as one axis of N rows: one (N, D_in) @ (D_in, D_out) product, where a
    # stacked (B, T, D) @ (D, D') would call the matrix library once per batch item.
    x_rows = x.reshape(-1, x.shape[-1])  # (N, D_in)
    out = x_rows @ W if b is None else x_rows @ W + b  # (N, D_out)
    return out.reshape(*x.shape[:-1], W.shape[1]), LinearCache(x, W)  # (..., D_out)


def linear_backward(dout: np.ndarray, cache: LinearCache):
    """Gradients of the affine map ``out = x W + b``.

    With every leading axis flattened into N rows, ``out = x W + b`` is a matrix
    product, so ``dx = dout W^T``, ``dW = x^T dout`` (a sum over rows) and ``db`` is
    the column sum of ``dout``.

    Derived in lesson 1 (Backprop by hand), §2.

    Returns
    -------
    dx : (..., D_in),  dW : (D_in, D_out),  db : (D_out,)
    """
    x, W = cache
    x2 = x.reshape(-1, x.shape[-1])  # (N, D_in)
    d2 = dout.reshape(-1, dout.shape[-1])  # (N, D_out)
    dx = (d2 @ W.T).reshape(x.shape)
    dW = x2.T @ d2
    db = d2.sum(axis=0)
    return dx, dW, db


def xavier_uniform(rng: np.random.Generator, fan_in: int, fan_out: int, dtype) -> np.ndarray:
    """Glorot/Xavier uniform initialisation, ``U(-a, a)`` with ``a = sqrt(6 / (fan_in + fan_out))``."""
    a = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-a, a, size=(fan_in, fan_out)).astype(dtype)
