"""Linear (fully connected) layer: ``out = x W + b``."""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from .buffers import empty_reusable
from .module import Module
from .validation import check_float, needs_checks

__all__ = ["linear_forward", "linear_backward", "Linear", "xavier_uniform"]


class LinearCache(NamedTuple):
    x: np.ndarray
    W: np.ndarray


def linear_forward(x: np.ndarray, W: np.ndarray, b: Optional[np.ndarray]):
    """Affine map on the last axis.

    .. math:: \\text{out} = x W + b

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
    # One (N, D_in) @ (D_in, D_out) product over all rows: a stacked (B, T, D) @ (D, D')
    # would make NumPy call BLAS once per batch item, on small matrices. A large result
    # (the logits) goes into memory reused from an earlier one nobody holds (buffers.py).
    x2 = x.reshape(-1, x.shape[-1])
    out = np.matmul(x2, W, out=empty_reusable((x2.shape[0], W.shape[1]), np.result_type(x2, W)))
    out = out.reshape(*x.shape[:-1], W.shape[1])
    if b is not None:
        out += b
    return out, LinearCache(x, W)


def linear_backward(dout: np.ndarray, cache: LinearCache):
    """Gradients of the affine map ``out = x W + b``.

    .. solution-only::

        With every leading axis flattened into N rows, ``out = x W + b`` is a matrix
        product, so ``dx = dout W^T``, ``dW = x^T dout`` (a sum over rows) and ``db`` is
        the column sum of ``dout``.

    Returns
    -------
    dx : (..., D_in),  dW : (D_in, D_out),  db : (D_out,)
    """
    x, W = cache
    ### BEGIN SOLUTION 1.1: dx, dW and db of the affine map out = x W + b
    x2 = x.reshape(-1, x.shape[-1])  # (N, D_in)
    d2 = dout.reshape(-1, dout.shape[-1])  # (N, D_out)
    dx = (d2 @ W.T).reshape(x.shape)
    dW = x2.T @ d2
    db = d2.sum(axis=0)
    ### END SOLUTION
    return dx, dW, db


def xavier_uniform(rng: np.random.Generator, fan_in: int, fan_out: int, dtype) -> np.ndarray:
    """Glorot/Xavier uniform initialisation, ``U(-a, a)`` with ``a = sqrt(6 / (fan_in + fan_out))``."""
    a = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-a, a, size=(fan_in, fan_out)).astype(dtype)


class Linear(Module):
    """``out = x W + b`` with ``W`` of shape (D_in, D_out), Xavier-initialised."""

    def __init__(self, d_in: int, d_out: int, rng: np.random.Generator, dtype=np.float64, bias: bool = True):
        super().__init__()
        self.add_param("W", xavier_uniform(rng, d_in, d_out, dtype))
        if bias:
            self.add_param("b", np.zeros(d_out, dtype=dtype))

    def forward(self, x: np.ndarray) -> np.ndarray:
        """x (..., D_in) of the weights' dtype, finite -> (..., D_out)."""
        if needs_checks():  # False inside a model, which has checked its own inputs
            check_float(x, "x", self.params["W"].dtype, last_dim=self.params["W"].shape[0])
        out, self._cache = linear_forward(x, self.params["W"], self.params.get("b"))
        return out

    def backward(self, dout: np.ndarray) -> np.ndarray:
        dx, dW, db = linear_backward(dout, self._pop_cache())
        self.grads["W"] += dW
        if "b" in self.grads:
            self.grads["b"] += db
        return dx
