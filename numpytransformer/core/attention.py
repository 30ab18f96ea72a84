"""Scaled dot-product attention with padding and causal masks. Derived in lesson 4 (Scaled dot-product attention)."""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from .softmax import softmax

__all__ = [
    "MASK_VALUE",
    "attention_forward",
    "attention_backward",
    "softmax",  # from softmax.py, kept here for `from numpytransformer.core.attention import softmax`
    "padding_mask",
    "causal_mask",
]

#: Score given to masked positions. A large *finite* negative rather than -inf: after the
#: max is subtracted its exponential is exactly 0 in float32 and float64, and nothing
#: becomes ``-inf - (-inf) = NaN``. A row in which *every* key is masked (a query at a
#: padding position, say) would then be a row of equal scores, i.e. uniform weights
#: over all keys, future ones included; such rows are set to zero weights instead, so
#: their output is 0 and no gradient flows through them.
MASK_VALUE = -1e9


class AttentionCache(NamedTuple):
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    weights: np.ndarray
    mask: Optional[np.ndarray]
    scale: float


def padding_mask(ids: np.ndarray, pad_id: int) -> np.ndarray:
    """Boolean mask (B, 1, 1, S), True where a key position holds a real token.

    It broadcasts over heads and query positions of the (B, H, T, S) scores.
    """
    return (ids != pad_id)[:, None, None, :]


def causal_mask(T: int) -> np.ndarray:
    """Boolean mask (1, 1, T, T), True where key position ``s <= t``: no peeking ahead."""
    return np.tril(np.ones((T, T), dtype=bool))[None, None]


def attention_forward(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: Optional[np.ndarray] = None):
    """Scaled dot-product attention.

    .. math:: \\text{Attention}(Q, K, V) = \\text{softmax}\\left(\\frac{QK^T}{\\sqrt{d_k}} + M\\right) V

    Parameters
    ----------
    q : ndarray, shape (..., T, d_k)
    k : ndarray, shape (..., S, d_k)
    v : ndarray, shape (..., S, d_v)
    mask : bool ndarray broadcastable to (..., T, S), optional
        True where query ``t`` may attend to key ``s``. Masked scores are set to
        :data:`MASK_VALUE`; a fully masked row gets all-zero weights (output 0), never NaN.

    Returns
    -------
    out : ndarray, shape (..., T, d_v)
    cache : AttentionCache (holds the attention weights, shape (..., T, S))

    Derived in lesson 4 (Scaled dot-product attention), §1-4.
    """
    scale = q.shape[-1] ** -0.5  # 1 / sqrt(d_k)
    scores = (q @ k.swapaxes(-1, -2)) * scale  # (..., T, S)
    if mask is not None:
        scores = np.where(mask, scores, MASK_VALUE)  # masked keys: a score whose exp is 0
    weights = softmax(scores)  # (..., T, S), rows sum to 1
    if mask is not None:
        weights = weights * mask.any(axis=-1, keepdims=True)  # a fully masked row: no weight at all
    out = weights @ v  # (..., T, d_v)
    return out, AttentionCache(q, k, v, weights, mask, scale)


def attention_backward(dout: np.ndarray, cache: AttentionCache):
    """Gradients of attention with respect to q, k and v.

    The forward is :math:`O = PV`, :math:`P = \\text{softmax}(S)`, :math:`S = c\\,QK^T` masked,
    :math:`c = 1/\\sqrt{d_k}`; the cache holds q, k, v, P, the mask and c.

    :math:`dV = P^T dO` and :math:`dP = dO\\,V^T`; the softmax Jacobian gives
    :math:`dS = P \\odot (dP - \\text{rowsum}(dP \\odot P))`, zero at masked positions
    (their scores are constants) and in fully masked rows (where P is 0); finally
    :math:`dQ = c\\,dS\\,K` and :math:`dK = c\\,dS^T Q`.

    Derived in lesson 4 (Scaled dot-product attention), §6.

    Returns
    -------
    dq, dk, dv : ndarrays shaped like q, k, v
    """
    q, k, v, P, mask, scale = cache
    dv = P.swapaxes(-1, -2) @ dout  # (..., S, d_v)
    dP = dout @ v.swapaxes(-1, -2)  # (..., T, S)
    dS = P * (dP - (dP * P).sum(-1, keepdims=True))  # the softmax's Jacobian, row by row
    dS = dS * scale  # the scores were q k^T * scale
    dq = dS @ k  # (..., T, d_k)
    dk = dS.swapaxes(-1, -2) @ q  # (..., S, d_k)
    return dq, dk, dv
