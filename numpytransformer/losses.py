"""Softmax cross-entropy with label smoothing, padding ignored, and its fused gradient."""
from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import numpy as np

from .softmax import log_softmax

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
    targets : int ndarray, shape (...)
    pad_id : int or None
        Targets equal to it contribute nothing. If every target is pad the loss is
        0 and the gradient is 0 (PyTorch would give NaN).
    label_smoothing : float in [0, 1]

    Returns
    -------
    loss : float
    cache : CrossEntropyCache
    """
    V = logits.shape[-1]
    targets = np.asarray(targets)
    if targets.dtype.kind not in "iu":
        raise TypeError(f"targets must be integer class ids, got dtype {targets.dtype}")
    if targets.shape != logits.shape[:-1]:
        raise ValueError(f"targets must have shape {logits.shape[:-1]} to match logits {logits.shape}, "
                         f"got {targets.shape}")
    if targets.size and (targets.min() < 0 or targets.max() >= V):
        raise ValueError(f"targets must lie in [0, {V}), got values in [{targets.min()}, {targets.max()}]")
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be in [0, 1], got {label_smoothing}")
    z = logits.reshape(-1, V)  # (N, V)
    t = targets.reshape(-1)
    valid = np.ones(t.shape, dtype=bool) if pad_id is None else t != pad_id
    n_valid = int(valid.sum())

    logp = log_softmax(z, axis=1)  # (N, V)
    probs = np.exp(logp)
    nll = -logp[np.arange(len(t)), t]  # -log p_y
    smooth = -logp.mean(axis=1)  # -mean_v log p_v
    eps = label_smoothing
    rows = (1.0 - eps) * nll + eps * smooth
    loss = float(np.sum(rows[valid], dtype=np.float64) / n_valid) if n_valid else 0.0
    return loss, CrossEntropyCache(probs, t, valid, n_valid, eps, logits.shape)


def softmax_cross_entropy_backward(dloss: float, cache: CrossEntropyCache, inplace: bool = False) -> np.ndarray:
    """The fused gradient: softmax followed by cross-entropy differentiates to ``(p - q) / N``.

    For one row, :math:`\\partial L / \\partial z_v = p_v - q_v` because
    :math:`\\partial(-\\log p_y)/\\partial z_v = p_v - [v=y]` and :math:`\\sum_v q_v = 1`.
    Pad rows get zero. ``inplace=True`` reuses the cached probabilities (no copy);
    the cache is then spent.

    Returns
    -------
    dlogits : ndarray, shaped like the logits
    """
    probs, t, valid, n_valid, eps, shape = cache
    d = probs if inplace else probs.copy()
    ### BEGIN SOLUTION 2.1: turn d (the softmax) into dloss * (p - q) / N, zero in pad rows
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

    See :func:`softmax_cross_entropy_forward` for the definition.
    """
    loss, cache = softmax_cross_entropy_forward(logits, targets, pad_id, label_smoothing)
    return loss, softmax_cross_entropy_backward(1.0, cache, inplace=True)
