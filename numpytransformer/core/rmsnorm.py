"""RMS normalisation (Zhang and Sennrich, 2019) over the last axis: LayerNorm without the mean.

A sibling of lesson 6 (LayerNorm, the FFN and residuals), §1-2's LayerNorm: it rescales each
vector by its root mean square and keeps no shift, which saves the mean, the centring and
``beta``; LLaMA and T5 normalise this way.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["rmsnorm_forward", "rmsnorm_backward"]


class RMSNormCache(NamedTuple):
    xhat: np.ndarray  # the normalised input x / rms
    rrms: np.ndarray  # 1 / sqrt(mean(x^2) + eps), shape (..., 1)
    gamma: np.ndarray


def rmsnorm_forward(x: np.ndarray, gamma: np.ndarray, eps: float = 1e-5):
    """Divide each feature vector by its root mean square, then scale.

    .. math:: \\hat x = \\frac{x}{\\sqrt{\\tfrac1D \\sum_i x_i^2 + \\epsilon}},\\quad \\text{out} = \\gamma \\odot \\hat x

    as ``torch.nn.RMSNorm(D, eps)``. Sibling of lesson 6 (LayerNorm, the FFN and residuals),
    §1's LayerNorm.

    Parameters
    ----------
    x : ndarray, shape (..., D)
        Assumed finite and of gamma's dtype (:class:`~numpytransformer.nn.modules.RMSNorm` checks).
    gamma : ndarray, shape (D,)
    eps : float
        Assumed finite and > 0: with 0 a zero row divides by zero.

    Returns
    -------
    out : ndarray, shape (..., D)
    cache : RMSNormCache
    """
    ms = (x ** 2).mean(axis=-1, keepdims=True)  # mean square, (..., 1)
    rrms = 1.0 / np.sqrt(ms + eps)  # (..., 1)
    xhat = x * rrms  # (..., D)
    out = gamma * xhat
    return out, RMSNormCache(xhat, rrms, gamma)


def rmsnorm_backward(dout: np.ndarray, cache: RMSNormCache):
    """Gradients of RMSNorm, :math:`y = \\gamma \\odot \\hat x`, :math:`\\hat x = x\\,r`.

    .. solution-only::

        :math:`d\\gamma = \\sum dout \\odot \\hat x` over every row. With :math:`g = dout \\odot \\gamma`
        and :math:`r = (\\overline{x^2} + \\epsilon)^{-1/2}`, :math:`\\partial r / \\partial x_j = -r^3 x_j / D`,
        so :math:`dx = r\\,(g - \\hat x\\, \\overline{g \\odot \\hat x})`: LayerNorm's formula without the
        mean term, as there is no centring.

    Sibling of lesson 6, §2's LayerNorm backward.

    Returns
    -------
    dx : (..., D),  dgamma : (D,)
    """
    xhat, rrms, gamma = cache
    D = xhat.shape[-1]
    ### BEGIN SOLUTION 6.1: dx and dgamma of RMSNorm, gamma times x over the root mean square of its row
    dgamma = (dout * xhat).reshape(-1, D).sum(axis=0)  # (D,): a sum over every row
    g = dout * gamma  # (..., D), the gradient with respect to xhat
    dx = rrms * (g - xhat * (g * xhat).mean(axis=-1, keepdims=True))
    ### END SOLUTION
    return dx, dgamma
