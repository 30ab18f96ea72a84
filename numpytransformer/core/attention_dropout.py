"""Attention with dropout on its weights, as BERT and GPT-2 train it.

The weights of scaled dot-product attention (lesson 4) go through inverted dropout (lesson 6,
§4) before they average the values, so a query sometimes does not see a key at all:

.. math:: \\text{out} = \\text{Dropout}\\Big(\\text{softmax}\\big(\\tfrac{QK^T}{\\sqrt{d_k}} + M\\big)\\Big) V

In evaluation dropout is the identity and this is :func:`~numpytransformer.core.attention.attention_forward`.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from .attention import MASK_VALUE
from .dropout import DropoutCache, dropout_backward, dropout_forward
from .softmax import softmax

__all__ = ["attention_dropout_forward", "attention_dropout_backward"]


class AttentionDropoutCache(NamedTuple):
    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    weights: np.ndarray  # P, the softmax before dropout, (..., T, S)
    dropped: np.ndarray  # P after dropout, what multiplied V
    drop: DropoutCache
    scale: float


def attention_dropout_forward(q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: Optional[np.ndarray] = None,
                              p: float = 0.0, rng: Optional[np.random.Generator] = None, training: bool = True,
                              drop_mask: Optional[np.ndarray] = None):
    """Scaled dot-product attention whose weights are dropped with probability ``p``.

    Shapes and ``mask`` as :func:`~numpytransformer.core.attention.attention_forward`; ``p``,
    ``rng``, ``training`` and ``drop_mask`` (a fixed mask, for gradient checks) as
    :func:`~numpytransformer.core.dropout.dropout_forward`. Lesson 4 (Scaled dot-product
    attention), §1-4, then lesson 6, §4 (Inverted dropout) on the weights.

    Returns
    -------
    out : ndarray, shape (..., T, d_v)
    cache : AttentionDropoutCache
    """
    scale = q.shape[-1] ** -0.5  # 1 / sqrt(d_k)
    scores = (q @ k.swapaxes(-1, -2)) * scale  # (..., T, S)
    if mask is not None:
        scores = np.where(mask, scores, MASK_VALUE)
    weights = softmax(scores)  # (..., T, S)
    if mask is not None:
        weights = weights * mask.any(axis=-1, keepdims=True)  # a fully masked row: no weight at all
    dropped, drop = dropout_forward(weights, p, rng, training, drop_mask)
    out = dropped @ v  # (..., T, d_v)
    return out, AttentionDropoutCache(q, k, v, weights, dropped, drop, scale)


def attention_dropout_backward(dout: np.ndarray, cache: AttentionDropoutCache):
    """dq, dk, dv of :func:`attention_dropout_forward`.

    ``out = D V`` with ``D = P * m`` (the kept weights, scaled): ``dV = D^T dout`` and
    ``dD = dout V^T``, so ``dP = dD * m`` (dropout's backward); from there it is attention's
    backward (lesson 4, §6): the softmax Jacobian ``dS = P (dP - rowsum(dP P))``, times the scale,
    then ``dQ = dS K`` and ``dK = dS^T Q``.
    """
    q, k, v, P, dropped, drop, scale = cache
    dv = dropped.swapaxes(-1, -2) @ dout  # (..., S, d_v)
    dP = dropout_backward(dout @ v.swapaxes(-1, -2), drop)  # (..., T, S)
    dS = P * (dP - (dP * P).sum(-1, keepdims=True)) * scale
    dq = dS @ k  # (..., T, d_k)
    dk = dS.swapaxes(-1, -2) @ q  # (..., S, d_k)
    return dq, dk, dv
