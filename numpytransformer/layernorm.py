"""Layer normalisation (Ba et al., 2016) over the last axis."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .module import Module
from .validation import check_float, check_real, needs_checks

__all__ = ["layernorm_forward", "layernorm_backward", "LayerNorm"]


class LayerNormCache(NamedTuple):
    xhat: np.ndarray  # the normalised input
    rstd: np.ndarray  # 1 / sqrt(var + eps), shape (..., 1)
    gamma: np.ndarray


def layernorm_forward(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = 1e-5):
    """Normalise each feature vector, then scale and shift.

    .. math:: \\hat x = \\frac{x - \\mu}{\\sqrt{\\sigma^2 + \\epsilon}},\\quad \\text{out} = \\gamma \\odot \\hat x + \\beta

    with :math:`\\mu, \\sigma^2` the mean and (biased) variance over the last axis,
    as in ``torch.nn.LayerNorm``.

    Parameters
    ----------
    x : ndarray, shape (..., D)
        Assumed finite and of gamma's dtype (:class:`LayerNorm` checks).
    gamma, beta : ndarray, shape (D,)
    eps : float
        Assumed finite and > 0: with 0 a constant row divides by zero, and an infinite
        eps makes every output ``beta``.

    Returns
    -------
    out : ndarray, shape (..., D)
    cache : LayerNormCache
    """
    # The two row means as einsum contractions, the same as x.mean(axis=-1, keepdims=True)
    # and np.mean(xc * xc, ...): no (..., D) temporary for xc * xc and none of np.mean's
    # Python overhead, which counts since a step runs a LayerNorm on small arrays 12-15 times
    # (0.7x the time at d64, 0.8x at d256).
    dt = x.dtype.type
    inv_d = dt(1.0 / x.shape[-1])
    mu = np.einsum("...d->...", x)[..., None] * inv_d  # (..., 1)
    xc = x - mu
    var = np.einsum("...d,...d->...", xc, xc)[..., None] * inv_d  # biased variance, (..., 1)
    rstd = 1.0 / np.sqrt(var + dt(eps))
    xhat = xc
    xhat *= rstd
    out = xhat * gamma
    out += beta
    return out, LayerNormCache(xhat, rstd, gamma)


def layernorm_backward(dout: np.ndarray, cache: LayerNormCache):
    """Gradients of LayerNorm, :math:`y = \\gamma \\odot \\hat x + \\beta` (lesson 6 §2).

    .. solution-only::

        :math:`d\\beta = \\sum dout`, :math:`d\\gamma = \\sum dout \\odot \\hat x` (sums over
        every row). With :math:`g = dout \\odot \\gamma`, differentiating :math:`\\hat x` through
        the mean and the variance gives

        .. math:: dx = \\frac{1}{\\sqrt{\\sigma^2 + \\epsilon}}\\left(g - \\overline{g} - \\hat x\\, \\overline{g \\odot \\hat x}\\right)

        where the bars are means over the last axis.

    Returns
    -------
    dx : (..., D),  dgamma : (D,),  dbeta : (D,)
    """
    xhat, rstd, gamma = cache
    D = xhat.shape[-1]
    ### BEGIN SOLUTION 6.1: dx, dgamma and dbeta of LayerNorm
    dbeta = dout.reshape(-1, D).sum(axis=0)
    dgamma = (dout * xhat).reshape(-1, D).sum(axis=0)
    g = dout * gamma
    dx = g - g.mean(axis=-1, keepdims=True)
    dx -= xhat * np.mean(g * xhat, axis=-1, keepdims=True)
    dx *= rstd
    ### END SOLUTION
    return dx, dgamma, dbeta


class LayerNorm(Module):
    """LayerNorm with ``gamma`` (ones) and ``beta`` (zeros) of shape (D,)."""

    def __init__(self, d_model: int, eps: float = 1e-5, dtype=np.float64):
        super().__init__()
        self.eps = check_real(eps, "eps", 0.0, low_open=True)
        self.add_param("gamma", np.ones(d_model, dtype=dtype))
        self.add_param("beta", np.zeros(d_model, dtype=dtype))

    def forward(self, x: np.ndarray) -> np.ndarray:
        """x (..., D) of the parameters' dtype, finite -> (..., D)."""
        if needs_checks():  # False inside a model, which has checked its own inputs
            check_float(x, "x", self.params["gamma"].dtype, last_dim=self.params["gamma"].shape[0])
        out, self._cache = layernorm_forward(x, self.params["gamma"], self.params["beta"], self.eps)
        return out

    def backward(self, dout: np.ndarray) -> np.ndarray:
        dx, dgamma, dbeta = layernorm_backward(dout, self._pop_cache())
        self.grads["gamma"] += dgamma
        self.grads["beta"] += dbeta
        return dx
