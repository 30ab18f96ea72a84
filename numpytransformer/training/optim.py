"""Adam, the Noam learning-rate schedule, and gradient clipping by global norm. Derived in lesson 8 (Training)."""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np

from ..errors import NumpyTransformerError
from ..nn.module import FAST_FORMS
from ..validation import check_int, check_real

__all__ = ["Adam", "NoamSchedule", "clip_grad_norm", "global_norm"]


class NoamSchedule:
    """The paper's schedule (section 5.3): linear warm-up, then inverse square root decay.

    .. math:: \\text{lr}(s) = f \\cdot d_{model}^{-0.5} \\cdot \\min(s^{-0.5},\\; s \\cdot w^{-1.5})

    The two branches meet at ``s = warmup``, where the rate peaks. Derived in lesson 8 (Training), §3.
    """

    def __init__(self, d_model: int, warmup: int = 4000, factor: float = 1.0):
        self.d_model = check_int(d_model, "d_model", 1)
        self.warmup = check_int(warmup, "warmup", 1)
        self.factor = check_real(factor, "factor", 0.0, low_open=True)

    def __call__(self, step: int) -> float:
        """The learning rate for update number ``step`` (counting from 1)."""
        step = max(int(step), 1)
        ### BEGIN SOLUTION 8.1: the learning rate: linear warm-up to a peak at step warmup, then 1/sqrt(step) decay
        return self.factor * self.d_model ** -0.5 * min(step ** -0.5, step * self.warmup ** -1.5)
        ### END SOLUTION


def global_norm(grads: Dict[str, np.ndarray]) -> float:
    """:math:`\\sqrt{\\sum_i \\lVert g_i \\rVert^2}` over every gradient tensor.

    Each tensor's sum of squares is taken in its own dtype, the total in float64.
    Derived in lesson 8 (Training), §4.
    """
    ### BEGIN SOLUTION 8.3: norm of all gradients; scale them all in place if norm > max_norm
    return float(np.sqrt(sum(float(g.ravel() @ g.ravel()) for g in grads.values())))
    ### END SOLUTION


def clip_grad_norm(grads: Dict[str, np.ndarray], max_norm: float) -> float:
    """Scale all gradients in place so that their global norm is at most ``max_norm``.

    Returns the norm before clipping (useful to log). Like PyTorch's ``clip_grad_norm_``.
    Derived in lesson 8 (Training), §4.
    """
    max_norm = check_real(max_norm, "max_norm", 0.0, low_open=True)
    ### BEGIN SOLUTION 8.3: norm of all gradients; scale them all in place if norm > max_norm
    norm = global_norm(grads)
    if not np.isfinite(norm):
        raise FloatingPointError(f"gradient norm is {norm}: the loss diverged (lower the learning rate)")
    if norm > max_norm:
        scale = max_norm / (norm + 1e-6)
        for g in grads.values():
            g *= scale  # in place: the modules hold their gradient arrays
    ### END SOLUTION
    return norm


class Adam:
    """Adam (Kingma & Ba, 2015) with the paper's defaults beta1=0.9, beta2=0.98, eps=1e-9.

    .. math:: m \\leftarrow \\beta_1 m + (1-\\beta_1) g,\\quad v \\leftarrow \\beta_2 v + (1-\\beta_2) g^2,\\quad
              \\theta \\leftarrow \\theta - \\text{lr}\\,\\frac{m / (1-\\beta_1^t)}{\\sqrt{v / (1-\\beta_2^t)} + \\epsilon}

    Parameters are updated in place, so the model's arrays change under it. Derived in
    lesson 8 (Training), §2.

    Parameters
    ----------
    params : dict name -> ndarray
        The live parameter arrays (``model.parameters()``).
    lr : float or callable
        A constant, or a schedule ``lr(step)`` such as :class:`NoamSchedule`.
    weight_decay : float
        Decoupled weight decay (AdamW, Loshchilov & Hutter, 2019): before each update every
        matrix (embeddings included; not the biases nor LayerNorm's gain and shift) is scaled
        by ``1 - lr * weight_decay``, apart from the gradient's moments. 0 (the default) is Adam.
    """

    def __init__(self, params: Dict[str, np.ndarray], lr=1e-3, betas=(0.9, 0.98), eps: float = 1e-9,
                 weight_decay: float = 0.0):
        self.params = params
        self.lr = lr if callable(lr) else check_real(lr, "lr", 0.0)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise NumpyTransformerError(f"betas must be a pair (beta1, beta2), got {betas!r}")
        self.beta1 = check_real(betas[0], "betas[0]", 0.0, 1.0, high_open=True)
        self.beta2 = check_real(betas[1], "betas[1]", 0.0, 1.0, high_open=True)
        self.eps = check_real(eps, "eps", 0.0, low_open=True)
        self.weight_decay = check_real(weight_decay, "weight_decay", 0.0)
        self.t = 0
        self.m = {k: np.zeros_like(p) for k, p in params.items()}
        self.v = {k: np.zeros_like(p) for k, p in params.items()}

    def current_lr(self, step: Optional[int] = None) -> float:
        step = self.t if step is None else step
        return float(self.lr(step)) if callable(self.lr) else float(self.lr)

    def step(self, grads: Dict[str, np.ndarray]) -> float:
        """Apply one update from ``grads`` (same keys as the params); returns the learning rate used."""
        if grads.keys() != self.params.keys():
            missing = set(self.params) ^ set(grads)
            raise ValueError(f"grads and params must have the same keys; these differ: {sorted(missing)[:5]}")
        for k, p in self.params.items():
            if grads[k].shape != p.shape or grads[k].dtype != p.dtype:
                raise ValueError(f"grads[{k!r}] has shape {grads[k].shape} and dtype {grads[k].dtype}, "
                                 f"expected shape {p.shape} and dtype {p.dtype} like the parameter")
        self.t += 1
        lr = self.current_lr(self.t)
        if self.weight_decay:  # AdamW's decay: shrink the matrices toward 0, whatever their gradient
            for p in self.params.values():
                if p.ndim >= 2:
                    p *= p.dtype.type(1 - lr * self.weight_decay)
        if FAST_FORMS:  # the fast path is on (fast.use_fast fills FAST_FORMS): the same update, one scratch array
            from ..core.fast import adam_step  # here, not at the top: fast.py sits beside the pairs and imports them

            adam_step(self, grads, lr)
            return lr
        b1, b2, eps, t = self.beta1, self.beta2, self.eps, self.t
        ### BEGIN SOLUTION 8.2: update the moments self.m, self.v and every parameter in place, bias-corrected
        for k, p in self.params.items():
            g = grads[k]
            self.m[k] = b1 * self.m[k] + (1 - b1) * g  # first moment: a running mean of g
            self.v[k] = b2 * self.v[k] + (1 - b2) * g * g  # second moment: a running mean of g^2
            m_hat = self.m[k] / (1 - b1 ** t)  # bias corrections: m and v start at 0
            v_hat = self.v[k] / (1 - b2 ** t)
            p -= lr * m_hat / (np.sqrt(v_hat) + eps)  # in place: the model holds p
        ### END SOLUTION
        return lr

    # ---- checkpointing --------------------------------------------------
    def state_arrays(self) -> Dict[str, np.ndarray]:
        """Moments as a flat dict of arrays (for an ``.npz``)."""
        out = {f"adam.m.{k}": v for k, v in self.m.items()}
        out.update({f"adam.v.{k}": v for k, v in self.v.items()})
        return out

    def load_state_arrays(self, arrays: Dict[str, np.ndarray], t: int) -> None:
        for k in self.params:
            for name, store in (("m", self.m), ("v", self.v)):
                key = f"adam.{name}.{k}"
                if key not in arrays:
                    raise KeyError(f"optimiser state has no entry {key!r}: the checkpoint does not match this model")
                if arrays[key].shape != store[k].shape:
                    raise ValueError(f"optimiser state {key!r} has shape {arrays[key].shape}, "
                                     f"expected {store[k].shape}")
                store[k][...] = arrays[key]
        self.t = int(t)
