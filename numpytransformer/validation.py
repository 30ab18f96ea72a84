"""Input checks for the public boundary: one clear line instead of a NumPy traceback.

Every check raises :class:`~numpytransformer.errors.NumpyTransformerError` with a
message that names the argument and says what was expected. The pure
``*_forward``/``*_backward`` pairs call none of these: they stay bare, and their
docstrings say what they assume. The models and the modules call them once, where a
user's value comes in.

A model's public method checks its inputs and then runs its modules inside
:func:`inputs_checked`, so that a module does not check again what the model has
already checked (``needs_checks()`` is False there); the checks cost one pass over
the inputs per public call, not one per layer.
"""
from __future__ import annotations

import contextlib
import contextvars
import numbers
from typing import Optional, Sequence

import numpy as np

from .errors import NumpyTransformerError

__all__ = ["as_array", "check_ids", "check_float", "check_mask", "check_int", "check_positive_int", "check_real",
           "check_bool", "check_same_batch", "needs_checks", "inputs_checked"]

_inside_checked_call = contextvars.ContextVar("numpytransformer_inside_checked_call", default=False)


def needs_checks() -> bool:
    """False while a public call that has already checked its inputs runs (see :func:`inputs_checked`)."""
    return not _inside_checked_call.get()


@contextlib.contextmanager
def inputs_checked():
    """Run a block whose inputs are known to be good: modules inside it skip their own checks."""
    token = _inside_checked_call.set(True)
    try:
        yield
    finally:
        _inside_checked_call.reset(token)


def as_array(x, name: str) -> np.ndarray:
    """``np.asarray`` that names the argument when NumPy cannot make an array of the value (ragged lists)."""
    if isinstance(x, np.ndarray):
        return x
    try:
        arr = np.asarray(x)
    except (ValueError, TypeError, OverflowError):
        raise NumpyTransformerError(f"{name} must be a rectangular array (rows of equal length), "
                                    f"got a ragged {type(x).__name__}") from None
    return arr


def _shape_text(shape: Sequence) -> str:
    return "(" + ", ".join("?" if s is None else str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def check_ids(ids, name: str, vocab_size: int, max_len: Optional[int] = None, ndim: Optional[int] = 2,
              length: Optional[int] = None) -> np.ndarray:
    """Return ``ids`` as an int64 array, or raise NumpyTransformerError naming ``name``.

    Checks: a rectangular array (or nested list) of integers, ``ndim`` dimensions (any
    when None), at least one row and one position, values in ``[0, vocab_size)``, and
    (when given) a last axis of at most ``max_len`` or of exactly ``length``.
    """
    arr = as_array(ids, name)
    if arr.size == 0:  # before the dtype, as np.asarray([]) is float64
        raise NumpyTransformerError(f"{name} must hold at least one sequence and one position, got shape {arr.shape}")
    if arr.dtype == object or arr.dtype.kind not in "iu":
        if arr.dtype.kind == "f" and arr.size and np.isfinite(arr).all() and np.all(np.mod(arr, 1) == 0):
            hint = " (it holds whole numbers: convert with .astype(np.int64))"
        elif arr.dtype == object:
            hint = " (integers too large for int64, or values that are not numbers)"
        else:
            hint = ""
        raise NumpyTransformerError(f"{name} must be an array of integer token ids, got dtype {arr.dtype}{hint}")
    if ndim is not None and arr.ndim != ndim:
        axes = " (batch, length)" if ndim == 2 else ""
        raise NumpyTransformerError(f"{name} must have {ndim} dimensions{axes}, got shape {arr.shape}")
    if arr.ndim == 0:
        raise NumpyTransformerError(f"{name} must hold at least one sequence and one position, got shape {arr.shape}")
    lo, hi = arr.min(), arr.max()
    if lo < 0 or hi >= vocab_size:
        bad = lo if lo < 0 else hi
        raise NumpyTransformerError(f"{name} holds id {int(bad)}, outside the vocabulary [0, {vocab_size})")
    if max_len is not None and arr.shape[-1] > max_len:
        raise NumpyTransformerError(
            f"{name} has length {arr.shape[-1]}, longer than max_len={max_len} of the model's config")
    if length is not None and arr.shape[-1] != length:
        raise NumpyTransformerError(f"{name} must have length {length} (shape (batch, {length})), got shape {arr.shape}")
    return arr.astype(np.int64, copy=False)


def _check_shape(shape: tuple, name: str, expected: Sequence[Optional[int]]) -> None:
    if len(shape) != len(expected) or any(e is not None and s != e for s, e in zip(shape, expected)):
        raise NumpyTransformerError(f"{name} must have shape {_shape_text(expected)}, got {shape}")


def check_float(x, name: str, dtype=None, shape: Optional[Sequence[Optional[int]]] = None,
                last_dim: Optional[int] = None, min_ndim: int = 1) -> np.ndarray:
    """Check a float array: an ndarray of exactly ``dtype`` (any float dtype if None; no silent casting), finite.

    ``shape`` (ints, or None for any size) fixes every axis; ``last_dim`` only the last one.
    """
    if not isinstance(x, np.ndarray):
        want = "float" if dtype is None else np.dtype(dtype).name
        raise NumpyTransformerError(f"{name} must be a {want} ndarray, got {type(x).__name__}")
    if dtype is None and x.dtype.kind != "f":
        raise NumpyTransformerError(f"{name} must be a float ndarray, got dtype {x.dtype}")
    if dtype is not None and x.dtype != dtype:
        raise NumpyTransformerError(f"{name} must be a {np.dtype(dtype).name} ndarray like the model's weights, "
                                    f"got {x.dtype}")
    if shape is not None:
        _check_shape(x.shape, name, tuple(shape))
    elif x.ndim < min_ndim:
        raise NumpyTransformerError(f"{name} must have at least {min_ndim} dimension(s), got shape {x.shape}")
    if last_dim is not None and (x.ndim == 0 or x.shape[-1] != last_dim):
        raise NumpyTransformerError(f"{name} must have last dimension {last_dim}, got shape {x.shape}")
    if x.size and not np.isfinite(x).all():
        kind = "NaN" if np.isnan(x).any() else "infinite"
        raise NumpyTransformerError(f"{name} holds {kind} values; expected finite numbers")
    return x


def check_mask(mask, name: str, shape: Sequence[int]) -> np.ndarray:
    """Return an attention mask as a bool array broadcastable to ``shape`` (True = may attend).

    A mask of integer 0/1 values is converted to bool; anything else (floats, other
    integers, a shape that does not broadcast) is refused.
    """
    arr = as_array(mask, name)
    if arr.dtype != np.bool_:
        if arr.dtype.kind not in "iu":
            raise NumpyTransformerError(f"{name} must be a bool array (True where attention is allowed) "
                                        f"or integer 0/1, got dtype {arr.dtype}")
        if arr.size and (arr.min() < 0 or arr.max() > 1):
            raise NumpyTransformerError(f"{name} must hold only 0 and 1 (or be bool), got values in "
                                        f"[{arr.min()}, {arr.max()}]")
        arr = arr.astype(bool)
    if arr.ndim != len(shape) or any(a not in (1, s) for a, s in zip(arr.shape, shape)):
        raise NumpyTransformerError(f"{name} must broadcast to {tuple(shape)} (each axis 1 or that size), "
                                    f"got shape {arr.shape}")
    return arr


def check_int(value, name: str, low: Optional[int] = None, high: Optional[int] = None) -> int:
    """Return ``value`` as a Python int in ``[low, high]``; bools and floats are refused."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise NumpyTransformerError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    if (low is not None and value < low) or (high is not None and value > high):
        if high is None:
            expected = f">= {low:,}"
        elif low is None:
            expected = f"<= {high:,}"
        else:
            expected = f"in [{low:,}, {high:,}]"
        raise NumpyTransformerError(f"{name} must be an integer {expected}, got {value!r}")
    return int(value)


def check_positive_int(value, name: str, high: Optional[int] = None) -> int:
    return check_int(value, name, 1, high)


def check_real(value, name: str, low: Optional[float] = None, high: Optional[float] = None,
               low_open: bool = False, high_open: bool = False) -> float:
    """Return ``value`` as a finite Python float in the given interval; bools and strings are refused."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise NumpyTransformerError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    v = float(value)
    too_low = low is not None and (v <= low if low_open else v < low)
    too_high = high is not None and (v >= high if high_open else v > high)
    if not np.isfinite(v) or too_low or too_high:
        lo = "(-inf" if low is None else ("(" if low_open else "[") + f"{low:g}"
        hi = "inf)" if high is None else f"{high:g}" + (")" if high_open else "]")
        raise NumpyTransformerError(f"{name} must be a finite number in {lo}, {hi}, got {value!r}")
    return v


def check_bool(value, name: str) -> bool:
    """A real bool only: the strings "no" and "false" and the ints 0, 1, 2 are refused."""
    if not isinstance(value, (bool, np.bool_)):
        raise NumpyTransformerError(f"{name} must be True or False, got {value!r} ({type(value).__name__})")
    return bool(value)


def check_same_batch(a: np.ndarray, a_name: str, b: np.ndarray, b_name: str) -> None:
    if a.shape[0] != b.shape[0]:
        raise NumpyTransformerError(
            f"batch sizes differ: {a_name} has {a.shape[0]} rows but {b_name} has {b.shape[0]}")
