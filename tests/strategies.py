"""hypothesis strategies for shapes and values (the minitorch way).

Everything is tiny on purpose: a numerical gradient costs two forward passes per
element, and a property runs dozens of examples. Names follow the library:
B (batch), T (target/query length), S (source/key length), D (model width),
H (heads), V (vocabulary).
"""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

__all__ = [
    "PAD_ID",
    "batch_sizes",
    "lengths",
    "head_counts",
    "head_widths",
    "model_dims",
    "float_arrays",
    "id_arrays",
    "attention_masks",
]

PAD_ID = 0

batch_sizes = st.integers(1, 3)
lengths = st.integers(1, 5)
head_counts = st.integers(1, 3)
head_widths = st.integers(1, 3)  # D/H


@st.composite
def model_dims(draw, max_batch: int = 3, max_len: int = 5):
    """A dict ``B, T, S, H, D`` with ``D`` divisible by ``H`` by construction."""
    H = draw(head_counts)
    return dict(
        B=draw(st.integers(1, max_batch)),
        T=draw(st.integers(1, max_len)),
        S=draw(st.integers(1, max_len)),
        H=H,
        D=H * draw(head_widths),
    )


def float_arrays(shape, lo: float = -3.0, hi: float = 3.0, dtype=np.float64):
    """Arrays of the given shape with finite elements in ``[lo, hi]`` (no NaN, no inf)."""
    return arrays(dtype, shape, elements=st.floats(lo, hi, allow_nan=False, allow_infinity=False,
                                                    width=np.dtype(dtype).itemsize * 8))


@st.composite
def id_arrays(draw, B: int, T: int, vocab_size: int, pad_id: int = PAD_ID, padding: bool = True,
              min_real: int = 1):
    """Int64 ids (B, T); each row holds ``n >= min_real`` real tokens, then pad (right-padding).

    Real tokens are drawn from ``[0, vocab_size)`` without ``pad_id``. With
    ``padding=False`` every position is real; ``min_real=0`` allows fully padded rows.
    """
    real = [v for v in range(vocab_size) if v != pad_id]
    ids = np.full((B, T), pad_id, dtype=np.int64)
    for b in range(B):
        n = T if not padding else draw(st.integers(min(min_real, T), T))
        ids[b, :n] = draw(st.lists(st.sampled_from(real), min_size=n, max_size=n))
    return ids


@st.composite
def attention_masks(draw, B: int, T: int, S: int, fully_masked_rows: bool = False):
    """Bool masks (B, 1, T, S), True where attention is allowed.

    Every row allows at least one key unless ``fully_masked_rows``; then each row
    may also be entirely False (the case that must give zero weights, not NaN).
    """
    bits = draw(arrays(np.bool_, (B, 1, T, S)))
    if not fully_masked_rows:
        for b in range(B):
            for t in range(T):
                if not bits[b, 0, t].any():
                    bits[b, 0, t, draw(st.integers(0, S - 1))] = True
    return bits
