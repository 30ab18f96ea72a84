"""Scaled dot-product attention with padding and causal masks."""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from .softmax import softmax

__all__ = [
    "MASK_VALUE",
    "attention_forward",
    "attention_backward",
    "softmax",  # from softmax.py, kept here for `from numpytransformer.attention import softmax`
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
    """
    ### BEGIN SOLUTION 4.1: scale, the masked softmax weights of q k^T * scale, and out = weights v
    scale = 1.0 / np.sqrt(q.shape[-1])
    scores = q @ k.swapaxes(-1, -2)  # (..., T, S)
    scores *= q.dtype.type(scale)
    if mask is not None:
        np.copyto(scores, q.dtype.type(MASK_VALUE), where=~mask)
    weights = softmax(scores, out=scores)
    if mask is not None:
        has_key = mask.any(axis=-1, keepdims=True)
        if not has_key.all():
            weights *= has_key  # fully masked rows: no weight at all
    out = weights @ v
    ### END SOLUTION
    return out, AttentionCache(q, k, v, weights, mask, scale)


def attention_backward(dout: np.ndarray, cache: AttentionCache):
    """Gradients of attention with respect to q, k and v (lesson 4 §6).

    The forward is :math:`O = PV`, :math:`P = \\text{softmax}(S)`, :math:`S = c\\,QK^T` masked,
    :math:`c = 1/\\sqrt{d_k}`; the cache holds q, k, v, P, the mask and c.

    .. solution-only::

        :math:`dV = P^T dO` and :math:`dP = dO\\,V^T`; the softmax Jacobian gives
        :math:`dS = P \\odot (dP - \\text{rowsum}(dP \\odot P))`, zero at masked positions
        (their scores are constants) and in fully masked rows (where P is 0); finally
        :math:`dQ = c\\,dS\\,K` and :math:`dK = c\\,dS^T Q`.

    Returns
    -------
    dq, dk, dv : ndarrays shaped like q, k, v
    """
    q, k, v, P, mask, scale = cache
    ### BEGIN SOLUTION 4.2: dq, dk and dv of scaled dot-product attention
    dv = P.swapaxes(-1, -2) @ dout  # (..., S, d_v)
    dP = dout @ v.swapaxes(-1, -2)  # (..., T, S)
    dS = dP
    dS -= np.einsum("...ts,...ts->...t", dP, P)[..., None]  # rowsum(dP * P), without the product's array
    dS *= P
    dS *= q.dtype.type(scale)
    dq = dS @ k
    dk = dS.swapaxes(-1, -2) @ q
    ### END SOLUTION
    return dq, dk, dv
