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
    "bad_ids",
    "non_finite_arrays",
    "bad_ints",
    "bad_reals",
    "bad_bools",
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


# ---- bad input, for the fuzz tests of the public boundary (tests/test_fuzz_api.py) ------------
#: Values that are not numbers at all, or containers of numbers.
not_numbers = st.one_of(st.none(), st.text(max_size=4), st.just([1]), st.just({"a": 1}), st.just(b"1"))


@st.composite
def bad_ids(draw, B: int, T: int, vocab_size: int):
    """Token ids the public boundary must refuse, as a ``(value, kind)`` pair.

    Every kind is wrong on its own: an id out of ``[0, vocab_size)`` (``-1`` included),
    a float, bool, string or object dtype, an int too large for int64, a ragged list,
    the wrong number of dimensions, or no positions at all.
    """
    kind = draw(st.sampled_from(["negative", "too_large", "float", "whole_float", "bool", "ragged", "ndim1",
                                 "ndim3", "empty", "huge_int", "string", "nan"]))
    ids = draw(arrays(np.int64, (B, T), elements=st.integers(0, vocab_size - 1)))
    b, t = draw(st.integers(0, B - 1)), draw(st.integers(0, T - 1))
    if kind == "negative":
        ids[b, t] = draw(st.integers(-2 ** 40, -1))
    elif kind == "too_large":
        ids[b, t] = draw(st.integers(vocab_size, 2 ** 62))
    elif kind == "float":
        ids = ids.astype(np.float64)
        ids[b, t] += 0.5
    elif kind == "whole_float":
        ids = ids.astype(draw(st.sampled_from([np.float32, np.float64])))
    elif kind == "bool":
        ids = ids > 0
    elif kind == "ragged":
        ids = [list(row) for row in ids] + [[1] * (T + 1)]
    elif kind == "ndim1":
        ids = ids[0]
    elif kind == "ndim3":
        ids = ids[:, :, None]
    elif kind == "empty":
        ids = ids[:, :0]
    elif kind == "huge_int":
        ids = ids.tolist()
        ids[b][t] = 10 ** 20
    elif kind == "string":
        ids = ids.astype(str)
    elif kind == "nan":
        ids = ids.astype(np.float64)
        ids[b, t] = np.nan
    return ids, kind


@st.composite
def non_finite_arrays(draw, shape, dtype=np.float64):
    """Float arrays of ``shape`` with at least one NaN, +inf or -inf among finite values."""
    x = draw(float_arrays(shape, dtype=dtype))
    n = draw(st.integers(1, max(1, x.size)))
    flat = x.reshape(-1)
    for _ in range(n):
        flat[draw(st.integers(0, x.size - 1))] = draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    return x


def bad_ints(low=None, high=None):
    """Values an integer argument in ``[low, high]`` must refuse: out of range, bool, float, not a number."""
    out_of_range = []
    if low is not None:
        out_of_range.append(st.integers(max_value=low - 1))
    if high is not None:
        out_of_range.append(st.integers(min_value=high + 1, max_value=10 ** 30))
    return st.one_of(*out_of_range, st.booleans(), st.floats(), st.just(np.float64(1.0)), not_numbers)


def bad_reals(low=None, high=None, low_open=False, high_open=False):
    """Values a real argument in the interval must refuse: outside it, NaN, +-inf, bool, not a number."""
    def outside(v):
        return ((low is not None and (v <= low if low_open else v < low))
                or (high is not None and (v >= high if high_open else v > high)))
    return st.one_of(st.floats().filter(lambda v: not np.isfinite(v) or outside(v)),
                     st.booleans(), st.just(np.array(0.1)), not_numbers)


def bad_bools():
    """Values a flag must refuse: 0/1 and other ints, "no"/"false"/"True" strings, floats, None."""
    return st.one_of(st.integers(), st.sampled_from(["no", "false", "True", "0", ""]), st.floats(), st.none())
