"""Adam, the Noam learning-rate schedule, and gradient clipping by global norm. Derived in lesson 8 (Training).

Beside them, siblings that no lesson derives, each a real option of the trainer: the Lion
optimiser (``--optimizer lion``), the cosine schedule with linear warm-up (``--schedule cosine``),
and the exponential moving average of the weights (``--ema``).
"""
from __future__ import annotations

import math

from typing import Dict, Optional

import numpy as np

from ..errors import NumpyTransformerError
from ..core.kernels import kernels
from ..validation import check_int, check_real

__all__ = ["Adam", "Lion", "EMA", "NoamSchedule", "CosineSchedule", "clip_grad_norm", "global_norm"]


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
        return self.factor * self.d_model ** -0.5 * min(step ** -0.5, step * self.warmup ** -1.5)


class CosineSchedule:
    """Linear warm-up to a peak, then a half cosine down to a floor at the run's last update.

    .. math:: \\text{lr}(s) = \\begin{cases} \\eta\\, s / w & s \\le w \\\\
              \\eta_{min} + \\tfrac12 (\\eta - \\eta_{min}) \\big(1 + \\cos(\\pi \\tfrac{s - w}{n - w})\\big)
              & w < s \\le n \\\\ \\eta_{min} & s > n \\end{cases}
              \\qquad \\eta_{min} = r\\, \\eta

    with peak :math:`\\eta`, ``warmup`` :math:`w`, the run's ``total`` updates :math:`n` and the floor's
    ratio :math:`r` (Loshchilov & Hutter's SGDR, 2017, without restarts; the schedule of GPT-3 and
    Chinchilla). Unlike Noam's, the decay knows where the run ends: it is flat near the peak, steepest
    half-way, and flat again near the floor. Sibling of lesson 8 §3's :class:`NoamSchedule`.

    Parameters
    ----------
    peak : float
        The highest rate, reached at step ``warmup``.
    warmup : int
        Updates of the linear rise.
    min_ratio : float
        The floor as a share of the peak, in [0, 1].
    """

    def __init__(self, peak: float, warmup: int, min_ratio: float = 0.1):
        self.peak = check_real(peak, "peak", 0.0, low_open=True)
        self.warmup = check_int(warmup, "warmup", 1)
        self.min_ratio = check_real(min_ratio, "min_ratio", 0.0, 1.0)

    def __call__(self, step: int, total: int) -> float:
        """The learning rate for update number ``step`` (counting from 1) of a run of ``total`` updates
        (the trainer plans ``total`` at each epoch's start). With ``total <= warmup`` the run ends
        in the rise."""
        step = max(int(step), 1)
        total = check_int(total, "total", 1)
        w, peak, floor = self.warmup, self.peak, self.min_ratio * self.peak
        ### BEGIN SOLUTION 8.1: the rate at step: the linear rise, the half cosine from peak to floor, then the floor
        if step <= w:
            return peak * step / w
        progress = min(1.0, (step - w) / max(total - w, 1))  # 0 at the peak, 1 at the run's last update
        return floor + 0.5 * (peak - floor) * (1 + math.cos(math.pi * progress))
        ### END SOLUTION


def global_norm(grads: Dict[str, np.ndarray]) -> float:
    """:math:`\\sqrt{\\sum_i \\lVert g_i \\rVert^2}` over every gradient tensor.

    Each tensor's sum of squares is taken in its own dtype, the total in float64.
    Derived in lesson 8 (Training), §4.
    """
    return float(np.sqrt(sum(float(g.ravel() @ g.ravel()) for g in grads.values())))


def clip_grad_norm(grads: Dict[str, np.ndarray], max_norm: float) -> float:
    """Scale all gradients in place so that their global norm is at most ``max_norm``.

    Returns the norm before clipping (useful to log). Like PyTorch's ``clip_grad_norm_``.
    Derived in lesson 8 (Training), §4.
    """
    max_norm = check_real(max_norm, "max_norm", 0.0, low_open=True)
    norm = global_norm(grads)
    if not np.isfinite(norm):
        raise FloatingPointError(f"gradient norm is {norm}: the loss diverged (lower the learning rate)")
    if norm > max_norm:
        scale = max_norm / (norm + 1e-6)
        for g in grads.values():
            g *= scale  # in place: the modules hold their gradient arrays
    return norm


def _check_grads(params: Dict[str, np.ndarray], grads: Dict[str, np.ndarray]) -> None:
    """Refuse gradients whose keys, shapes or dtypes are not the parameters'."""
    if grads.keys() != params.keys():
        missing = set(params) ^ set(grads)
        raise ValueError(f"grads and params must have the same keys; these differ: {sorted(missing)[:5]}")
    for k, p in params.items():
        if grads[k].shape != p.shape or grads[k].dtype != p.dtype:
            raise ValueError(f"grads[{k!r}] has shape {grads[k].shape} and dtype {grads[k].dtype}, "
                             f"expected shape {p.shape} and dtype {p.dtype} like the parameter")


def _decay_matrices(params: Dict[str, np.ndarray], rate: float) -> None:
    """Decoupled weight decay: scale every matrix (not the biases nor LayerNorm's gain and shift) by
    ``1 - rate`` in place, whatever its gradient."""
    for p in params.values():
        if p.ndim >= 2:
            p *= p.dtype.type(1 - rate)


class _Momentum:
    """What Adam and Lion share: the live parameters, a rate (a constant or a schedule), two betas,
    decoupled weight decay, the step count and the first moment ``m``."""

    def __init__(self, params: Dict[str, np.ndarray], lr, betas, weight_decay: float):
        self.params = params
        self.lr = lr if callable(lr) else check_real(lr, "lr", 0.0)
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise NumpyTransformerError(f"betas must be a pair (beta1, beta2), got {betas!r}")
        self.beta1 = check_real(betas[0], "betas[0]", 0.0, 1.0, high_open=True)
        self.beta2 = check_real(betas[1], "betas[1]", 0.0, 1.0, high_open=True)
        self.weight_decay = check_real(weight_decay, "weight_decay", 0.0)
        self.t = 0
        self.m = {k: np.zeros_like(p) for k, p in params.items()}

    def current_lr(self, step: Optional[int] = None) -> float:
        step = self.t if step is None else step
        return float(self.lr(step)) if callable(self.lr) else float(self.lr)


class Adam(_Momentum):
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

    #: The name a checkpoint records with the optimiser's state (``--optimizer``).
    name = "adam"

    def __init__(self, params: Dict[str, np.ndarray], lr=1e-3, betas=(0.9, 0.98), eps: float = 1e-9,
                 weight_decay: float = 0.0):
        super().__init__(params, lr, betas, weight_decay)
        self.eps = check_real(eps, "eps", 0.0, low_open=True)
        self.v = {k: np.zeros_like(p) for k, p in params.items()}

    def step(self, grads: Dict[str, np.ndarray]) -> float:
        """Apply one update from ``grads`` (same keys as the params); returns the learning rate used."""
        _check_grads(self.params, grads)
        self.t += 1
        lr = self.current_lr(self.t)
        if self.weight_decay:  # AdamW's decay: shrink the matrices toward 0, whatever their gradient
            _decay_matrices(self.params, lr * self.weight_decay)
        if kernels.adam_step is not None:  # the fast path binds it (fast.use_fast): the same update, one scratch array
            kernels.adam_step(self, grads, lr)
            return lr
        b1, b2, eps, t = self.beta1, self.beta2, self.eps, self.t
        for k, p in self.params.items():
            g = grads[k]
            self.m[k] = b1 * self.m[k] + (1 - b1) * g  # first moment: a running mean of g
            self.v[k] = b2 * self.v[k] + (1 - b2) * g * g  # second moment: a running mean of g^2
            m_hat = self.m[k] / (1 - b1 ** t)  # bias corrections: m and v start at 0
            v_hat = self.v[k] / (1 - b2 ** t)
            p -= lr * m_hat / (np.sqrt(v_hat) + eps)  # in place: the model holds p
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


class Lion(_Momentum):
    """Lion (Chen et al., 2023, "Symbolic Discovery of Optimization Algorithms"): the sign of an
    interpolation of momentum and gradient, so every weight moves by ``lr`` a step (decay aside).

    .. math:: c = \\beta_1 m + (1-\\beta_1) g,\\quad \\theta \\leftarrow \\theta - \\text{lr}\\,\\mathrm{sign}(c),
              \\quad m \\leftarrow \\beta_2 m + (1-\\beta_2) g

    One moment instead of Adam's two (half the state), no square root and no bias correction: the
    sign makes the step's size independent of the gradient's scale. As that step is larger than
    Adam's typical one, Lion wants a learning rate 3 to 10 times smaller and a weight decay as many
    times larger. Sibling of lesson 8 §2's :class:`Adam`, with the same interface.

    Parameters
    ----------
    params : dict name -> ndarray
        The live parameter arrays (``model.parameters()``), updated in place.
    lr : float or callable
        A constant, or a schedule ``lr(step)``.
    betas : (float, float)
        :math:`\\beta_1` weighs the momentum in the update, :math:`\\beta_2` in the momentum's own
        running mean; the paper's defaults (0.9, 0.99).
    weight_decay : float
        Decoupled weight decay, as :class:`Adam`'s: before each update every matrix is scaled by
        ``1 - lr * weight_decay``.
    """

    #: The name a checkpoint records with the optimiser's state (``--optimizer``).
    name = "lion"

    def __init__(self, params: Dict[str, np.ndarray], lr=1e-4, betas=(0.9, 0.99), weight_decay: float = 0.0):
        super().__init__(params, lr, betas, weight_decay)

    def step(self, grads: Dict[str, np.ndarray]) -> float:
        """Apply one update from ``grads`` (same keys as the params); returns the learning rate used."""
        _check_grads(self.params, grads)
        self.t += 1
        lr = self.current_lr(self.t)
        if self.weight_decay:
            _decay_matrices(self.params, lr * self.weight_decay)
        b1, b2 = self.beta1, self.beta2
        ### BEGIN SOLUTION 8.2: the direction c from the momentum and the gradient, the signed step of every parameter in place, then the momentum self.m
        for k, p in self.params.items():
            g = grads[k]
            c = b1 * self.m[k] + (1 - b1) * g  # the update's direction: momentum and gradient mixed
            p -= lr * np.sign(c)  # in place: the model holds p; every weight moves by lr (or not at all)
            self.m[k] = b2 * self.m[k] + (1 - b2) * g  # the momentum: a slower running mean of g
        ### END SOLUTION
        return lr

    # ---- checkpointing --------------------------------------------------
    def state_arrays(self) -> Dict[str, np.ndarray]:
        """The momentum as a flat dict of arrays (for an ``.npz``)."""
        return {f"lion.m.{k}": v for k, v in self.m.items()}

    def load_state_arrays(self, arrays: Dict[str, np.ndarray], t: int) -> None:
        for k in self.params:
            key = f"lion.m.{k}"
            if key not in arrays:
                raise KeyError(f"optimiser state has no entry {key!r}: the checkpoint does not match this model")
            if arrays[key].shape != self.m[k].shape:
                raise ValueError(f"optimiser state {key!r} has shape {arrays[key].shape}, expected {self.m[k].shape}")
            self.m[k][...] = arrays[key]
        self.t = int(t)


class EMA:
    """An exponential moving average of the weights (Polyak averaging; Polyak & Juditsky, 1992), kept
    beside the model while it trains:

    .. math:: \\bar\\theta \\leftarrow \\beta\\, \\bar\\theta + (1 - \\beta)\\, \\theta

    after every update, with decay :math:`\\beta`; the average starts at the weights given. It
    remembers about the last :math:`1 / (1 - \\beta)` updates, and smooths out the noise of the
    last steps as averaging the checkpoints of the last epochs does, without storing them. A
    sibling of lesson 8 §2's running means in :class:`Adam` (the same update, on the weights
    instead of the gradient) and of checkpoint averaging
    (:func:`~numpytransformer.training.checkpoint.average_checkpoints`).

    Parameters
    ----------
    params : dict name -> ndarray
        The weights to average (``model.parameters()``); copied, not held.
    decay : float in (0, 1)
        :math:`\\beta`; 0.999 averages over about a thousand updates.
    """

    def __init__(self, params: Dict[str, np.ndarray], decay: float):
        self.decay = check_real(decay, "decay", 0.0, 1.0, low_open=True, high_open=True)
        self.shadow = {k: np.array(p, copy=True) for k, p in params.items()}

    def update(self, params: Dict[str, np.ndarray]) -> None:
        """Move the average one step towards ``params`` (the same names and shapes as at the start)."""
        self._check(params, "params")
        decay = self.decay
        ### BEGIN SOLUTION 8.3: for every parameter, the average moved one step towards the new weights, into self.shadow
        for k, p in params.items():
            self.shadow[k] = decay * self.shadow[k] + (1 - decay) * p
        ### END SOLUTION

    def copy_to(self, params: Dict[str, np.ndarray]) -> None:
        """Write the average into the arrays ``params`` (a model's), in place."""
        self._check(params, "params")
        for k, p in params.items():
            p[...] = self.shadow[k]

    # ---- checkpointing --------------------------------------------------
    def state_arrays(self) -> Dict[str, np.ndarray]:
        """The average, by parameter name: the weights of a model (the trainer saves them as ``ema/``)."""
        return dict(self.shadow)

    def load_state_arrays(self, arrays: Dict[str, np.ndarray]) -> None:
        """Take the average from ``arrays`` (by parameter name, as :meth:`state_arrays` gives it)."""
        self._check(arrays, "arrays")
        for k, a in arrays.items():
            self.shadow[k] = np.array(a, dtype=self.shadow[k].dtype, copy=True)

    def _check(self, arrays: Dict[str, np.ndarray], name: str) -> None:
        if not isinstance(arrays, dict) or set(arrays) != set(self.shadow):
            differ = sorted(set(arrays) ^ set(self.shadow)) if isinstance(arrays, dict) else type(arrays).__name__
            raise NumpyTransformerError(f"{name} must hold the averaged parameters by name; these differ: {differ}")
        for k, a in arrays.items():
            if np.shape(a) != self.shadow[k].shape:
                raise NumpyTransformerError(f"{name}[{k!r}] has shape {np.shape(a)}, expected {self.shadow[k].shape}")
