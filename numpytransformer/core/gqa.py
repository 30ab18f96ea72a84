"""Grouped-query attention (Ainslie et al., 2023): query heads in groups that share keys and values.

A sibling of lesson 5 (Multi-head attention)'s pair. Multi-head attention gives each of its H
heads its own keys and values; in incremental decoding those are what the KV cache holds, for
every position of every layer. GQA keeps H query heads but only ``H_kv`` key and value heads,
each shared by a group of ``G = H / H_kv`` consecutive query heads: ``W_k`` and ``W_v`` shrink to
(D, H_kv * d_head), and so does the cache. ``H_kv = H`` is multi-head attention; ``H_kv = 1`` is
multi-query attention (Shazeer, 2019). LLaMA 2 and Mistral attend this way.

The pair also takes the positions that modern decoders put inside attention, not on the input:
rotary queries and keys (:mod:`~numpytransformer.core.rotary`) or ALiBi's bias
(:mod:`~numpytransformer.core.alibi`).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from .alibi import alibi_attention_backward, alibi_attention_forward, alibi_slopes
from .attention import AttentionCache, attention_backward, attention_forward
from .linear import LinearCache, linear_backward, linear_forward
from .multihead import merge_heads, split_heads
from .rotary import RotaryCache, rotary_backward, rotary_forward

__all__ = ["repeat_kv", "gqa_forward", "gqa_backward"]


def repeat_kv(x: np.ndarray, group: int) -> np.ndarray:
    """(B, H_kv, S, d) -> (B, H_kv * group, S, d): the key (or value) head of every query head.

    The query heads come in ``H_kv`` groups of ``group`` consecutive heads (heads ``0 .. group-1``
    form the first), and all the heads of a group read the same key and value head: the result's
    head axis lists, for each of the ``H_kv * group`` query heads in order, the head of its group.
    """
    ### BEGIN SOLUTION 5.1: each key or value head repeated for the group of query heads that reads it
    return np.repeat(x, group, axis=1)  # (B, H, S, d)
    ### END SOLUTION


class GQACache(NamedTuple):
    q_cache: LinearCache
    k_cache: LinearCache
    v_cache: LinearCache
    rotary: Optional[RotaryCache]  # the rotation of q and k, or None
    att: AttentionCache
    out_cache: LinearCache
    n_heads: int
    n_kv_heads: int
    alibi: bool


def gqa_forward(x, W_q, b_q, W_k, b_k, W_v, b_v, W_o, b_o, n_heads: int, n_kv_heads: int,
                mask: Optional[np.ndarray] = None, positions: Optional[str] = None):
    """Grouped-query self-attention: H query heads, H_kv shared key and value heads.

    .. math:: Q = X W_q + b_q,\\quad K = X W_k + b_k,\\quad V = X W_v + b_v,\\quad
              \\text{out} = \\text{Concat}_h\\big(\\text{Attention}(Q^h, K^{g(h)}, V^{g(h)})\\big) W_o + b_o

    with :math:`g(h)` the group of query head :math:`h`, the groups being G consecutive heads.

    Sibling of lesson 5 (Multi-head attention), §1-2's pair, which it equals when
    ``n_kv_heads == n_heads``.

    Parameters
    ----------
    x : ndarray, shape (B, T, D)
    W_q, W_o : ndarray, shape (D, D)
    W_k, W_v : ndarray, shape (D, H_kv * D/H)
    b_q, b_o : ndarray, shape (D,);  b_k, b_v : ndarray, shape (H_kv * D/H,)
    n_heads, n_kv_heads : int
        H and H_kv; H divisible by H_kv, D by H.
    mask : bool ndarray broadcastable to (B, H, T, T), optional
        True where attention is allowed.
    positions : None, "rotary" or "alibi"
        Where the model puts positions inside attention: rotate q and k by their positions
        ``0 .. T-1`` (:func:`~numpytransformer.core.rotary.rotary_forward`, an even ``D/H``), or bias
        the scores (:func:`~numpytransformer.core.alibi.alibi_attention_forward`); None: nothing
        (the positions were added to the input).

    Returns
    -------
    out : ndarray, shape (B, T, D)
    cache : GQACache
    """
    H, H_kv = n_heads, n_kv_heads
    q, q_cache = linear_forward(x, W_q, b_q)  # (B, T, D)
    k, k_cache = linear_forward(x, W_k, b_k)  # (B, T, H_kv * D/H)
    v, v_cache = linear_forward(x, W_v, b_v)  # (B, T, H_kv * D/H)
    q, k, v = split_heads(q, H), split_heads(k, H_kv), split_heads(v, H_kv)  # (B, H or H_kv, T, D/H)
    rot = None
    if positions == "rotary":
        q, rot = rotary_forward(q, np.arange(x.shape[1]))
        k, _ = rotary_forward(k, np.arange(x.shape[1]))  # the same angles: one cache serves both
    k, v = repeat_kv(k, H // H_kv), repeat_kv(v, H // H_kv)  # (B, H, T, D/H)
    if positions == "alibi":
        att, att_cache = alibi_attention_forward(q, k, v, alibi_slopes(H), mask)  # (B, H, T, D/H)
    else:
        att, att_cache = attention_forward(q, k, v, mask)  # (B, H, T, D/H)
    out, out_cache = linear_forward(merge_heads(att), W_o, b_o)  # (B, T, D)
    return out, GQACache(q_cache, k_cache, v_cache, rot, att_cache, out_cache, H, H_kv, positions == "alibi")


def gqa_backward(dout: np.ndarray, cache: GQACache):
    """Gradients of :func:`gqa_forward`, its steps in reverse.

    Sibling of lesson 5 (Multi-head attention), §5: the forward's steps are the multi-head pair's,
    with ``repeat_kv`` between the projections and the attention, and the optional rotation or bias.

    .. solution-only::

        As :func:`~numpytransformer.core.multihead.multihead_attention_backward`, with one step
        more: a key or value head feeds the G query heads of its group (``repeat_kv``), so its
        gradient is the sum of theirs, ``dK^g = \\sum_{h \\in g} dK^h``. A rotation's gradient is
        the inverse rotation; ALiBi's bias is a constant. Q, K and V all read ``x``: their input
        gradients add.

    Returns
    -------
    dx : (B, T, D)
    dW_q, db_q, dW_k, db_k, dW_v, db_v, dW_o, db_o
    """
    q_cache, k_cache, v_cache, rot, att_cache, out_cache, H, H_kv, alibi = cache
    ### BEGIN SOLUTION 5.2: dx and the 8 parameter gradients of grouped-query attention
    dmerged, dW_o, db_o = linear_backward(dout, out_cache)
    attention_back = alibi_attention_backward if alibi else attention_backward
    dq, dk, dv = attention_back(split_heads(dmerged, H), att_cache)  # 3 x (B, H, T, D/H)
    B, _, T, Dh = dk.shape
    dk = dk.reshape(B, H_kv, H // H_kv, T, Dh).sum(axis=2)  # (B, H_kv, T, D/H): each group's sum
    dv = dv.reshape(B, H_kv, H // H_kv, T, Dh).sum(axis=2)
    if rot is not None:
        dq, dk = rotary_backward(dq, rot), rotary_backward(dk, rot)
    dx_q, dW_q, db_q = linear_backward(merge_heads(dq), q_cache)
    dx_k, dW_k, db_k = linear_backward(merge_heads(dk), k_cache)
    dx_v, dW_v, db_v = linear_backward(merge_heads(dv), v_cache)
    dx = dx_q + dx_k + dx_v
    ### END SOLUTION
    return dx, dW_q, db_q, dW_k, db_k, dW_v, db_v, dW_o, db_o
