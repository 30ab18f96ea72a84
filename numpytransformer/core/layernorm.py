"""Layer normalisation (Ba et al., 2016) over the last axis. Derived in lesson 6 (LayerNorm), §1-2."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np


__all__ = ["layernorm_forward", "layernorm_backward",]


class LayerNormCache(NamedTuple):
    xhat: np.ndarray  # the normalised input
    rstd: np.ndarray  # 1 / sqrt(var + eps), shape (..., 1)
    gamma: np.ndarray


def layernorm_forward(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float = 1e-5):
    """Normalise each feature vector, then scale and shift.

    .. math:: \\hat x = \\frac{x - \\mu}{\\sqrt{\\sigma^2 + \\epsilon}},\\quad \\text{out} = \\gamma \\odot \\hat x + \\beta

    with :math:`\\mu, \\sigma^2` the mean and (biased) variance over the last axis,
    as in ``torch.nn.LayerNorm``. Derived in lesson 6 (LayerNorm, the FFN and residuals), §1.

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
    mu = x.mean(axis=-1, keepdims=True)  # (..., 1)
    var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)  # biased variance, (..., 1)
    rstd = 1.0 / np.sqrt(var + eps)  # (..., 1)
    xhat = (x - mu) * rstd  # (..., D)
    out = gamma * xhat + beta
    return out, LayerNormCache(xhat, rstd, gamma)


def layernorm_backward(dout: np.ndarray, cache: LayerNormCache):
    """Gradients of LayerNorm, :math:`y = \\gamma \\odot \\hat x + \\beta`.

    :math:`d\\beta = \\sum dout`, :math:`d\\gamma = \\sum dout \\odot \\hat x` (sums over
    every row). With :math:`g = dout \\odot \\gamma`, differentiating :math:`\\hat x` through
    the mean and the variance gives

    .. math:: dx = \\frac{1}{\\sqrt{\\sigma^2 + \\epsilon}}\\left(g - \\overline{g} - \\hat x\\, \\overline{g \\odot \\hat x}\\right)

    where the bars are means over the last axis.

    Derived in lesson 6 (LayerNorm, the FFN and residuals), §2.

    Returns
    -------
    dx : (..., D),  dgamma : (D,),  dbeta : (D,)
    """
    xhat, rstd, gamma = cache
    D = xhat.shape[-1]
    dbeta = dout.reshape(-1, D).sum(axis=0)  # (D,): a sum over every row
    dgamma = (dout * xhat).reshape(-1, D).sum(axis=0)  # (D,)
    g = dout * gamma  # (..., D), the gradient with respect to xhat
    dx = rstd * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    return dx, dgamma, dbeta
