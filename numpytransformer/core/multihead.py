"""Multi-head attention, every head computed at once in batched array operations.

The pair is the paper's: three projections Q, K, V (one matrix product each), split into
heads, attention, merge, output projection; its backward runs those steps in reverse. The
form the Modules run by default, which fuses the projections into one product with
``[W_q W_k W_v]`` (``[W_k W_v]`` over the memory), is :func:`numpytransformer.core.fast.multihead_attention_forward`;
the KV cache of incremental decoding is :meth:`numpytransformer.nn.modules.MultiHeadAttention.forward`
with ``kv_cache``. Derived in lesson 5 (Multi-head attention).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from .attention import AttentionCache, attention_backward, attention_forward
from .attention_dropout import AttentionDropoutCache, attention_dropout_backward, attention_dropout_forward
from .linear import LinearCache, linear_backward, linear_forward

__all__ = [
    "PARAM_NAMES",
    "split_heads",
    "merge_heads",
    "multihead_attention_forward",
    "multihead_attention_backward",
    "append_positions",
]

PARAM_NAMES = ("W_q", "b_q", "W_k", "b_k", "W_v", "b_v", "W_o", "b_o")


def split_heads(x: np.ndarray, n_heads: int) -> np.ndarray:
    """(B, T, D) -> (B, H, T, D/H): head ``h`` owns the slice ``[h*D/H, (h+1)*D/H)`` of the features.

    Derived in lesson 5 (Multi-head attention), §2.
    """
    B, T, D = x.shape
    return x.reshape(B, T, n_heads, D // n_heads).transpose(0, 2, 1, 3)  # (B, H, T, D/H)


def merge_heads(x: np.ndarray) -> np.ndarray:
    """(B, H, T, D/H) -> (B, T, D): the concatenation of the heads, the inverse of :func:`split_heads`.

    Derived in lesson 5 (Multi-head attention), §2.
    """
    B, H, T, Dh = x.shape
    return x.transpose(0, 2, 1, 3).reshape(B, T, H * Dh)  # (B, T, D)


class MHACache(NamedTuple):
    q_cache: LinearCache
    k_cache: LinearCache
    v_cache: LinearCache
    att: AttentionCache  # an AttentionDropoutCache when the weights were dropped
    out_cache: LinearCache
    n_heads: int
    self_attention: bool  # x_kv was None: K and V read x_q


def multihead_attention_forward(x_q, x_kv, W_q, b_q, W_k, b_k, W_v, b_v, W_o, b_o, n_heads: int,
                                mask: Optional[np.ndarray] = None, dropout_p: float = 0.0,
                                rng: Optional[np.random.Generator] = None, drop_mask: Optional[np.ndarray] = None):
    """Multi-head attention as the paper writes it: three projections, split, attend, merge, project.

    .. math:: Q = X_q W_q + b_q,\\quad K = X_{kv} W_k + b_k,\\quad V = X_{kv} W_v + b_v,\\quad
              \\text{out} = \\text{Concat}_h\\big(\\text{Attention}(Q^h, K^h, V^h)\\big) W_o + b_o

    Parameters
    ----------
    x_q : ndarray, shape (B, T, D)
        Queries come from here.
    x_kv : ndarray, shape (B, S, D), or None
        Keys and values come from here (cross-attention). ``None`` means
        self-attention: keys and values come from ``x_q`` too.
    W_q, W_k, W_v, W_o : ndarray, shape (D, D)
    b_q, b_k, b_v, b_o : ndarray, shape (D,)
    n_heads : int
        H; D must be divisible by H. Head ``h`` uses columns ``[h*D/H, (h+1)*D/H)``
        of W_q, W_k and W_v.
    mask : bool ndarray broadcastable to (B, H, T, S), optional
        True where attention is allowed (see :func:`attention.padding_mask`, :func:`attention.causal_mask`).
    dropout_p : float in [0, 1)
        Dropout on the attention weights (BERT's and GPT-2's ``attn_pdrop``): > 0 runs
        :func:`~numpytransformer.core.attention_dropout.attention_dropout_forward` in place of
        attention, with ``rng`` (or the fixed ``drop_mask`` (B, H, T, S) of a gradient check).
        The caller passes 0 in evaluation.

    Returns
    -------
    out : ndarray, shape (B, T, D)
    cache : MHACache

    Derived in lesson 5 (Multi-head attention), §1-2.
    """
    H = n_heads
    self_attention = x_kv is None
    x_kv = x_q if self_attention else x_kv
    q, q_cache = linear_forward(x_q, W_q, b_q)  # (B, T, D)
    k, k_cache = linear_forward(x_kv, W_k, b_k)  # (B, S, D)
    v, v_cache = linear_forward(x_kv, W_v, b_v)  # (B, S, D)
    q, k, v = split_heads(q, H), split_heads(k, H), split_heads(v, H)  # (B, H, T or S, D/H)
    if dropout_p:
        att, att_cache = attention_dropout_forward(q, k, v, mask, dropout_p, rng, True, drop_mask)  # (B, H, T, D/H)
    else:
        att, att_cache = attention_forward(q, k, v, mask)  # (B, H, T, D/H)
    out, out_cache = linear_forward(merge_heads(att), W_o, b_o)  # (B, T, D)
    return out, MHACache(q_cache, k_cache, v_cache, att_cache, out_cache, H, self_attention)


def multihead_attention_backward(dout: np.ndarray, cache: MHACache):
    """Gradients of :func:`multihead_attention_forward`, the forward's steps in reverse.

    The output projection is a linear layer; the merge of heads (a reshape) is undone by a
    split and the splits by merges; attention is :func:`attention.attention_backward` (or
    :func:`~numpytransformer.core.attention_dropout.attention_dropout_backward` if the forward dropped weights); each
    projection is a linear layer. K and V read ``x_kv``, so their input gradients add; in
    self-attention Q reads the same ``x``, so all three add. Derived in lesson 5
    (Multi-head attention), §5.

    Returns
    -------
    dx_q : (B, T, D)
    dx_kv : (B, S, D), or None for self-attention (its gradient is already in ``dx_q``)
    dW_q, db_q, dW_k, db_k, dW_v, db_v, dW_o, db_o
    """
    q_cache, k_cache, v_cache, att_cache, out_cache, H, self_attention = cache
    dmerged, dW_o, db_o = linear_backward(dout, out_cache)
    attend_backward = attention_dropout_backward if isinstance(att_cache, AttentionDropoutCache) else attention_backward
    dq, dk, dv = attend_backward(split_heads(dmerged, H), att_cache)  # 3 x (B, H, T or S, D/H)
    dx_q, dW_q, db_q = linear_backward(merge_heads(dq), q_cache)
    dx_k, dW_k, db_k = linear_backward(merge_heads(dk), k_cache)
    dx_v, dW_v, db_v = linear_backward(merge_heads(dv), v_cache)
    dx_kv = dx_k + dx_v
    if self_attention:
        dx_q, dx_kv = dx_q + dx_kv, None
    return dx_q, dx_kv, dW_q, db_q, dW_k, db_k, dW_v, db_v, dW_o, db_o


def append_positions(cached: np.ndarray, new: np.ndarray) -> np.ndarray:
    """The KV cache grown by the new positions: (B, H, T, D/H) and (B, H, n, D/H) -> (B, H, T + n, D/H).

    Every step concatenates, copying the cache; the fast form (``fast.append_positions``)
    writes into a buffer with room to grow instead.
    """
    return np.concatenate([cached, new], axis=2)  # (B, H, T + n, D/H)
