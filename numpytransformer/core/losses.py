"""Softmax cross-entropy with label smoothing, padding ignored, and its fused gradient; a language
model's next-token loss is the same pair against the ids shifted by one.

Derived in lesson 2 (Softmax and cross-entropy), §2-5; lesson 12 (GPT), §5 trains a language model with it.
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

import numpy as np

from ..errors import NumpyTransformerError
from .kernels import kernels
from .softmax import log_softmax
from ..validation import as_array, check_int, check_real

__all__ = ["softmax_cross_entropy_forward", "softmax_cross_entropy_backward", "cross_entropy", "lm_loss_forward",
           "lm_loss_backward"]


class CrossEntropyCache(NamedTuple):
    probs: np.ndarray  # softmax of the logits, (N, V)
    targets: np.ndarray  # (N,)
    valid: np.ndarray  # (N,) bool, False at pad targets
    n_valid: int
    label_smoothing: float
    shape: tuple  # the logits' shape
    z_loss: float = 0.0  # the z-loss coefficient (0: none)
    log_z: Optional[np.ndarray] = None  # (N,) log Z of every row, kept when z_loss > 0


def softmax_cross_entropy_forward(logits: np.ndarray, targets: np.ndarray, pad_id: Optional[int] = None,
                                  label_smoothing: float = 0.0, z_loss: float = 0.0):
    """Mean cross-entropy between ``softmax(logits)`` and label-smoothed targets, plus an optional z-loss.

    The smoothed target distribution over the V classes is

    .. math:: q_v = (1 - \\epsilon)\\,[v = y] + \\epsilon / V

    (the uniform part covers every class, the true one included), and the loss is

    .. math:: L = \\frac{1}{N}\\sum_{n:\\,y_n \\ne \\text{pad}} -\\sum_v q_v \\log p_{n,v}
              = \\frac{1}{N}\\sum_{n:\\,y_n \\ne \\text{pad}} \\Big[(1-\\epsilon)(-\\log p_{n,y_n}) + \\epsilon\\,\\overline{(-\\log p_{n,\\cdot})}\\Big]

    averaged over the N non-pad targets. This is exactly PyTorch's
    ``F.cross_entropy(logits, y, ignore_index=pad_id, label_smoothing=eps)``. The
    paper's recipe as in the Annotated Transformer differs slightly: it puts
    :math:`\\epsilon` on the V-2 classes other than the true one and the pad.
    Derived in lesson 2 (Softmax and cross-entropy), §2 and §5.

    With ``z_loss`` :math:`= c > 0`, PaLM's z-loss (Chowdhery et al., 2022) is added: the squared log
    of each row's softmax normaliser, :math:`\\log Z_n = \\log \\sum_v e^{z_{n,v}}`, averaged over the
    same N rows,

    .. math:: L \\mathrel{+}= \\frac{c}{N} \\sum_{n:\\,y_n \\ne \\text{pad}} (\\log Z_n)^2

    which leaves the probabilities free but pulls :math:`\\log Z` towards 0, so that the logits
    cannot drift to large values (a sibling of lesson 2 §4's cross-entropy: the softmax is the
    gradient of :math:`\\log Z`).

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
    z_loss : float >= 0
        The z-loss coefficient c (PaLM: 1e-4); 0 adds nothing.

    Returns
    -------
    loss : float
    cache : CrossEntropyCache
    """
    V = logits.shape[-1]
    z = logits.reshape(-1, V)  # (N, V)
    t = np.asarray(targets).reshape(-1)  # (N,)
    valid = np.ones(t.shape, dtype=bool) if pad_id is None else t != pad_id
    n_valid = int(valid.sum())
    eps = label_smoothing

    logp = log_softmax(z, axis=1)  # (N, V)
    nll = -logp[np.arange(len(t)), t]  # (N,), -log p_y
    if eps:
        rows = (1.0 - eps) * nll - eps * logp.mean(axis=1)  # the smoothing term: -mean_v log p_v
    else:
        rows = nll  # not 0 * (-mean log p): a -inf logit makes that mean -inf, and 0 * inf is NaN
    loss = float(rows[valid].sum(dtype=np.float64) / n_valid) if n_valid else 0.0
    probs = np.exp(logp)
    if not z_loss:
        return loss, CrossEntropyCache(probs, t, valid, n_valid, eps, logits.shape)
    ### BEGIN SOLUTION 2.1: PaLM's z-loss: log Z of every row, z_loss times the mean of its square over the counted rows added to the loss; its gradient added to d
    m = z.max(axis=1, keepdims=True)  # (N, 1); exp(z - m) <= 1 cannot overflow
    log_z = (m + np.log(np.exp(z - m).sum(axis=1, keepdims=True)))[:, 0]  # (N,)
    loss += float(z_loss * (log_z[valid] ** 2).sum(dtype=np.float64) / n_valid) if n_valid else 0.0
    ### END SOLUTION
    return loss, CrossEntropyCache(probs, t, valid, n_valid, eps, logits.shape, z_loss, log_z)


def softmax_cross_entropy_backward(dloss: float, cache: CrossEntropyCache) -> np.ndarray:
    """The fused gradient of softmax followed by cross-entropy, ``dloss * dL/dlogits``.

    It is ``(p - q) / N``: for one row, :math:`\\partial L / \\partial z_v = p_v - q_v` because
    :math:`\\partial(-\\log p_y)/\\partial z_v = p_v - [v=y]` and :math:`\\sum_v q_v = 1`.

    Pad rows get zero. Derived in lesson 2 (Softmax and cross-entropy), §4-5.

    .. solution-only::

        With a z-loss of coefficient c, each counted row adds
        :math:`\\partial\\, c (\\log Z)^2 / \\partial z_v = 2 c \\log Z \\, p_v` (since
        :math:`\\partial \\log Z / \\partial z_v = p_v`), divided by N like the cross-entropy.

    Returns
    -------
    dlogits : ndarray, shaped like the logits
    """
    probs, t, valid, n_valid, eps, shape, z_loss, log_z = cache
    d = probs.copy()  # (N, V), the softmax; a copy, so that the cache stays as it was
    N, V = d.shape
    dt = d.dtype.type
    is_target = np.arange(V) == t[:, None]  # (N, V)
    q = np.where(is_target, dt(1.0 - eps + eps / V), dt(eps / V))  # the smoothed targets
    weight = valid * (dloss / max(n_valid, 1))  # (N,): 1/N in real rows, 0 in pad rows
    d = (d - q) * weight.astype(d.dtype)[:, None]
    if z_loss:
        ### BEGIN SOLUTION 2.1: PaLM's z-loss: log Z of every row, z_loss times the mean of its square over the counted rows added to the loss; its gradient added to d
        row_weight = valid * (dloss / max(n_valid, 1))  # (N,)
        d = d + (2.0 * z_loss * log_z * row_weight).astype(d.dtype)[:, None] * probs
        ### END SOLUTION
    return d.reshape(shape)


def cross_entropy(logits: np.ndarray, targets: np.ndarray, pad_id: Optional[int] = None,
                  label_smoothing: float = 0.0, z_loss: float = 0.0) -> Tuple[float, np.ndarray]:
    """Loss and gradient in one call: ``loss, dlogits = cross_entropy(logits, y, pad_id=0)``.

    See :func:`softmax_cross_entropy_forward` for the definition. This is the public
    entry point, so it checks its arguments (the pair does not) and raises
    :class:`~numpytransformer.errors.NumpyTransformerError` naming the bad one:
    ``logits`` a float ndarray (..., V) without NaN or ``+inf``; ``targets`` integers of
    shape (...) in ``[0, V)``; ``pad_id`` None or a class id; ``label_smoothing`` a
    number in [0, 1); ``z_loss`` a number >= 0 (the z-loss coefficient). With a z-loss the
    textbook pair runs: the fast form has none.

    A ``-inf`` logit is a class ruled out, and is allowed where the loss stays finite.
    Where it is not, PyTorch's ``F.cross_entropy`` returns ``inf`` (a ``-inf`` logit at
    a target, or anywhere in a row when ``label_smoothing > 0``, since smoothing gives
    every class some probability) or NaN (a row of only ``-inf``); this function raises
    instead, so that an infinite loss cannot pass for a diverged model.
    """
    logits, targets, pad_id, label_smoothing = _check_cross_entropy_args(logits, targets, pad_id, label_smoothing)
    z_loss = check_real(z_loss, "z_loss", 0.0)
    if z_loss:
        loss, cache = softmax_cross_entropy_forward(logits, targets, pad_id, label_smoothing, z_loss)
        return loss, softmax_cross_entropy_backward(1.0, cache)
    loss, cache = kernels.softmax_cross_entropy_forward(logits, targets, pad_id, label_smoothing)
    return loss, kernels.softmax_cross_entropy_backward(1.0, cache)


def lm_loss_forward(logits: np.ndarray, ids: np.ndarray):
    """A language model's loss: the mean cross-entropy of every next token.

    The model reads ``ids[:, :T]`` and gives ``logits`` (B, T, V); position t is scored on
    the id that follows it, ``ids[:, t + 1]``. That is :func:`softmax_cross_entropy_forward`
    with the ids shifted by one as targets (no padding, no smoothing):

    .. math:: L = -\\frac{1}{BT} \\sum_{b, t} \\log \\text{softmax}(z_{b,t})_{x_{b,t+1}}

    The gradient is lesson 2's (Softmax and cross-entropy, §4); lesson 12 (GPT), §5 shifts the targets.

    Parameters
    ----------
    logits : float ndarray (B, T, V)
    ids : int ndarray (B, T + 1), each in [0, V)

    Returns
    -------
    loss : float
    cache : CrossEntropyCache, for :func:`lm_loss_backward`
    """
    if np.ndim(logits) != 3:
        raise NumpyTransformerError(f"logits must have shape (B, T, V), got {np.shape(logits)}")
    B, T, V = np.shape(logits)
    ids = np.asarray(ids)
    if ids.shape != (B, T + 1) or ids.dtype.kind not in "iu" or not ids.size or ids.min() < 0 or ids.max() >= V:
        raise NumpyTransformerError(f"ids must be integers in [0, {V}) of shape {(B, T + 1)} (one more than the "
                                    f"logits' positions), got {ids.dtype} of shape {ids.shape}")
    targets = ids[:, 1:]  # (B, T): what follows each position
    return softmax_cross_entropy_forward(np.asarray(logits), targets)


def lm_loss_backward(dloss: float, cache: CrossEntropyCache) -> np.ndarray:
    """dlogits (B, T, V) of :func:`lm_loss_forward`: the cross-entropy's gradient at every position,
    ``dloss * (p - onehot(next id)) / (B T)``. Derived in lesson 2 (Softmax and cross-entropy), §4."""
    return softmax_cross_entropy_backward(dloss, cache)


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
