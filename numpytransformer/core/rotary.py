"""Rotary position embedding, RoPE (Su et al., 2021): positions as rotations of queries and keys.

A sibling of lesson 3 (Token embeddings and positional encoding), §5-6's sinusoidal encoding.
§6 shows that moving k positions rotates each (sin, cos) pair of the table; RoPE uses the
rotation itself. Each (even, odd) pair of features of a query or key at position ``p`` is
rotated by the angle ``p * theta_i``, with the table's frequencies ``theta_i = base^(-2i/d)``.
A rotation by ``p`` and one by ``s`` meet in a dot product as one rotation by ``s - p``, so the
attention score of a query and a key depends on their contents and on their distance only.
Nothing is added to the token embeddings.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["ROTARY_BASE", "rotary_angles", "rotary_forward", "rotary_backward"]

#: The base of the frequencies, the sinusoidal table's 10000.
ROTARY_BASE = 10000.0


class RotaryCache(NamedTuple):
    cos: np.ndarray  # (T, d/2)
    sin: np.ndarray  # (T, d/2)


def rotary_angles(positions: np.ndarray, d: int, base: float = ROTARY_BASE) -> np.ndarray:
    """The angles ``positions[t] * base^(-2i/d)``, shape (T, d/2), in float64 (the table's frequencies)."""
    theta = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)  # (d/2,)
    return np.asarray(positions, dtype=np.float64)[:, None] * theta[None, :]  # (T, d/2)


def rotary_forward(x: np.ndarray, positions: np.ndarray, base: float = ROTARY_BASE):
    """Rotate each (even, odd) feature pair of ``x`` by its position's angle.

    The pair :math:`(x_{2i}, x_{2i+1})` of the row at position :math:`p`, read as a point of the
    plane, is turned counter-clockwise by the angle :math:`p\\,\\theta_i`, with
    :math:`\\theta_i = \\text{base}^{-2i/d}`; the pair stays in its place.

    .. solution-only::

        .. math:: \\begin{pmatrix} y_{2i} \\\\ y_{2i+1} \\end{pmatrix} =
                  \\begin{pmatrix} \\cos p\\theta_i & -\\sin p\\theta_i \\\\ \\sin p\\theta_i & \\cos p\\theta_i \\end{pmatrix}
                  \\begin{pmatrix} x_{2i} \\\\ x_{2i+1} \\end{pmatrix}

    Applied to the queries and keys of every head, after their projections and before the dot
    product. Sibling of lesson 3 (Token embeddings and positional encoding), §5-6's sinusoids.

    Parameters
    ----------
    x : ndarray, shape (..., T, d)
        Queries or keys of one or more heads; ``d`` (the head's width) even.
    positions : int ndarray, shape (T,)
        The position ``p`` of each of the T rows: ``0 .. T-1``, or ``offset ..`` in incremental
        decoding.
    base : float

    Returns
    -------
    out : ndarray, shaped like ``x``
    cache : RotaryCache
    """
    angles = rotary_angles(positions, x.shape[-1], base)  # (T, d/2)
    cos, sin = np.cos(angles).astype(x.dtype), np.sin(angles).astype(x.dtype)
    ### BEGIN SOLUTION 3.1: rotate each (even, odd) pair of features by the angle of its row's position
    x_even, x_odd = x[..., 0::2], x[..., 1::2]  # (..., T, d/2) each
    out_even = x_even * cos - x_odd * sin
    out_odd = x_even * sin + x_odd * cos
    out = np.stack([out_even, out_odd], axis=-1).reshape(x.shape)  # pairs back in place, (..., T, d)
    ### END SOLUTION
    return out, RotaryCache(cos, sin)


def rotary_backward(dout: np.ndarray, cache: RotaryCache) -> np.ndarray:
    """dx of the rotation, shaped like ``x``. Sibling of lesson 3, §6.

    .. solution-only::

        ``out = R x`` with R block-diagonal of 2x2 rotations, so ``dx = R^T dout``: the inverse
        rotation, by the opposite angle.
    """
    cos, sin = cache
    ### BEGIN SOLUTION 3.2: dx of the rotation of each (even, odd) pair, shaped like x
    d_even, d_odd = dout[..., 0::2], dout[..., 1::2]  # (..., T, d/2) each
    dx_even = d_even * cos + d_odd * sin
    dx_odd = -d_even * sin + d_odd * cos
    return np.stack([dx_even, dx_odd], axis=-1).reshape(dout.shape)
    ### END SOLUTION
