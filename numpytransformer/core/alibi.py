"""ALiBi, attention with linear biases (Press et al., 2022): positions as a penalty on distance.

A sibling of lesson 4 (Scaled dot-product attention and masks), §3's mask, which is also a
matrix added to the scores. ALiBi adds, in head ``h``, ``-m_h (i - j)`` to the score of query
``i`` and key ``j``: the farther back a key, the lower its score, each head with its own slope
``m_h``, from steep (heads that look nearby) to shallow (heads that look far). Nothing is added
to the token embeddings, and as the bias depends on distance only, a model can read sequences
longer than those it was trained on. Used causally, as in a language model (keys ``j <= i``).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from .attention import MASK_VALUE, AttentionCache, attention_backward
from .softmax import softmax

__all__ = ["alibi_slopes", "alibi_attention_forward", "alibi_attention_backward"]


def alibi_slopes(n_heads: int) -> np.ndarray:
    """The slopes ``m_h = 2^(-8h/H)`` for ``h = 1 .. H``, shape (H,): a geometric sequence from
    ``2^(-8/H)`` down to ``2^-8``."""
    ### BEGIN SOLUTION 4.2: the slopes m_h = 2^(-8h/H) of the heads h = 1 .. H, in float64
    h = np.arange(1, n_heads + 1, dtype=np.float64)
    return 2.0 ** (-8.0 * h / n_heads)
    ### END SOLUTION


def alibi_attention_forward(q: np.ndarray, k: np.ndarray, v: np.ndarray, slopes: np.ndarray,
                            mask: Optional[np.ndarray] = None, offset: int = 0):
    """Scaled dot-product attention with ALiBi's bias on the scores.

    .. math:: \\text{out} = \\text{softmax}\\left(\\frac{QK^T}{\\sqrt{d_k}} - m_h\\,(i - j) + M\\right) V

    Sibling of lesson 4 (Scaled dot-product attention and masks), §1-3's attention.

    Parameters
    ----------
    q : ndarray, shape (B, H, T, d_k)
    k : ndarray, shape (B, H, S, d_k)
    v : ndarray, shape (B, H, S, d_v)
    slopes : ndarray, shape (H,)
        ``m_h`` of each head (:func:`alibi_slopes`).
    mask : bool ndarray broadcastable to (B, H, T, S), optional
        True where query ``i`` may attend to key ``j``; causal in a language model.
    offset : int
        The position of the first query: queries are at ``offset .. offset+T-1`` and keys at
        ``0 .. S-1`` (incremental decoding, where the keys of earlier positions are cached).

    Returns
    -------
    out : ndarray, shape (B, H, T, d_v)
    cache : AttentionCache, as :func:`~numpytransformer.core.attention.attention_forward`'s
    """
    T, S = q.shape[-2], k.shape[-2]
    scale = q.shape[-1] ** -0.5
    ### BEGIN SOLUTION 4.1: the bias -m_h (i - j), added to the scaled scores, then attention's masked softmax
    distance = (offset + np.arange(T))[:, None] - np.arange(S)[None, :]  # (T, S): i - j
    bias = -slopes[:, None, None] * distance  # (H, T, S)
    scores = (q @ k.swapaxes(-1, -2)) * scale + bias.astype(q.dtype)  # (B, H, T, S)
    if mask is not None:
        scores = np.where(mask, scores, MASK_VALUE)
    weights = softmax(scores)  # (B, H, T, S)
    if mask is not None:
        weights = weights * mask.any(axis=-1, keepdims=True)  # a fully masked row: no weight at all
    out = weights @ v  # (B, H, T, d_v)
    ### END SOLUTION
    return out, AttentionCache(q, k, v, weights, mask, scale)


def alibi_attention_backward(dout: np.ndarray, cache: AttentionCache):
    """dq, dk, dv of :func:`alibi_attention_forward`.

    The bias is a constant added to the scores: it has no parameters and its derivative with
    respect to q and k is zero, so the gradients are attention's, through the same softmax
    weights (lesson 4, §6).
    """
    return attention_backward(dout, cache)
