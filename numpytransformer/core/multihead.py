"""Multi-head attention, every head computed at once in batched array operations.

Two forms of the same function sit side by side: the plain one of the paper
(:func:`plain_multihead_attention_forward`: three projections Q, K, V, one matrix
product each) and the fused one the library runs (:func:`multihead_attention_forward`:
one product with ``[W_q W_k W_v]``, or ``[W_k W_v]`` over the memory). Same parameters,
same outputs and gradients up to rounding. Derived in lesson 5 (Multi-head attention).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from .attention import AttentionCache, attention_backward, attention_forward
from .linear import LinearCache, linear_backward, linear_forward

__all__ = [
    "PARAM_NAMES",
    "split_heads",
    "merge_heads",
    "plain_multihead_attention_forward",
    "plain_multihead_attention_backward",
    "multihead_attention_forward",
    "multihead_attention_backward",
]

PARAM_NAMES = ("W_q", "b_q", "W_k", "b_k", "W_v", "b_v", "W_o", "b_o")


class MHACache(NamedTuple):
    in_cache: LinearCache  # the fused projection: QKV (self) or KV (cross)
    q_cache: Optional[LinearCache]  # the separate Q projection (cross-attention only)
    att: AttentionCache
    out_cache: LinearCache
    n_heads: int


def split_heads(x: np.ndarray, n_heads: int) -> np.ndarray:
    """(B, T, D) -> (B, H, T, D/H): head ``h`` owns the slice ``[h*D/H, (h+1)*D/H)`` of the features.

    Derived in lesson 5 (Multi-head attention), §2.
    """
    B, T, D = x.shape
    ### BEGIN SOLUTION 5.1: split_heads and merge_heads, between (B, T, D) and (B, H, T, D/H)
    return x.reshape(B, T, n_heads, D // n_heads).transpose(0, 2, 1, 3)  # (B, H, T, D/H)
    ### END SOLUTION


def merge_heads(x: np.ndarray) -> np.ndarray:
    """(B, H, T, D/H) -> (B, T, D): the concatenation of the heads, the inverse of :func:`split_heads`.

    Derived in lesson 5 (Multi-head attention), §2.
    """
    B, H, T, Dh = x.shape
    ### BEGIN SOLUTION 5.1: split_heads and merge_heads, between (B, T, D) and (B, H, T, D/H)
    return x.transpose(0, 2, 1, 3).reshape(B, T, H * Dh)  # (B, T, D)
    ### END SOLUTION


class PlainMHACache(NamedTuple):
    q_cache: LinearCache
    k_cache: LinearCache
    v_cache: LinearCache
    att: AttentionCache
    out_cache: LinearCache
    n_heads: int
    self_attention: bool  # x_kv was None: K and V read x_q


def plain_multihead_attention_forward(x_q, x_kv, W_q, b_q, W_k, b_k, W_v, b_v, W_o, b_o, n_heads: int,
                                      mask: Optional[np.ndarray] = None):
    """Multi-head attention as the paper writes it: three projections, split, attend, merge, project.

    .. math:: Q = X_q W_q + b_q,\\quad K = X_{kv} W_k + b_k,\\quad V = X_{kv} W_v + b_v,\\quad
              \\text{out} = \\text{Concat}_h\\big(\\text{Attention}(Q^h, K^h, V^h)\\big) W_o + b_o

    Takes and returns what :func:`multihead_attention_forward` does (``x_kv=None`` is
    self-attention); only the cache differs. Derived in lesson 5 (Multi-head attention), §1.
    """
    H = n_heads
    self_attention = x_kv is None
    x_kv = x_q if self_attention else x_kv
    q, q_cache = linear_forward(x_q, W_q, b_q)  # (B, T, D)
    k, k_cache = linear_forward(x_kv, W_k, b_k)  # (B, S, D)
    v, v_cache = linear_forward(x_kv, W_v, b_v)  # (B, S, D)
    q, k, v = split_heads(q, H), split_heads(k, H), split_heads(v, H)  # (B, H, T or S, D/H)
    att, att_cache = attention_forward(q, k, v, mask)  # (B, H, T, D/H)
    out, out_cache = linear_forward(merge_heads(att), W_o, b_o)  # (B, T, D)
    return out, PlainMHACache(q_cache, k_cache, v_cache, att_cache, out_cache, H, self_attention)


def plain_multihead_attention_backward(dout: np.ndarray, cache: PlainMHACache):
    """Gradients of :func:`plain_multihead_attention_forward`, the forward's steps in reverse.

    The output projection is a linear layer; the merge of heads is undone by a split and
    the splits by merges; each projection is a linear layer. K and V read ``x_kv``, so
    their input gradients add; in self-attention Q reads the same ``x``, so all three add.
    Derived in lesson 5 (Multi-head attention), §5.

    Returns
    -------
    dx_q, dx_kv (None for self-attention), dW_q, db_q, dW_k, db_k, dW_v, db_v, dW_o, db_o
    """
    q_cache, k_cache, v_cache, att_cache, out_cache, H, self_attention = cache
    ### BEGIN SOLUTION 5.2: dx_q, dx_kv and the 8 parameter gradients, in reverse order of the forward
    dmerged, dW_o, db_o = linear_backward(dout, out_cache)
    dq, dk, dv = attention_backward(split_heads(dmerged, H), att_cache)  # 3 x (B, H, T or S, D/H)
    dx_q, dW_q, db_q = linear_backward(merge_heads(dq), q_cache)
    dx_k, dW_k, db_k = linear_backward(merge_heads(dk), k_cache)
    dx_v, dW_v, db_v = linear_backward(merge_heads(dv), v_cache)
    dx_kv = dx_k + dx_v
    if self_attention:
        dx_q, dx_kv = dx_q + dx_kv, None
    ### END SOLUTION
    return dx_q, dx_kv, dW_q, db_q, dW_k, db_k, dW_v, db_v, dW_o, db_o


def multihead_attention_forward(x_q, x_kv, W_q, b_q, W_k, b_k, W_v, b_v, W_o, b_o, n_heads: int,
                                mask: Optional[np.ndarray] = None):
    """Multi-head attention, with the projections fused into one matrix product.

    .. math:: \\text{MHA}(X_q, X_{kv}) = \\text{Concat}_h\\big(\\text{Attention}(X_q W_q^h, X_{kv} W_k^h, X_{kv} W_v^h)\\big) W_o

    Parameters
    ----------
    x_q : ndarray, shape (B, T, D)
        Queries come from here.
    x_kv : ndarray, shape (B, S, D), or None
        Keys and values come from here (cross-attention). ``None`` means
        self-attention (``x_kv = x_q``), computed with one fused QKV matrix product.
    W_q, W_k, W_v, W_o : ndarray, shape (D, D)
    b_q, b_k, b_v, b_o : ndarray, shape (D,)
    n_heads : int
        H; D must be divisible by H. Head ``h`` uses columns ``[h*D/H, (h+1)*D/H)``
        of W_q, W_k and W_v.
    mask : bool ndarray broadcastable to (B, H, T, S), optional
        True where attention is allowed (see :func:`attention.padding_mask`, :func:`attention.causal_mask`).

    Returns
    -------
    out : ndarray, shape (B, T, D)
    cache : MHACache

    Derived in lesson 5 (Multi-head attention), §1 and §3 (the fused projection).
    """
    H = n_heads
    if x_kv is None:
        # One (D, 3D) product instead of three (D, D) ones: the same arithmetic, one BLAS call.
        W = np.concatenate([W_q, W_k, W_v], axis=1)  # (D, 3D)
        b = np.concatenate([b_q, b_k, b_v])
        qkv, in_cache = linear_forward(x_q, W, b)  # (B, T, 3D)
        q, k, v = (split_heads(a, H) for a in np.split(qkv, 3, axis=-1))  # 3 x (B, H, T, D/H)
        q_cache = None
    else:
        q_lin, q_cache = linear_forward(x_q, W_q, b_q)  # (B, T, D)
        q = split_heads(q_lin, H)  # (B, H, T, D/H)
        W = np.concatenate([W_k, W_v], axis=1)  # (D, 2D)
        b = np.concatenate([b_k, b_v])
        kv, in_cache = linear_forward(x_kv, W, b)  # (B, S, 2D)
        k, v = (split_heads(a, H) for a in np.split(kv, 2, axis=-1))  # 2 x (B, H, S, D/H)
    att, att_cache = attention_forward(q, k, v, mask)  # (B, H, T, D/H)
    out, out_cache = linear_forward(merge_heads(att), W_o, b_o)  # (B, T, D)
    return out, MHACache(in_cache, q_cache, att_cache, out_cache, H)


def multihead_attention_backward(dout: np.ndarray, cache: MHACache):
    """Gradients of :func:`multihead_attention_forward`.

    Run the forward's steps in reverse: the output projection (a linear layer), the
    merge of heads (a reshape, undone by splitting), attention
    (:func:`attention.attention_backward`), the split of heads (undone by merging) and
    the input projections (linear layers). In self-attention the three projections
    read the same ``x``, so their input gradients add up, which the fused product does.
    Derived in lesson 5 (Multi-head attention), §5.

    Returns
    -------
    dx_q : (B, T, D)
    dx_kv : (B, S, D), or None for self-attention (its gradient is already in ``dx_q``)
    dW_q, db_q, dW_k, db_k, dW_v, db_v, dW_o, db_o
    """
    in_cache, q_cache, att_cache, out_cache, H = cache
    ### BEGIN SOLUTION 5.2: dx_q, dx_kv and the 8 parameter gradients, in reverse order of the forward
    dmerged, dW_o, db_o = linear_backward(dout, out_cache)
    datt = split_heads(dmerged, H)  # (B, H, T, D/H)
    dq, dk, dv = attention_backward(datt, att_cache)  # 3 x (B, H, T or S, D/H)
    if q_cache is None:
        dqkv = np.concatenate([merge_heads(dq), merge_heads(dk), merge_heads(dv)], axis=-1)  # (B, T, 3D)
        dx_q, dW, db = linear_backward(dqkv, in_cache)
        dx_kv = None
        dW_q, dW_k, dW_v = np.split(dW, 3, axis=1)
        db_q, db_k, db_v = np.split(db, 3)
    else:
        dx_q, dW_q, db_q = linear_backward(merge_heads(dq), q_cache)
        dkv = np.concatenate([merge_heads(dk), merge_heads(dv)], axis=-1)  # (B, S, 2D)
        dx_kv, dW, db = linear_backward(dkv, in_cache)
        dW_k, dW_v = np.split(dW, 2, axis=1)
        db_k, db_v = np.split(db, 2)
    ### END SOLUTION
    return dx_q, dx_kv, dW_q, db_q, dW_k, db_k, dW_v, db_v, dW_o, db_o


def append_positions(cached: np.ndarray, new: np.ndarray, room: int = 0) -> np.ndarray:
    """The KV cache grown by the new positions: (B, H, T, D/H) and (B, H, n, D/H) -> (B, H, T + n, D/H).

    ``room`` (the most positions the cache will hold) is for the fast form
    (``fast.append_positions``), which writes into a buffer with room to grow instead
    of copying the cache at every step; here every step concatenates.
    """
    return np.concatenate([cached, new], axis=2)
