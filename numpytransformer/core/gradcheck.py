"""Finite-difference gradient checks: the proof behind every backward pass.

Centred differences,

.. math:: \\frac{\\partial L}{\\partial x_i} \\approx
          \\frac{L(x + h e_i) - L(x - h e_i)}{2h},

with :math:`L = \\sum \\text{out} \\odot \\text{dout}` for a random ``dout``, so one
scalar checks the whole vector-Jacobian product that a backward pass computes.
Run checks in float64: with ``h = 1e-5`` the truncation error is about ``h**2``
and the rounding error about ``1e-16 / h``, both far below the ``1e-7`` target.
"""
from __future__ import annotations

from typing import Callable, Dict, Iterable, Optional, Sequence

import numpy as np

__all__ = [
    "SMOOTH_TOL",
    "KINK_TOL",
    "WHOLE_MODEL_TOL",
    "ZERO_ATOL",
    "numerical_gradient",
    "numerical_gradient_entries",
    "rel_error",
    "check_pair",
    "check_module",
]


def rel_error(a: np.ndarray, b: np.ndarray) -> float:
    """Relative error between two arrays, in the max norm.

    .. math:: \\text{rel}(a, b) = \\frac{\\max_i |a_i - b_i|}{\\max(\\max_i |a_i|, \\max_i |b_i|)}

    It is scale invariant and does not blow up on entries that are zero in both
    arrays. Two all-zero arrays have error 0.
    """
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"rel_error: shapes differ, a {a.shape} and b {b.shape}")
    scale = max(np.max(np.abs(a), initial=0.0), np.max(np.abs(b), initial=0.0))
    if scale == 0.0:
        return 0.0
    return float(np.max(np.abs(a - b)) / scale)


def numerical_gradient(
    f: Callable[[np.ndarray], np.ndarray], x: np.ndarray, dout, h: float = 1e-5
) -> np.ndarray:
    """Centred-difference gradient of ``sum(f(x) * dout)`` with respect to ``x``.

    Parameters
    ----------
    f : callable
        ``f(x)`` returns an array (or a scalar). ``x`` is perturbed *in place* and
        restored, so ``f`` may also ignore its argument and read ``x`` through a closure
        (a module's parameter, for example).
    x : ndarray, float64
    dout : ndarray or float
        Upstream gradient, broadcastable to ``f(x)``.
    h : float
        Step size.
    """
    return numerical_gradient_entries(f, x, dout, np.ndindex(*x.shape), h).reshape(x.shape)


def numerical_gradient_entries(f, x: np.ndarray, dout, indices: Iterable, h: float = 1e-5) -> np.ndarray:
    """Like :func:`numerical_gradient` but only at the given multi-indices (a 1-D result)."""
    if x.dtype != np.float64:
        raise TypeError(f"numerical_gradient: x must be float64 for a meaningful check, got {x.dtype}")
    out = []
    for idx in indices:
        old = x[idx]
        x[idx] = old + h
        plus = np.sum(np.asarray(f(x), dtype=np.float64) * dout)
        x[idx] = old - h
        minus = np.sum(np.asarray(f(x), dtype=np.float64) * dout)
        x[idx] = old
        out.append((plus - minus) / (2 * h))
    return np.array(out, dtype=np.float64)


#: The targets every check uses, the tests' and the grader's (``exercises/trusted.py``) alike.
#: A smooth operation's centred difference errs by about ``h**2`` (truncation) plus ``1e-16 / h``
#: (rounding), both near 1e-10 with ``h = 1e-5``, so 1e-7 leaves room without hiding a wrong term.
SMOOTH_TOL = 1e-7
#: Near a kink (ReLU, a mask) a step can land close to the non-smooth point, and a whole layer or
#: model adds float64 rounding over a long chain of operations: 1e-5 there.
KINK_TOL = 1e-5
WHOLE_MODEL_TOL = KINK_TOL
#: Below this magnitude a numerical gradient is finite-difference noise (about
#: ``1e-16 * |L| / h``); comparing to it relatively would be meaningless.
ZERO_ATOL = 1e-7


def _grad_error(analytic: np.ndarray, numeric: np.ndarray) -> float:
    """Relative error, or the absolute error for a gradient that is zero.

    Some gradients are exactly zero in exact arithmetic, for example that of the key
    bias ``b_k`` (adding a constant to every score of a row leaves the softmax
    unchanged). Both sides are then noise, and their absolute difference is reported.
    """
    if np.max(np.abs(numeric), initial=0.0) < ZERO_ATOL:
        return float(np.max(np.abs(np.asarray(analytic, np.float64) - numeric), initial=0.0))
    return rel_error(analytic, numeric)


def check_pair(
    forward: Callable,
    backward: Callable,
    inputs: Dict[str, np.ndarray],
    wrt: Sequence[Optional[str]],
    seed: int = 0,
    h: float = 1e-5,
    **static,
) -> Dict[str, float]:
    """Check every gradient a ``*_backward`` returns against finite differences.

    Parameters
    ----------
    forward : callable
        ``forward(**inputs, **static) -> (out, cache)``.
    backward : callable
        ``backward(dout, cache)`` returning one gradient or a tuple of gradients.
    inputs : dict of name -> float64 ndarray
        The differentiable arguments of ``forward``.
    wrt : sequence of str or None
        The argument name of each gradient ``backward`` returns, in order; ``None``
        for a returned value that is not checked.
    static : keyword arguments passed unchanged to ``forward`` (masks, ids, eps ...).

    Returns
    -------
    dict of name -> relative error (see :func:`rel_error`); for a gradient that is
    zero up to finite-difference noise, the absolute error instead.
    """
    rng = np.random.default_rng(seed)
    # The backward works on copies: one that writes into dout or an input (through its
    # cache) must not change what the finite differences are computed from.
    pristine = {k: np.array(v, copy=True) for k, v in inputs.items()}
    out, cache = forward(**{k: v.copy() for k, v in pristine.items()}, **static)
    dout = rng.standard_normal(np.shape(out))
    grads = backward(dout.copy(), cache)
    if not isinstance(grads, tuple):
        grads = (grads,)
    inputs = {k: v.copy() for k, v in pristine.items()}
    if len(grads) != len(wrt):
        raise ValueError(f"check_pair: backward returned {len(grads)} gradients but wrt names {len(wrt)}")
    errors = {}
    for name, analytic in zip(wrt, grads):
        if name is None:
            continue
        x = inputs[name]
        numeric = numerical_gradient(lambda _: forward(**inputs, **static)[0], x, dout, h)
        errors[name] = _grad_error(analytic, numeric)
    return errors


def check_module(module, inputs: Sequence, input_names: Sequence[Optional[str]] = (),
                 seed: int = 0, h: float = 1e-5, max_entries: Optional[int] = None,
                 dout: Optional[np.ndarray] = None) -> Dict[str, float]:
    """Check a module's input gradients and every parameter gradient.

    ``module.forward(*inputs)`` is run with dropout fixed: the state of every random
    generator ``rng`` held by the module or its children is restored before each
    forward, so every evaluation draws the same masks.

    It calls ``module.zero_grad()`` before its own backward pass, so the module's
    gradients afterwards are those of that one pass: save any you still need first.

    Parameters
    ----------
    module : Module
    inputs : sequence
        Positional arguments of ``forward``.
    input_names : sequence of str or None
        One entry per input: a name for each float input whose gradient ``backward``
        returns (in that order), ``None`` for inputs that are not differentiated.
    max_entries : int, optional
        Check only this many random entries of each tensor (for large models).
    dout : ndarray, optional
        The upstream gradient; random normal by default. A model check passes one that
        is zero at pad targets, as the loss is: the pad embedding row is then truly
        without gradient.

    Returns
    -------
    dict of name -> relative error (absolute for a zero gradient, as in
    :func:`check_pair`); inputs under their given names, parameters under their
    dotted names.
    """
    rng = np.random.default_rng(seed)
    # Every generator the module or its children draw masks from, restored before
    # each forward so that every evaluation sees the same dropout masks.
    gens = {}
    for _, m in module.named_modules() if hasattr(module, "named_modules") else []:
        gen = getattr(m, "rng", None)
        if gen is not None:
            gens[id(gen)] = gen
    states = {k: g.bit_generator.state for k, g in gens.items()}

    def run():
        for k, g in gens.items():
            g.bit_generator.state = states[k]
        return module.forward(*inputs)

    out = run()
    if dout is None:
        dout = rng.standard_normal(np.shape(out))
    module.zero_grad()
    dx = module.backward(dout)
    if not isinstance(dx, tuple):
        dx = (dx,)
    differentiable = [(n, inputs[i]) for i, n in enumerate(input_names) if n is not None]
    if len(differentiable) > len(dx):
        raise ValueError(f"check_module: {len(differentiable)} inputs are named but backward returned "
                         f"{len(dx)} gradients")
    targets = {name: (x, g) for (name, x), g in zip(differentiable, dx)}
    params, grads = module.parameters(), module.gradients()
    for name in params:
        targets[name] = (params[name], grads[name].copy())

    errors = {}
    for name, (x, analytic) in targets.items():
        if max_entries is None or x.size <= max_entries:
            idx = list(np.ndindex(*x.shape))
        else:
            flat = rng.choice(x.size, size=max_entries, replace=False)
            idx = [np.unravel_index(i, x.shape) for i in flat]
        numeric = numerical_gradient_entries(lambda _: run(), x, dout, idx, h)
        picked = np.array([analytic[i] for i in idx])
        errors[name] = _grad_error(picked, numeric)
    return errors
