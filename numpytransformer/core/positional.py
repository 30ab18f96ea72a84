"""Positions: the sinusoidal encoding of the paper (Vaswani et al., 2017, section 3.5),
and the learned position embedding of GPT (Radford et al., 2018).

Derived in lesson 3 (Token embeddings and positional encoding), §5-6, and lesson 12 (GPT), §4.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..errors import NumpyTransformerError
from ..validation import check_float, check_int, needs_checks

__all__ = ["sinusoidal_encoding", "positional_forward", "positional_backward",
           "learned_positional_forward", "learned_positional_backward",]


def sinusoidal_encoding(max_len: int, d_model: int, dtype=np.float64) -> np.ndarray:
    """The table of the paper's formula, shape (max_len, d_model).

    .. math:: PE_{(pos, 2i)} = \\sin(pos / 10000^{2i/d}),\\quad PE_{(pos, 2i+1)} = \\cos(pos / 10000^{2i/d})

    Computed in float64 and then cast, so float32 and float64 tables agree to float32 precision.
    Derived in lesson 3 (Token embeddings and positional encoding), §5.
    """
    pos = np.arange(max_len, dtype=np.float64)[:, None]  # (L, 1)
    i2 = np.arange(0, d_model, 2, dtype=np.float64)  # the even indices 2i
    angle = pos / np.power(10000.0, i2 / d_model)  # (L, ceil(D/2))
    pe = np.zeros((max_len, d_model), dtype=np.float64)
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle[:, : d_model // 2])
    return pe.astype(dtype)


def positional_forward(x: np.ndarray, pe: np.ndarray, offset: int = 0):
    """``out[:, t] = x[:, t] + PE[offset + t]`` for x of shape (B, T, D).

    Assumes ``offset + T <= max_len`` (the rows of ``pe``) and ``x`` of pe's width and
    dtype; :class:`PositionalEncoding` checks. Lesson 3, §5.
    """
    T = x.shape[1]
    return x + pe[offset:offset + T], None


def positional_backward(dout: np.ndarray, cache=None) -> np.ndarray:
    """Adding a constant passes the gradient through unchanged. Lesson 3, §5."""
    return dout


def _check_input(x: np.ndarray, offset: int, table: np.ndarray) -> None:
    """The modules' checks: x (B, T, D) like the (max_len, D) table, finite; 0 <= offset, offset + T <= max_len."""
    if needs_checks():  # False inside a model, which has checked its own inputs
        check_float(x, "x", table.dtype, shape=(None, None, table.shape[1]))
        check_int(offset, "offset", 0)
    if offset + x.shape[1] > table.shape[0]:
        raise NumpyTransformerError(
            f"sequence of length {offset + x.shape[1]} is longer than max_len={table.shape[0]}")


class LearnedPositionalCache(NamedTuple):
    max_len: int
    offset: int


def learned_positional_forward(x: np.ndarray, P: np.ndarray, offset: int = 0):
    """Add a learned vector per position: ``out[:, t] = x[:, t] + P[offset + t]``.

    .. math:: \\text{out}_{b,t} = x_{b,t} + P_{\\text{offset}+t}

    Parameters
    ----------
    x : ndarray, shape (B, T, D)
    P : ndarray, shape (max_len, D)
        The position table, a parameter (GPT's ``wpe``). Assumes ``offset + T <= max_len``.
    offset : int
        The position of ``x[:, 0]`` (incremental decoding starts past 0).

    Returns
    -------
    out : ndarray, shape (B, T, D)
    cache : LearnedPositionalCache

    Derived in lesson 12 (GPT), §4.
    """
    T = x.shape[1]
    return x + P[offset:offset + T], LearnedPositionalCache(P.shape[0], offset)


def learned_positional_backward(dout: np.ndarray, cache: LearnedPositionalCache):
    """Gradients of the addition ``out = x + P[offset + t]``.

    ``out`` is linear in both: ``dx = dout``. Row ``offset + t`` of the table is added to
    every sequence of the batch, so its gradient is the sum over the batch of
    ``dout[:, t]``; rows the forward did not read get zero.

    Derived in lesson 12 (GPT), §4.

    Returns
    -------
    dx : ndarray, shape (B, T, D)
    dP : ndarray, shape (max_len, D)
    """
    max_len, offset = cache
    B, T, D = dout.shape
    dP = np.zeros((max_len, D), dtype=dout.dtype)
    dP[offset:offset + T] = dout.sum(axis=0)
    dx = dout
    return dx, dP
