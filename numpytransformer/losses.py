"""Softmax cross-entropy with label smoothing, padding ignored, and its fused gradient."""
from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import numpy as np

from .buffers import empty_reusable
from .errors import NumpyTransformerError
from .softmax import sum_keepdims
from .validation import as_array, check_int, check_real

__all__ = ["softmax_cross_entropy_forward", "softmax_cross_entropy_backward", "cross_entropy"]


class CrossEntropyCache(NamedTuple):
    probs: np.ndarray  # softmax of the logits, (N, V)
    targets: np.ndarray  # (N,)
    valid: np.ndarray  # (N,) bool, False at pad targets
    n_valid: int
    label_smoothing: float
    shape: tuple  # the logits' shape


def softmax_cross_entropy_forward(logits: np.ndarray, targets: np.ndarray, pad_id: Optional[int] = None,
                                  label_smoothing: float = 0.0):
    """Mean cross-entropy between ``softmax(logits)`` and label-smoothed targets.

    The smoothed target distribution over the V classes is

    .. math:: q_v = (1 - \\epsilon)\\,[v = y] + \\epsilon / V

    (the uniform part covers every class, the true one included), and the loss is

    .. math:: L = \\frac{1}{N}\\sum_{n:\\,y_n \\ne \\text{pad}} -\\sum_v q_v \\log p_{n,v}
              = \\frac{1}{N}\\sum_{n:\\,y_n \\ne \\text{pad}} \\Big[(1-\\epsilon)(-\\log p_{n,y_n}) + \\epsilon\\,\\overline{(-\\log p_{n,\\cdot})}\\Big]

    averaged over the N non-pad targets. This is exactly PyTorch's
    ``F.cross_entropy(logits, y, ignore_index=pad_id, label_smoothing=eps)``. The
    paper's recipe as in the Annotated Transformer differs slightly: it puts
    :math:`\\epsilon` on the V-2 classes other than the true one and the pad.

    Parameters
    ----------
    logits : float ndarray, shape (..., V)
        Finite, except that ``-inf`` may mark a class that is impossible (a masked
        vocabulary entry): its probability is 0 and its gradient 0, as in PyTorch. The
        pair assumes no NaN or ``+inf``, no ``-inf`` at a non-pad target, and no ``-inf``
        in a non-pad row when ``label_smoothing > 0`` (each makes the loss infinite or
        NaN); :func:`cross_entropy` checks all of this.
    targets : int ndarray, shape (...)
        Assumed in ``[0, V)``.
    pad_id : int or None
        Targets equal to it contribute nothing. If every target is pad the loss is
        0 and the gradient is 0 (PyTorch would give NaN).
    label_smoothing : float in [0, 1)

    Returns
    -------
    loss : float
    cache : CrossEntropyCache
    """
    V = logits.shape[-1]
    z = logits.reshape(-1, V)  # (N, V)
    t = np.asarray(targets).reshape(-1)
    valid = np.ones(t.shape, dtype=bool) if pad_id is None else t != pad_id
    n_valid = int(valid.sum())

    # log p_v = z_v - lse with lse = log sum_v e^{z_v} (what log_softmax computes), read off
    # the softmax's own sum: one new (N, V) array, the probabilities, instead of log p, its
    # temporaries and p. On (1536, 8000) float32 each fresh array of that size costs more
    # than the arithmetic on it (page faults).
    m = z.max(axis=1, keepdims=True)
    probs = np.subtract(z, m, out=empty_reusable(z.shape, z.dtype))  # (N, V); exp(z - m) <= 1 cannot overflow
    np.exp(probs, out=probs)
    total = sum_keepdims(probs)  # >= 1
    probs /= total
    lse = (m + np.log(total))[:, 0]  # (N,)
    nll = lse - z[np.arange(len(t)), t]  # -log p_y
    eps = label_smoothing
    if eps:
        rows = (1.0 - eps) * nll + eps * (lse - sum_keepdims(z)[:, 0] / V)  # -mean_v log p_v: the smoothing term
    else:
        rows = nll  # not 0 * (-mean log p): a -inf logit makes that mean -inf, and 0 * inf is NaN
    loss = float(np.sum(rows[valid], dtype=np.float64) / n_valid) if n_valid else 0.0
    return loss, CrossEntropyCache(probs, t, valid, n_valid, eps, logits.shape)


def softmax_cross_entropy_backward(dloss: float, cache: CrossEntropyCache, inplace: bool = False) -> np.ndarray:
    """The fused gradient of softmax followed by cross-entropy, ``dloss * dL/dlogits`` (lesson 2 §4).

    .. solution-only::

        It is ``(p - q) / N``: for one row, :math:`\\partial L / \\partial z_v = p_v - q_v` because
        :math:`\\partial(-\\log p_y)/\\partial z_v = p_v - [v=y]` and :math:`\\sum_v q_v = 1`.

    Pad rows get zero. ``inplace=True`` reuses the cached probabilities (no copy);
    the cache is then spent.

    Returns
    -------
    dlogits : ndarray, shaped like the logits
    """
    probs, t, valid, n_valid, eps, shape = cache
    d = probs if inplace else probs.copy()
    ### BEGIN SOLUTION 2.1: turn d (the softmax) into dloss * dL/dlogits, zero in pad rows
    V = d.shape[1]
    if n_valid == 0:
        d.fill(0)
        return d.reshape(shape)
    d[np.arange(len(t)), t] -= d.dtype.type(1.0 - eps)
    if eps:
        d -= d.dtype.type(eps / V)
    d *= (valid * (dloss / n_valid)).astype(d.dtype)[:, None]
    ### END SOLUTION
    return d.reshape(shape)


def cross_entropy(logits: np.ndarray, targets: np.ndarray, pad_id: Optional[int] = None,
                  label_smoothing: float = 0.0) -> Tuple[float, np.ndarray]:
    """Loss and gradient in one call: ``loss, dlogits = cross_entropy(logits, y, pad_id=0)``.

    See :func:`softmax_cross_entropy_forward` for the definition. This is the public
    entry point, so it checks its arguments (the pair does not) and raises
    :class:`~numpytransformer.errors.NumpyTransformerError` naming the bad one:
    ``logits`` a float ndarray (..., V) without NaN or ``+inf``; ``targets`` integers of
    shape (...) in ``[0, V)``; ``pad_id`` None or a class id; ``label_smoothing`` a
    number in [0, 1).

    A ``-inf`` logit is a class ruled out, and is allowed where the loss stays finite.
    Where it is not, PyTorch's ``F.cross_entropy`` returns ``inf`` (a ``-inf`` logit at
    a target, or anywhere in a row when ``label_smoothing > 0``, since smoothing gives
    every class some probability) or NaN (a row of only ``-inf``); this function raises
    instead, so that an infinite loss cannot pass for a diverged model.
    """
    logits, targets, pad_id, label_smoothing = _check_cross_entropy_args(logits, targets, pad_id, label_smoothing)
    loss, cache = softmax_cross_entropy_forward(logits, targets, pad_id, label_smoothing)
    return loss, softmax_cross_entropy_backward(1.0, cache, inplace=True)


def _check_cross_entropy_args(logits, targets, pad_id, label_smoothing):
    """The checks of :func:`cross_entropy`, in one place; returns the arguments cleaned."""
    if not isinstance(logits, np.ndarray) or logits.dtype.kind != "f":
        what = f"dtype {logits.dtype}" if isinstance(logits, np.ndarray) else type(logits).__name__
        raise NumpyTransformerError(f"logits must be a float ndarray of shape (..., V), got {what}")
    if logits.ndim == 0 or logits.shape[-1] == 0:
        raise NumpyTransformerError(f"logits must have a last axis of V >= 1 classes, got shape {logits.shape}")
    V = logits.shape[-1]
    label_smoothing = check_real(label_smoothing, "label_smoothing", 0.0, 1.0, high_open=True)
    if pad_id is not None:
        pad_id = check_int(pad_id, "pad_id", 0, V - 1)
    targets = as_array(targets, "targets")
    if targets.dtype.kind not in "iu":
        raise NumpyTransformerError(f"targets must be integer class ids, got dtype {targets.dtype}")
    if targets.shape != logits.shape[:-1]:
        raise NumpyTransformerError(f"targets must have shape {logits.shape[:-1]} to match logits {logits.shape}, "
                                    f"got {targets.shape}")
    if not logits.size:
        return logits, targets, pad_id, label_smoothing
    if targets.min() < 0 or targets.max() >= V:
        raise NumpyTransformerError(f"targets must lie in [0, {V}), got values in [{targets.min()}, {targets.max()}]")
    # Two reductions, no temporary array: max is NaN if any element is, +inf if any is.
    if not logits.max() < np.inf:
        kind = "NaN" if np.isnan(logits).any() else "+inf"
        raise NumpyTransformerError(f"logits hold {kind}: expected finite numbers (or -inf for a class ruled out)")
    if logits.min() == -np.inf:
        z = logits.reshape(-1, V)
        t = targets.reshape(-1)
        real = np.ones(t.shape, bool) if pad_id is None else t != pad_id
        ruled_out = z == -np.inf
        if ruled_out.all(axis=1).any():
            row = int(np.argmax(ruled_out.all(axis=1)))
            raise NumpyTransformerError(f"logits row {row} (flattened) is -inf at every class: its softmax is undefined")
        at_target = real & ruled_out[np.arange(len(t)), t]
        if at_target.any():
            row = int(np.argmax(at_target))
            raise NumpyTransformerError(f"logits are -inf at the target class {int(t[row])} of row {row} (flattened): "
                                        "the loss would be infinite")
        if label_smoothing and (ruled_out & real[:, None]).any():
            raise NumpyTransformerError(f"logits hold -inf while label_smoothing={label_smoothing:g}: smoothing gives "
                                        "every class some probability, so the loss would be infinite; "
                                        "use label_smoothing=0 with -inf logits")
    return logits, targets, pad_id, label_smoothing
