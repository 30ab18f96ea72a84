"""Pieces every task shares: one training step through the loss, and a mean loss."""
from __future__ import annotations

from typing import Iterable, Tuple

import numpy as np

from ..losses import cross_entropy


def loss_and_backward(model, inputs: Tuple[np.ndarray, ...], targets: np.ndarray, pad_id, label_smoothing: float,
                      scale: float = 1.0) -> Tuple[float, int]:
    """Forward, cross-entropy, backward (gradients scaled by ``scale``, for accumulation).

    Returns the batch's mean loss and how many targets counted (pad excluded).
    """
    logits = model.forward(*inputs)
    loss, dlogits = cross_entropy(logits, targets, pad_id=pad_id, label_smoothing=label_smoothing)
    if not np.isfinite(loss):
        raise FloatingPointError(f"the loss became {loss}: training diverged; lower --lr-factor or raise --warmup")
    if scale != 1.0:
        dlogits *= dlogits.dtype.type(scale)
    model.backward(dlogits)
    return loss, int(targets.size if pad_id is None else (targets != pad_id).sum())


def mean_loss(model, batches: Iterable[Tuple[tuple, np.ndarray]], pad_id) -> float:
    """Token-weighted mean cross-entropy (no smoothing) over ``(inputs, targets)`` batches."""
    total, n = 0.0, 0
    for inputs, targets in batches:
        loss, _ = cross_entropy(model.forward(*inputs), targets, pad_id=pad_id)
        k = int(targets.size if pad_id is None else (targets != pad_id).sum())
        total, n = total + loss * k, n + k
    return total / max(n, 1)
