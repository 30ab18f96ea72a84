"""Input checks shared by the modules: clear errors instead of NumPy tracebacks."""
from __future__ import annotations

import numpy as np

__all__ = ["check_ids", "check_float", "check_positive_int", "check_same_batch"]


def check_ids(ids, name: str, vocab_size: int, max_len: int | None = None, ndim: int = 2) -> np.ndarray:
    """Return ``ids`` as an int64 array, or raise a ValueError/TypeError naming ``name``.

    Checks: integer dtype, ``ndim`` dimensions, values in ``[0, vocab_size)``, and
    (when given) a length of at most ``max_len`` along the last axis.
    """
    arr = np.asarray(ids)
    if arr.dtype == object or arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and arr.size and np.all(np.mod(arr, 1) == 0):
            hint = " (it holds whole numbers: convert with .astype(np.int64))"
        else:
            hint = ""
        raise TypeError(f"{name} must be an array of integer token ids, got dtype {arr.dtype}{hint}")
    if arr.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions (batch, length), got shape {arr.shape}")
    if arr.size and (arr.min() < 0 or arr.max() >= vocab_size):
        bad = arr.min() if arr.min() < 0 else arr.max()
        raise ValueError(f"{name} holds id {int(bad)}, outside the vocabulary [0, {vocab_size})")
    if max_len is not None and arr.shape[-1] > max_len:
        raise ValueError(
            f"{name} has length {arr.shape[-1]}, longer than max_len={max_len} of the model's config"
        )
    if arr.shape[-1] == 0:
        raise ValueError(f"{name} must hold at least one position, got shape {arr.shape}")
    return arr.astype(np.int64, copy=False)


def check_float(x, name: str, dtype, last_dim: int | None = None) -> np.ndarray:
    """Check a float array's dtype (no silent casting) and, optionally, its last axis."""
    if not isinstance(x, np.ndarray) or x.dtype != dtype:
        got = x.dtype if isinstance(x, np.ndarray) else type(x).__name__
        raise TypeError(f"{name} must be a {np.dtype(dtype).name} ndarray, got {got}")
    if last_dim is not None and (x.ndim == 0 or x.shape[-1] != last_dim):
        raise ValueError(f"{name} must have last dimension {last_dim}, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{name} holds NaN or infinite values")
    return x


def check_positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def check_same_batch(a: np.ndarray, a_name: str, b: np.ndarray, b_name: str) -> None:
    if a.shape[0] != b.shape[0]:
        raise ValueError(
            f"batch sizes differ: {a_name} has {a.shape[0]} rows but {b_name} has {b.shape[0]}"
        )
