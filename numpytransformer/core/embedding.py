"""Token embedding: an index lookup whose backward is a scatter-add. Derived in lesson 3 (Token embeddings), §1-4.

A region embedding adds the embeddings of each token's neighbours, one table for each offset."""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np


__all__ = ["embedding_forward", "embedding_backward", "neighbour_ids", "region_embedding_forward",
           "region_embedding_backward",]


class EmbeddingCache(NamedTuple):
    ids: np.ndarray
    vocab_size: int
    scale: float
    pad_id: Optional[int]


def embedding_forward(ids: np.ndarray, W: np.ndarray, scale: float = 1.0, pad_id: Optional[int] = None):
    """Look up rows of the table ``W``.

    .. math:: \\text{out}_{b,t} = s \\cdot W_{\\text{ids}_{b,t}}

    The paper multiplies embeddings by :math:`s = \\sqrt{d_{model}}` without giving a
    reason; lesson 3 §7 shows that it puts them on the scale of the positional encoding
    added to them. Derived in lesson 3 (Token embeddings and positional encoding), §1 and §7.

    Parameters
    ----------
    ids : int ndarray, shape (B, T)
        Assumed in ``[0, V)``: NumPy would read id ``-1`` as the last row, silently
        (:class:`Embedding` checks).
    W : ndarray, shape (V, D)
    scale : float
    pad_id : int or None
        The pad row; it receives no gradient.

    Returns
    -------
    out : ndarray, shape (B, T, D)
    cache : EmbeddingCache
    """
    out = W[ids] * scale  # (B, T, D)
    return out, EmbeddingCache(ids, W.shape[0], scale, pad_id)


def embedding_backward(dout: np.ndarray, cache: EmbeddingCache) -> np.ndarray:
    """dW of the lookup ``out = s * W[ids]``.

    Scatter-add: row ``v`` of ``dW`` is ``s`` times the sum of ``dout`` at every position
    holding ``v``. The lookup is a one-hot matrix product ``out = s * onehot(ids) W``, whose
    gradient ``s * onehot(ids)^T dout`` is exactly this sum, computed without building the
    one-hot matrix.

    The pad row's gradient is set to zero by choice (the pad vector
    stays fixed), so a finite-difference check agrees there only when ``dout`` is zero
    at pad positions, as it is in a model whose loss ignores padding. Derived in lesson 3
    (Token embeddings and positional encoding), §2-4.

    Returns
    -------
    dW : ndarray, shape (V, D)
    """
    ids, V, scale, pad_id = cache
    D = dout.shape[-1]
    dW = np.zeros((V, D), dtype=dout.dtype)
    np.add.at(dW, ids.reshape(-1), scale * dout.reshape(-1, D))  # dW[v] += s * dout at every position holding v
    if pad_id is not None:
        dW[pad_id] = 0
    return dW


def neighbour_ids(ids: np.ndarray, offset: int, pad_id: int) -> np.ndarray:
    """``ids`` (B, T) moved along T so that position t holds ``ids[:, t + offset]``; ``pad_id``
    where ``t + offset`` falls outside the sequence."""
    out = np.full_like(ids, pad_id)
    if offset < 0:
        out[:, -offset:] = ids[:, :offset]
    elif offset > 0:
        out[:, :-offset] = ids[:, offset:]
    else:
        out[...] = ids
    return out


def region_embedding_forward(ids: np.ndarray, W: np.ndarray, scale: float = 1.0, pad_id: int = 0):
    """The neighbours' part of a region embedding: what each token's vector adds for the tokens
    around it, one table for each offset.

    .. math:: \\text{out}_{b,t} = s \\sum_{o \\in \\{-k..-1,\\,1..k\\}} W_o[\\text{ids}_{b,t+o}]

    With the token's own embedding added, a position's input vector is a linear map of the
    one-hot words of the window ``t-k .. t+k``: a convolution over one-hot words, Johnson and
    Zhang's (2015) region embedding. The layers above see short phrases ("not good") as such, not
    only as single words that attention must pair up. A neighbour outside the sequence reads the
    ``pad_id`` row of its table, as a pad does: unlike the token embedding's, that row is learned
    (it starts at zero), a vector that marks the start or the end of the text. So right padding
    leaves real positions as they are, and what pad positions receive is masked by attention and
    pooling.

    Parameters
    ----------
    ids : int ndarray, shape (B, T)
    W : ndarray, shape (2k, V, D)
        The tables of offsets ``-k .. -1, 1 .. k``, in that order.

    Returns
    -------
    out : ndarray, shape (B, T, D)
    cache : list of EmbeddingCache, one for each offset
    """
    k = W.shape[0] // 2
    offsets = [o for o in range(-k, k + 1) if o != 0]
    out, cache = 0.0, []
    for table, o in zip(W, offsets):
        part, c = embedding_forward(neighbour_ids(ids, o, pad_id), table, scale, None)
        out = out + part
        cache.append(c)
    return out, cache


def region_embedding_backward(dout: np.ndarray, cache) -> np.ndarray:
    """dW (2k, V, D) of :func:`region_embedding_forward`: each offset's table gets the scatter-add
    of ``dout`` into the rows of the ids that stood at that offset (:func:`embedding_backward`)."""
    return np.stack([embedding_backward(dout, c) for c in cache])
