"""Sinusoidal positional encoding (Vaswani et al., 2017, section 3.5)."""
from __future__ import annotations

import numpy as np

from .module import Module

__all__ = ["sinusoidal_encoding", "positional_forward", "positional_backward", "PositionalEncoding"]


def sinusoidal_encoding(max_len: int, d_model: int, dtype=np.float64) -> np.ndarray:
    """The table of the paper's formula, shape (max_len, d_model).

    .. math:: PE_{(pos, 2i)} = \\sin(pos / 10000^{2i/d}),\\quad PE_{(pos, 2i+1)} = \\cos(pos / 10000^{2i/d})

    Computed in float64 and then cast, so float32 and float64 tables agree to float32 precision.
    """
    ### BEGIN SOLUTION 3.2: pe, the float64 (max_len, d_model) table: sines in even columns, cosines in odd ones
    pos = np.arange(max_len, dtype=np.float64)[:, None]  # (L, 1)
    i2 = np.arange(0, d_model, 2, dtype=np.float64)  # the even indices 2i
    angle = pos / np.power(10000.0, i2 / d_model)  # (L, ceil(D/2))
    pe = np.zeros((max_len, d_model), dtype=np.float64)
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle[:, : d_model // 2])
    ### END SOLUTION
    return pe.astype(dtype)


def positional_forward(x: np.ndarray, pe: np.ndarray, offset: int = 0):
    """``out[:, t] = x[:, t] + PE[offset + t]`` for x of shape (B, T, D)."""
    T = x.shape[1]
    return x + pe[offset:offset + T], None


def positional_backward(dout: np.ndarray, cache=None) -> np.ndarray:
    """Adding a constant passes the gradient through unchanged."""
    return dout


class PositionalEncoding(Module):
    """Adds the fixed sinusoidal table; it has no parameters."""

    def __init__(self, max_len: int, d_model: int, dtype=np.float64):
        super().__init__()
        self.pe = sinusoidal_encoding(max_len, d_model, dtype)

    def forward(self, x: np.ndarray, offset: int = 0) -> np.ndarray:
        if offset + x.shape[1] > self.pe.shape[0]:
            raise ValueError(
                f"sequence of length {offset + x.shape[1]} is longer than max_len={self.pe.shape[0]}"
            )
        out, _ = positional_forward(x, self.pe, offset)
        self._cache = True
        return out

    def backward(self, dout: np.ndarray) -> np.ndarray:
        self._pop_cache()
        return positional_backward(dout)
